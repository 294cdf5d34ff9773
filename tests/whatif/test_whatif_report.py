"""`gpuledger whatif`: one log replayed under the recorded configuration and each variant,
written as one offline HTML report (inline SVG, no scripts, nothing fetched)."""

import json
import re
from pathlib import Path

from typer.testing import CliRunner

from gpuledger.replay.logio import write_log
from gpuledger.replay.scenario import load
from gpuledger.replay.simulator import simulate
from gpuledger.services.cli.main import app

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_whatif_writes_an_offline_report_with_every_section(tmp_path):
    log = tmp_path / "live.jsonl"
    write_log(log, simulate(load(EXAMPLES / "demo.yaml")).log)
    nopre = tmp_path / "nopre.yaml"
    nopre.write_text("policy: {preemption: false}\n")
    out, js = tmp_path / "report.html", tmp_path / "m.json"
    r = CliRunner().invoke(
        app,
        [
            "whatif",
            str(log),
            "--policy",
            str(nopre),
            "--variant",
            "small-research: tenants.research.guaranteed=2",
            "--out",
            str(out),
            "--json",
            str(js),
            "--logs",
            str(tmp_path / "logs"),
        ],
    )
    assert r.exit_code == 0, r.output
    page = out.read_text()
    for heading in (
        "Comparison",
        "Queue wait by SLO class",
        "GPU allocation over time",
        "Preemptions and lost work",
        "Per-tenant fairness",
    ):
        assert f"<h2>{heading}</h2>" in page
    assert page.count("<svg") == 4
    assert "<script" not in page and not re.search(r"(src|href)=\"https?://", page)
    assert "policy.preemption=False" in page and "tenants.research.guaranteed=2" in page
    metrics = json.loads(js.read_text())
    assert list(metrics) == ["recorded", "nopre", "small-research"]
    assert metrics["recorded"]["metrics"]["preemptions"] >= 1
    assert metrics["nopre"]["metrics"]["preemptions"] == 0
    assert sorted(p.name for p in (tmp_path / "logs").iterdir()) == [
        "nopre.jsonl",
        "recorded.jsonl",
        "small-research.jsonl",
    ]
    assert "preemptions" in r.output and "wrote" in r.output


def test_whatif_bad_variant_is_one_line(tmp_path):
    log = tmp_path / "live.jsonl"
    write_log(log, simulate(load(EXAMPLES / "demo.yaml")).log)
    r = CliRunner().invoke(
        app,
        [
            "whatif",
            str(log),
            "--variant",
            "policy.preemtion=false",
            "--out",
            str(tmp_path / "r.html"),
        ],
    )
    assert r.exit_code == 2
    assert "policy.preemtion: unknown key (did you mean 'preemption'?)" in r.output


def test_the_report_is_a_template_that_escapes_every_name(tmp_path):
    """A log named with tags and quotes shows as text (Jinja2, autoescape on); the style sheet
    keeps its quotes (it is the template's own, not a value)."""
    log = tmp_path / "a<script>x'\".jsonl"
    write_log(log, simulate(load(EXAMPLES / "demo.yaml")).log)
    out = tmp_path / "report.html"
    r = CliRunner().invoke(app, ["whatif", str(log), "--out", str(out)])
    assert r.exit_code == 0, r.output
    page = out.read_text()
    assert "<script" not in page and "x'\"" not in page
    assert "a&lt;script&gt;x&#39;&#34;.jsonl" in page
    assert "'Segoe UI'" in page.split("</style>", 1)[0]
