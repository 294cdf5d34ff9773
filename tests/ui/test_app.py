"""The dashboard over HTTP (no browser): read-only, secure by default, one clear line for bad
input, and readers that leave the projector alone."""

from __future__ import annotations

import warnings

import pytest
from typer.testing import CliRunner

from gpuledger.projections.store import Projector, rebuild
from gpuledger.projections.ui.app import create_app
from gpuledger.replay.logio import write_log
from gpuledger.services.cli.main import app as cli
from tests.projections import scenario

with warnings.catch_warnings():  # Starlette prefers `httpx2`; httpx (a dev dependency) works
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    d = tmp_path_factory.mktemp("uiapp")
    messages = scenario.build()
    rebuild(messages, d / "projection.duckdb")
    (d / "logs").mkdir()
    write_log(d / "logs" / "a.jsonl", messages)
    (d / "secret.jsonl").write_text("{}\n")
    return d


def client(db, **kw) -> TestClient:
    return TestClient(create_app(db / "projection.duckdb", **kw), base_url="http://127.0.0.1")


def test_pages_answer_with_security_headers_and_only_to_get(db):
    c = client(db)
    for path in ("/cluster", "/queue", "/jobs/train-b", "/tenants", "/whatif", "/static/ui.js"):
        r = c.get(path)
        assert r.status_code == 200, path
        assert "script-src 'self'" in r.headers["content-security-policy"]
        assert r.headers["x-content-type-options"] == "nosniff"
    assert c.post("/queue").status_code == 405
    assert '<script src="/static/ui.js">' in c.get("/cluster").text
    assert "http" not in c.get("/cluster").text.split("<main", 1)[0].replace(
        "http-equiv", ""
    )  # no CDN


def test_another_host_header_is_refused(db):
    c = TestClient(create_app(db / "projection.duckdb"), base_url="http://evil.example")
    assert c.get("/cluster").status_code == 400  # DNS rebinding: only localhost names by default


def test_unknown_job_is_404_and_escaped(db):
    r = client(db).get("/jobs/%3Cscript%3E")
    assert r.status_code == 404
    assert "<script>" not in r.text.split("<main", 1)[1] and "&lt;script&gt;" in r.text


def test_tenant_header_from_a_proxy_confines_each_request(db):
    c = client(db, tenant_header="X-Tenant")
    assert c.get("/queue").status_code == 403
    r = c.get("/queue", headers={"X-Tenant": "org/a"})
    assert r.status_code == 200 and "train-b" not in r.text
    assert c.get("/jobs/train-b", headers={"X-Tenant": "org/a"}).status_code == 404
    assert c.get("/jobs/train-b", headers={"X-Tenant": "org/b"}).status_code == 200
    assert c.get("/whatif", headers={"X-Tenant": "org/b"}).status_code == 403


def test_whatif_opens_only_files_of_its_folder(db):
    c = client(db, whatif_dir=db / "logs")
    assert c.get("/whatif").status_code == 200
    r = c.get("/whatif", params={"a": "a.jsonl", "b": "../secret.jsonl"})
    assert (
        r.status_code == 400 and "no log &#39;../secret.jsonl&#39; in the what-if folder" in r.text
    )


def test_a_missing_projection_is_a_clear_503(tmp_path):
    r = TestClient(create_app(tmp_path / "none.duckdb"), base_url="http://127.0.0.1").get(
        "/cluster"
    )
    assert r.status_code == 503 and "no projection at" in r.text


def test_the_live_feed_opens_the_file_only_when_it_changed(db):
    from gpuledger.projections.ui.app import Reader

    reader = Reader(db / "projection.duckdb")
    opened = []
    real = reader.read
    reader.read = lambda fn, *a, **k: opened.append(1) or real(fn, *a, **k)
    first = reader.last_seq()
    assert reader.last_seq() == first and reader.last_seq() == first
    assert len(opened) == 1
    with Projector(db / "projection.duckdb") as pj:  # the projector can write between reads
        assert pj.last_seq == first


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--port", "0"], "error: --port: 0 is not a TCP port"),
        (["--tenant", "a b"], "error: --tenant: "),
        (["--whatif-dir", "/nonexistent"], "error: --whatif-dir: /nonexistent is not a folder"),
        (["--data", "/nonexistent"], "error: no projection at /nonexistent/projection.duckdb"),
    ],
)
def test_bad_options_get_one_line(args, message):
    r = CliRunner().invoke(cli, ["ui", *args])
    assert r.exit_code == 2
    assert r.output.startswith(message) and len(r.output.strip().splitlines()) == 1


