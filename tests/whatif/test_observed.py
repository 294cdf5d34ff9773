"""The observed baseline: what an imported source recorded, beside every replay.

The observed entry of `whatif --json` must equal a computation made here, independently,
from the raw sacct file (the rules of docs/importers.md: wait = first start - submit, GPU-hours
= GPUs x (end - start) of every run clipped to [first time seen, last time seen], a missing end
= the window end, nearest-rank percentiles)."""

from __future__ import annotations

import csv
import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuledger import events as ev
from gpuledger.replay import observed as obs
from gpuledger.replay.importers.common import TraceImportError
from gpuledger.replay.importers.csvtrace import import_csv
from gpuledger.replay.importers.kubernetes import import_kubernetes
from gpuledger.replay.importers.slurm import import_slurm
from gpuledger.replay.logio import read_log
from gpuledger.services.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
SLURM = ROOT / "tests" / "fixtures" / "slurm"
SACCT = SLURM / "sacct-observed.txt"
SINFO = SLURM / "sinfo.txt"
runner = CliRunner()


def _t(text: str) -> int | None:
    if text in ("Unknown", "None", ""):
        return None
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() * 1000)


def _nearest_rank(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[round(q * (len(s) - 1))]  # Python's round: half to even, as documented


def independent(path: Path) -> dict:
    """p50/p99 wait per SLO class, never-placed counts and GPU-hours, from the raw file."""
    slo = {"normal": "batch", "debug": "interactive"}
    jobs: dict[str, list[dict]] = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f, delimiter="|"):
            if "." not in row["JobID"]:
                jobs.setdefault(row["JobID"], []).append(row)
    times = [
        t
        for rows in jobs.values()
        for r in rows
        for t in (_t(r["Submit"]), _t(r["Start"]), _t(r["End"]))
        if t is not None
    ]
    w0, w1 = min(times), max(times)
    waits: dict[str, list[float]] = {}
    never: dict[str, int] = {}
    gpu_ms = 0
    for rows in jobs.values():
        cls = slo[rows[0]["QOS"]]
        # a cancelled row never given nodes never started, whatever its Start says (Slurm 22.05
        # writes Start = End = the cancel time of a held job cancelled early)
        rows = [
            dict(r, Start="None")
            if r["NodeList"] == "None assigned" and r["State"].startswith("CANCELLED")
            else r
            for r in rows
        ]
        starts = [_t(r["Start"]) for r in rows if _t(r["Start"]) is not None]
        if starts:
            waits.setdefault(cls, []).append((starts[0] - _t(rows[0]["Submit"])) / 1000)
        else:
            never[cls] = never.get(cls, 0) + 1
        for r in rows:
            tres = r["AllocTRES"] or r["ReqTRES"]
            gpus = int(dict(p.split("=") for p in tres.split(",")).get("gres/gpu", 0))
            # a MIG-typed request: each GPU is one instance, its compute slices out of 7
            mig = re.search(r"gres/gpu:(\d)g\.\d+gb=", r["AllocTRES"] + "," + r["ReqTRES"])
            if mig:
                gpus = gpus * -(-int(mig.group(1)) * 1000 // 7) / 1000
            start, end = _t(r["Start"]), _t(r["End"])
            if start is None:
                continue
            a, b = max(w0, start), min(w1, w1 if end is None else end)
            gpu_ms += gpus * max(0, b - a)
    return {
        "p50": {c: _nearest_rank(v, 0.5) for c, v in waits.items()},
        "p99": {c: _nearest_rank(v, 0.99) for c, v in waits.items()},
        "never": never,
        "gpu_hours": gpu_ms / 3.6e6,
        "window": (w0 / 1000, w1 / 1000),
    }


@pytest.fixture(scope="module")
def whatif_json(tmp_path_factory):
    d = tmp_path_factory.mktemp("observed")
    log = d / "sacct.jsonl"
    import_slurm(SACCT, log, sinfo=SINFO)
    out = d / "report.json"
    r = runner.invoke(app, ["whatif", str(log), "--out", str(d / "r.html"), "--json", str(out)])
    assert r.exit_code == 0, r.output
    return json.loads(out.read_text()), (d / "r.html").read_text(), log


def test_whatif_json_has_an_observed_entry_with_the_same_keys(whatif_json):
    data, _, _ = whatif_json
    assert list(data) == ["observed", "recorded"]
    assert set(data["observed"]["metrics"]) == set(data["recorded"]["metrics"])
    assert "gpu_hours" in data["recorded"]["metrics"]


def test_observed_entry_equals_an_independent_computation_from_the_raw_file(whatif_json):
    data, _, _ = whatif_json
    m = data["observed"]["metrics"]
    want = independent(SACCT)
    assert m["wait_s_p50_by_class"] == pytest.approx(want["p50"])
    assert m["wait_s_p99_by_class"] == pytest.approx(want["p99"])
    assert {c: n for c, n in m["never_placed_by_class"].items() if n} == want["never"]
    assert m["gpu_hours"] == pytest.approx(want["gpu_hours"], rel=1e-9)
    assert (m["start_s"], m["end_s"]) == want["window"]
    # the numbers themselves (so a shared mistake in both computations shows too)
    # batch waits 0, 60, 300, 300, 600, 1200 s; interactive 60, 600 s
    assert m["wait_s_p50_by_class"] == {"batch": 300.0, "interactive": 60.0}
    assert m["wait_s_p99_by_class"] == {"batch": 1200.0, "interactive": 600.0}
    assert m["never_placed_by_class"] == {"batch": 2, "interactive": 0}
    # 2001 2x2h, 2002 4x1h on 3g.40gb slices (3/7 GPU each, its first run's own AllocTRES)
    # + 4x2h on whole GPUs, 2003 0, 2004 1x14m, 2005 1x1h, 2006 8x40m, 2009 1x15m,
    # 2010 2x55m (the window ends at 11:30, the last time seen)
    assert m["gpu_hours"] == pytest.approx(
        4 + 4 * 0.429 + 8 + 14 / 60 + 1 + 8 * 40 / 60 + 0.25 + 110 / 60
    )


def test_observed_final_states_and_preemptions(whatif_json):
    data, _, _ = whatif_json
    m = data["observed"]["metrics"]
    # COMPLETED 2001 2002 2003; FAILED 2004, TIMEOUT 2005, NODE_FAIL 2006, PREEMPTED 2010
    assert m["jobs"] == {
        "submitted": 10,
        "completed": 3,
        "failed": 4,
        "rejected": 0,
        "cancelled": 1,
        "unfinished": 2,
    }
    # 2002's first run (line 3, four 3g.40gb slices) and 2010; no checkpoint: both runs' GPU
    # time is lost
    assert m["preemptions"] == 2
    assert m["lost_gpu_hours"] == pytest.approx(4 * 0.429 * 1 + 2 * 55 / 60)


def test_html_report_draws_observed_beside_the_replay(whatif_json):
    _, html, _ = whatif_json
    assert "gpuledger (recorded config)" in html and "observed" in html
    assert "Checkpoint assumption" in html and "none (evicted work is lost" in html


def test_sidecar_keeps_requeued_runs_nodes_and_states(whatif_json):
    _, _, log = whatif_json
    header, items = obs.read(obs.sidecar(log))
    by_id = {o.job: o for o in items}
    assert header.capacity_gpu_milli == 28_000
    assert header.slo_classes["normal"] == "batch"
    j2002 = by_id["2002"]  # rows on lines 3 and 12: one job, two runs
    assert [r.state for r in j2002.runs] == ["PREEMPTED"] and j2002.state == "COMPLETED"
    assert j2002.nodes == ("gpu-a01",)
    assert by_id["2006"].nodes == ("gpu-a01", "gpu-a02") and by_id["2006"].gpu_milli == 8000
    assert by_id["2005"].state == "TIMEOUT" and by_id["2007"].state == "CANCELLED"


def test_replay_copies_the_sidecar_and_compare_shows_the_observed_column(whatif_json, tmp_path):
    _, _, log = whatif_json
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    assert runner.invoke(app, ["replay", str(log), "--out", str(a)]).exit_code == 0
    r = runner.invoke(app, ["replay", str(log), "--out", str(b), "--json", str(tmp_path / "b")])
    assert r.exit_code == 0 and "observed (sacct.observed.jsonl)" in r.output
    assert json.loads((tmp_path / "b").read_text())["observed"]["preemptions"] == 2
    assert obs.sidecar(a).is_file()
    r = runner.invoke(app, ["compare", str(a), str(b), "--json", str(tmp_path / "c.json")])
    assert r.exit_code == 0 and "OBSERVED" in r.output
    c = json.loads((tmp_path / "c.json").read_text())
    assert c["observed"]["metrics"]["gpu_hours"] == pytest.approx(independent(SACCT)["gpu_hours"])


def test_a_log_without_a_sidecar_has_no_observed_column(tmp_path):
    log = tmp_path / "x.jsonl"
    import_slurm(SACCT, log, sinfo=SINFO)
    obs.sidecar(log).unlink()
    out = tmp_path / "r.json"
    r = runner.invoke(
        app, ["whatif", str(log), "--out", str(tmp_path / "r.html"), "--json", str(out)]
    )
    assert r.exit_code == 0 and list(json.loads(out.read_text())) == ["recorded"]


REAL = ROOT / "tests" / "fixtures" / "slurm-real"


def test_a_real_slurm_dump_imports_with_its_counts_and_observed_times(tmp_path):
    """The dump a real Slurm 22.05 wrote (tests/fixtures/slurm-real/, from branch h36c: its
    README lists the 14 jobs and 16 runs)."""
    if not (REAL / "sacct.txt").is_file():
        pytest.skip("tests/fixtures/slurm-real/ (the real Slurm dump) comes from branch h36c")
    log = tmp_path / "real.jsonl"
    s = import_slurm(REAL / "sacct.txt", log, sinfo=REAL / "sinfo.txt").summary
    assert s["jobs"] == 14 and s["skipped_rows"] == 0
    assert s["requeued"] == 2  # job 7 (scontrol requeue) and job 13 (preempted, requeued)
    assert s["cancelled_before_start"] == 2  # 8 (held) and 9 (future --begin)
    assert s["final_states"] == {"CANCELLED": 3, "COMPLETED": 10, "FAILED": 1}
    out = tmp_path / "w.json"
    r = runner.invoke(
        app, ["whatif", str(log), "--out", str(tmp_path / "w.html"), "--json", str(out)]
    )
    assert r.exit_code == 0, r.output
    m = json.loads(out.read_text())["observed"]["metrics"]
    want = independent(REAL / "sacct.txt")
    assert m["wait_s_p50_by_class"] == pytest.approx(want["p50"])
    assert m["wait_s_p99_by_class"] == pytest.approx(want["p99"])
    assert m["gpu_hours"] == pytest.approx(want["gpu_hours"], rel=0.01)
    assert m["preemptions"] == 1  # job 13's first run


def test_every_importer_writes_a_sidecar(tmp_path):
    csv_log, k8s_log = tmp_path / "c.jsonl", tmp_path / "k.jsonl"
    fix = ROOT / "tests" / "fixtures"
    s = import_csv(
        fix / "csv" / "jobs.csv",
        csv_log,
        mapping=fix / "csv" / "mapping.yaml",
        nodes_file=fix / "csv" / "nodes.yaml",
    ).summary
    _, items = obs.read(obs.sidecar(csv_log))
    assert len(list(items)) == s["jobs"] and s["observed"] == str(obs.sidecar(csv_log))
    k = import_kubernetes(
        fix / "kubernetes" / "pods.json",
        k8s_log,
        nodes=fix / "kubernetes" / "nodes.json",
        events=fix / "kubernetes" / "events.json",
    ).summary
    _, items = obs.read(obs.sidecar(k8s_log))
    pods = {o.job: o for o in items}
    assert len(pods) == k["jobs"]
    # a pod with a Preempted event ended PREEMPTED; a gang's nodes are its members' nodes
    assert pods["preempted-batch-8s9d0"].state == "PREEMPTED"
    assert pods["train"].nodes == ("gpu-node-1", "gpu-node-2")
    assert k["final_states"]["PREEMPTED"] == 1


def test_a_corrupt_sidecar_is_one_line_exit_2(tmp_path):
    log = tmp_path / "x.jsonl"
    import_slurm(SACCT, log, sinfo=SINFO)
    obs.sidecar(log).write_text('{"observed": 1}\n{"job": 3}\n')
    r = runner.invoke(app, ["whatif", str(log), "--out", str(tmp_path / "r.html")])
    assert r.exit_code == 2
    assert "x.observed.jsonl:2: not an observation" in r.output
    assert "Traceback" not in r.output


# ---------------------------------------------------------------------------- checkpoint


def _jobs(log: Path) -> dict[str, ev.JobSpec]:
    return {e.job.job_id: e.job for _, _, e in read_log(log) if isinstance(e, ev.JobSubmitted)}


def test_imported_jobs_assume_no_checkpoint_and_lose_work_when_preempted(tmp_path):
    from gpuledger.replay.importers.checkpoint import has_checkpoint

    log = tmp_path / "s.jsonl"
    s = import_slurm(SLURM / "sacct.txt", log, sinfo=SINFO).summary
    assert s["checkpoint"].startswith("none")
    assert not any(has_checkpoint(j.checkpoint) for j in _jobs(log).values())
    out = tmp_path / "w.json"
    r = runner.invoke(
        app,
        [
            "whatif",
            str(log),
            "--out",
            str(tmp_path / "w.html"),
            "--json",
            str(out),
            "--variant",
            "ckpt: checkpoint.interval=30m; checkpoint.save=10s",
        ],
    )
    assert r.exit_code == 0, r.output
    data = json.loads(out.read_text())
    recorded, ckpt = data["recorded"]["metrics"], data["ckpt"]["metrics"]
    assert recorded["preemptions"] >= 1 and recorded["lost_gpu_hours"] > 0
    assert ckpt["preemptions"] >= 1 and ckpt["lost_gpu_hours"] < recorded["lost_gpu_hours"]


def test_mapping_checkpoint_by_class_partition_and_value(tmp_path):
    mapping = tmp_path / "m.yaml"
    mapping.write_text(
        "checkpoint:\n"
        "  default: {interval: 1h, save: 30s}\n"
        "  classes: {scavenger: none}\n"
        "  partitions: {cpu: {interval: 10m}}\n"
        "  values: {debug: {save: 5s}}\n"
    )
    log = tmp_path / "s.jsonl"
    import_slurm(SLURM / "sacct.txt", log, sinfo=SINFO, mapping=mapping)
    jobs = _jobs(log)
    assert (jobs["1001"].checkpoint.interval_s, jobs["1001"].checkpoint.save_s) == (3600, 30)
    assert jobs["1006"].checkpoint.interval_s == 0  # scavenger: none
    assert jobs["1006"].checkpoint.save_s > 10**9
    assert jobs["1030"].checkpoint.interval_s == 600  # partition cpu
    assert jobs["1005"].checkpoint.save_s == 5  # QOS debug


@pytest.mark.parametrize(
    "text, problem",
    [
        ("checkpoint: sometimes\n", "checkpoint: expected none or {interval: 30m, save: 60s}"),
        ("checkpoint: {intervl: 30m}\n", "checkpoint.intervl: unknown key (did you mean"),
        ("checkpoint: {interval: soon}\n", "checkpoint.interval: cannot read 'soon'"),
        ("checkpoint: {classes: {a: {save: x}}}\n", "checkpoint.classes.a.save: cannot read"),
    ],
)
def test_a_bad_checkpoint_mapping_names_the_key(tmp_path, text, problem):
    mapping = tmp_path / "m.yaml"
    mapping.write_text(text)
    with pytest.raises(TraceImportError, match="m.yaml: " + re.escape(problem)):
        import_slurm(SLURM / "sacct.txt", tmp_path / "s.jsonl", sinfo=SINFO, mapping=mapping)


# ---------------------------------------------------------------------------- csv missing start

CSV_ROWS = """id,submit,start,end,gpus
a,0,,100,1
b,10,,50,1
c,0,5,20,1
d,-50,-40,30,1
"""


def _csv(tmp_path: Path, rule: str | None):
    trace, mapping = tmp_path / "t.csv", tmp_path / "m.yaml"
    trace.write_text(CSV_ROWS)
    mapping.write_text(
        "time: {unit: s, epoch: 0}\n"
        "jobs: {id: id, submit: submit, start: start, end: end, gpus: gpus}\n"
        + (f"rules: {{missing_start: {rule}}}\n" if rule else "")
    )
    log = tmp_path / "t.jsonl"
    summary = import_csv(
        trace, log, mapping=mapping, nodes_file=ROOT / "tests/fixtures/csv/nodes.yaml"
    ).summary
    header, items = obs.read(obs.sidecar(log))
    return summary, _jobs(log), {o.job: o for o in items}, header


def test_csv_missing_start_defaults_to_running_when_the_trace_began(tmp_path):
    from gpuledger.replay.metrics import measure_observed

    summary, jobs, seen, header = _csv(tmp_path, None)
    # a: no start, submitted at the trace start -> ran from the trace start to its end
    assert jobs["a"].duration_s == 100 and seen["a"].started_before
    # b: submitted after the trace start, so it cannot have started before it: cancelled
    assert jobs["b"].duration_s is None and seen["b"].state == "CANCELLED"
    # d: started before the trace start (moved to it): excluded from waits
    assert seen["d"].started_before and jobs["d"].duration_s == 30
    assert summary["cancelled_before_start"] == 1
    m = measure_observed(header, seen.values()).metrics
    assert m["wait_s_p50_by_class"] == {"batch": 5.0}  # c only
    assert m["never_placed_by_class"] == {"batch": 1}  # b
    assert m["gpu_hours"] == pytest.approx((100 + 15 + 30) / 3600)


def test_csv_missing_start_never_and_skip(tmp_path):
    summary, jobs, seen, _ = _csv(tmp_path, "never")
    assert jobs["a"].duration_s is None and seen["a"].state == "CANCELLED"
    assert summary["cancelled_before_start"] == 2
    summary, jobs, _, _ = _csv(tmp_path, "skip")
    assert set(jobs) == {"c", "d"}
    assert summary["skipped"]["empty start time (rules.missing_start: skip)"]["rows"] == 2


def test_csv_missing_start_bad_value_names_the_key(tmp_path):
    with pytest.raises(TraceImportError, match=r"rules.missing_start"):
        _csv(tmp_path, "maybe")


def test_the_openb_import_writes_a_sidecar_with_pod_phases(tmp_path):
    fix = ROOT / "tests" / "fixtures" / "openb"
    out = tmp_path / "o.jsonl"
    r = runner.invoke(
        app,
        [
            "import",
            "alibaba-openb",
            "--pods",
            str(fix / "openb_pod_list_default.csv"),
            "--nodes",
            str(fix / "openb_node_list_gpu_node.csv"),
            "--out",
            str(out),
            "-o",
            "json",
        ],
    )
    assert r.exit_code == 0, r.output
    summary = json.loads(r.output)
    header, items = obs.read(obs.sidecar(out))
    pods = list(items)
    assert len(pods) == summary["jobs"] and summary["observed"] == str(obs.sidecar(out))
    with open(fix / "openb_pod_list_default.csv", newline="") as f:
        rows = {row["name"]: row for row in csv.DictReader(f)}

    def want(row) -> str:  # deleted while Running / Pending, or never scheduled: cancelled
        if row["deletion_time"] and (
            row["pod_phase"] in ("Running", "Pending") or not row["scheduled_time"]
        ):
            return "CANCELLED"
        return {"Succeeded": "COMPLETED", "Failed": "FAILED"}[row["pod_phase"]]

    assert {o.job: o.state for o in pods} == {name: want(row) for name, row in rows.items()}
    assert {o.state for o in pods} == {"CANCELLED", "COMPLETED", "FAILED"}
    assert header.checkpoint.startswith("none") and header.capacity_gpu_milli > 0


def test_a_csv_mapping_takes_checkpoint_by_class_and_source_value(tmp_path):
    trace, mapping = tmp_path / "t.csv", tmp_path / "m.yaml"
    trace.write_text("id,submit,start,end,gpus,q\nx,0,1,9,1,LS\ny,0,1,9,1,BE\nz,0,1,9,1,BE\n")
    mapping.write_text(
        "time: {unit: s, epoch: 0}\n"
        "jobs:\n"
        "  {id: id, submit: submit, start: start, end: end, gpus: gpus,\n"
        "   priority: {column: q, values: {LS: train, BE: train}}}\n"
        "checkpoint: {default: {interval: 10m}, values: {LS: {save: 30s}}}\n"
    )
    log = tmp_path / "t.jsonl"
    import_csv(trace, log, mapping=mapping, nodes_file=ROOT / "tests/fixtures/csv/nodes.yaml")
    jobs = _jobs(log)
    assert (jobs["x"].checkpoint.interval_s, jobs["x"].checkpoint.save_s) == (0, 30)
    assert jobs["y"].checkpoint.interval_s == 600 and jobs["y"].checkpoint.save_s > 10**9
    mapping.write_text(mapping.read_text().replace("default:", "defualt:"))
    with pytest.raises(TraceImportError, match=r"m.yaml: checkpoint.defualt: unknown key"):
        import_csv(trace, log, mapping=mapping, nodes_file=ROOT / "tests/fixtures/csv/nodes.yaml")
