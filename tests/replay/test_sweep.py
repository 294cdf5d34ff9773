"""`gpuledger whatif LOG --sweep FILE`: a list or grid of variants, each an independent task,
ranked by chosen metrics; every task comes back, as a result or as a listed failure.

These run in process (`--workers 1`); tests/replay/test_sweep_dask.py runs the same sweep on
a Dask LocalCluster and compares the digests."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuledger.replay.logio import read_log
from gpuledger.replay.sweep import rank
from gpuledger.replay.sweep.executors import InProcess, executor_for
from gpuledger.replay.sweep.run import run_sweep
from gpuledger.replay.sweep.spec import SweepError, VariantSpec, load, parse
from gpuledger.replay.sweep.task import run_variant
from gpuledger.replay.whatif import external_inputs
from gpuledger.services.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
SWEEP = ROOT / "tests" / "fixtures" / "sweep" / "sweep.yaml"


def gl(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def test_a_sweep_file_lists_variants_then_the_grid_last_key_fastest():
    variants = load(SWEEP)
    assert [v.label for v in variants] == [
        "no-preemption",
        "fgd/g2",
        "fgd/g4",
        "packing/g2",
        "packing/g4",
    ]
    assert variants[0].policies[0][1] == {"policy": {"preemption": False}}
    assert variants[2].sets == ("policy.placement_policy=fgd", "tenants.research.guaranteed=4")


def test_base_overlays_come_first_in_every_variant_and_grid_labels_default_to_the_keys():
    doc = {"base": {"set": "policy.min_runtime_s=60"}, "grid": {"policy.preemption": [True]}}
    (v,) = parse(doc, Path("."))
    assert v.label == "policy.preemption=true"
    assert v.sets == ("policy.min_runtime_s=60", "policy.preemption=true")


@pytest.mark.parametrize(
    ("doc", "problem"),
    [
        ({"varaints": []}, "varaints: unknown key (did you mean 'variants'?)"),
        ({"variants": [{"set": ["policy.preemption=false"]}]}, "variants[0].label: every"),
        ({"grid": {"policy.preemption": []}}, "grid.policy.preemption: expected a non-empty"),
        ({"variants": [{"label": "a"}, {"label": "a"}]}, "two variants are labelled 'a'"),
        ({"variants": [{"label": "a", "policy": ["missing.yaml"]}]}, "variants[0].policy[0]"),
        ({}, "no variants"),
    ],
)
def test_a_bad_sweep_file_is_one_error_naming_the_key(doc, problem):
    with pytest.raises(SweepError) as exc:
        parse(doc, Path("."))
    assert problem in str(exc.value)


def test_rank_keys_name_metrics_and_classes_with_a_direction():
    keys = rank.parse("wait_p99:latency-critical,gpu_hours,+preemptions,fairness")
    assert [(k.metric, k.slo_class, k.higher_is_better) for k in keys] == [
        ("wait_s_p99_by_class", "latency-critical", False),
        ("gpu_hours", None, False),
        ("preemptions", None, True),
        ("fairness_jain", None, True),
    ]
    with pytest.raises(rank.RankError, match="did you mean 'gpu_hours'"):
        rank.parse("gpu_hour")
    with pytest.raises(rank.RankError, match="per SLO class"):
        rank.parse("wait_p99")


def test_ranking_orders_by_the_first_key_then_the_next_and_puts_missing_values_last():
    keys = rank.parse("wait_p99:batch,-gpu_hours")
    variants = [
        ("slow", {"wait_s_p99_by_class": {"batch": 9.0}, "gpu_hours": 1.0}),
        ("unseen", {"wait_s_p99_by_class": {}, "gpu_hours": 0.1}),
        ("cheap", {"wait_s_p99_by_class": {"batch": 1.0}, "gpu_hours": 1.0}),
        ("cheaper", {"wait_s_p99_by_class": {"batch": 1.0}, "gpu_hours": 0.5}),
    ]
    assert rank.order(keys, variants) == ["cheaper", "cheap", "slow", "unseen"]


def test_the_sweep_ranks_variants_after_the_recorded_baseline_and_each_digest_is_its_log(
    demo_log, tmp_path
):
    out, js, logs = tmp_path / "r.html", tmp_path / "r.json", tmp_path / "logs"
    r = gl(
        "whatif", demo_log, "--sweep", SWEEP, "--workers", 1, "--out", out, "--json", js,
        "--logs", logs, "--rank", "wait_p99:latency-critical,gpu_hours",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    report = json.loads(js.read_text())
    assert report["executor"] == "in-process" and report["failed"] == []
    assert list(report["references"]) == ["recorded"]
    # no preemption makes the latency-critical job wait 16 s instead of 1 s: ranked last
    assert report["ranking"] == ["fgd/g2", "fgd/g4", "packing/g2", "packing/g4", "no-preemption"]
    for label, v in report["variants"].items():
        written = (logs / f"{label.replace('/', '-')}.jsonl").read_bytes()
        assert hashlib.sha256(written).hexdigest() == v["sha256"]
    # the recorded-config replay is byte for byte what `gpuledger replay` writes
    replayed = tmp_path / "replay.jsonl"
    assert gl("replay", demo_log, "--out", replayed).exit_code == 0
    assert (
        hashlib.sha256(replayed.read_bytes()).hexdigest()
        == report["variants"]["recorded"]["sha256"]
    )
    page = out.read_text()
    assert "<h2>Sweep</h2>" in page and page.index("recorded") < page.index("no-preemption")
    assert "Failed tasks" not in page


def test_a_bad_overlay_in_a_sweep_stops_before_any_task_with_one_line(demo_log, tmp_path):
    sweep = tmp_path / "s.yaml"
    sweep.write_text("grid: {policy.preemptoin: [false]}\n")
    r = gl("whatif", demo_log, "--sweep", sweep, "--out", tmp_path / "r.html")
    assert r.exit_code == 2
    assert r.output.strip().splitlines() == [
        "error: variant 'policy.preemptoin=false': --set policy.preemptoin=false: "
        "policy.preemptoin: unknown key (did you mean 'preemption'?)"
    ]
    assert not (tmp_path / "r.html").exists()


def flaky(inputs, variant, keep_log=False, *, marks: str):
    """A task that fails its first attempt (or every attempt of `broken`): a lost worker's
    task seen from the executor."""
    mark = Path(marks) / variant.label
    if variant.label == "broken" or not mark.exists():
        mark.touch()
        raise RuntimeError(f"attempt on {variant.label} failed")
    return run_variant(inputs, variant, keep_log)


def test_a_failing_task_is_retried_and_one_that_keeps_failing_is_listed_never_dropped(
    demo_log, tmp_path
):
    from functools import partial

    inputs = external_inputs(read_log(demo_log))
    variants = [VariantSpec("recorded"), VariantSpec("broken", ("policy.preemption=false",))]
    result = run_sweep(inputs, variants, InProcess(), task=partial(flaky, marks=str(tmp_path)))
    assert [r.label for r in result.results] == ["recorded"]
    assert result.results[0].sha256 == run_variant(inputs, variants[0]).sha256
    assert result.failed == [("broken", "RuntimeError: attempt on broken failed")]


def test_one_variant_runs_in_process_and_several_default_to_a_local_pool():
    one = executor_for(1, None, None)
    assert one.name == "in-process"
    assert executor_for(5, 1, None).name == "in-process"