def test_a_projection_without_the_audit_views_says_so(db, tmp_path):
    import shutil

    import duckdb

    old = tmp_path / "old.duckdb"
    shutil.copy(db / "projection.duckdb", old)
    con = duckdb.connect(str(old))
    con.execute("DROP VIEW gpu_hours_daily")
    con.close()
    r = TestClient(create_app(old), base_url="http://127.0.0.1").get("/tenants")
    assert r.status_code == 503 and "Projection from an older gpuledger" in r.text


def test_while_another_process_holds_the_file_the_page_is_a_503_that_retries(db, tmp_path):
    import shutil
    import subprocess
    import sys

    held = tmp_path / "held.duckdb"
    shutil.copy(db / "projection.duckdb", held)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); "
            "print('ready', flush=True); time.sleep(30)",
            str(held),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "ready"
        r = TestClient(create_app(held, read_wait_s=0.3), base_url="http://127.0.0.1").get("/queue")
    finally:
        holder.kill()
        holder.wait()
    assert r.status_code == 503 and r.headers["retry-after"] == "2"
    assert "Projection busy" in r.text and 'data-retry="2"' in r.text


def test_the_whatif_folder_lists_logs_not_their_observation_files(tmp_path):
    from gpuledger.projections.ui.whatif import list_logs

    for name in ("a.jsonl", "a.observed.jsonl", "b.parquet"):
        (tmp_path / name).write_text("")
    assert list_logs(tmp_path) == ["a.jsonl", "b.parquet"]


def _table(html: str, table_id: str) -> list[list[str]]:
    """The body rows of the page's table `table_id`, as cell texts."""
    import re

    body = html.split(f'id="{table_id}"', 1)[1].split("</table>", 1)[0]
    return [
        [re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td>(.*?)</td>", row)]
        for row in re.findall(r"<tr>(.*?)</tr>", body.split("<tbody>", 1)[1])
    ]


def test_the_tenants_page_shows_gpuledger_reports_numbers(tmp_path):
    # given examples/users-report.yaml projected (research's alice and bob, prod's carol)
    import json

    from gpuledger.replay.scenario import load
    from gpuledger.replay.simulator import simulate
    from tests.projections.audit_cli import EXAMPLES

    rebuild(simulate(load(EXAMPLES / "users-report.yaml")).log, tmp_path / "projection.duckdb")
    out = CliRunner().invoke(cli, ["report", "--data", str(tmp_path), "-o", "json"])
    assert out.exit_code == 0, out.output
    rep = json.loads(out.output)
    # when the Tenants page is asked for
    html = client(tmp_path).get("/tenants").text
    # then it shows report's utilisation, tenants and users, to the hundredth
    assert _table(html, "report-utilisation") == [
        [c.replace("_", "-"), f"{u['gpu_hours']:.2f}", f"{u['pct']:.2f}%"]
        for c, u in rep["utilisation"].items()
    ]
    assert _table(html, "report-tenants") == [
        [r["tenant"], str(r["jobs"]), f"{r['gpu_hours']:.2f}", f"{r['pct']:.2f}%"]
        for r in rep["tenants"]
    ]
    users = _table(html, "report-users")
    assert users == [
        [r["tenant"], r["user"], str(r["jobs"]), f"{r['gpu_hours']:.2f}", f"{r['pct']:.2f}%"]
        for r in rep["users"]
    ]
    assert {(t, u) for t, u, *_ in users} == {
        ("research", "alice"),
        ("research", "bob"),
        ("prod", "carol"),
        ("prod", "-"),
    }
    # and a tenant confined by the proxy sees its own tenants and users only, no cluster split
    mine = client(tmp_path, tenant_header="X-Tenant").get("/tenants", headers={"X-Tenant": "prod"})
    assert {r[0] for r in _table(mine.text, "report-users")} == {"prod"}
    assert 'id="report-utilisation"' not in mine.text and "research" not in mine.text
