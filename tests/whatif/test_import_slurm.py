"""The Slurm importer on a hand-written sacct/sinfo dump (tests/fixtures/slurm/, rows shaped
like the Slurm documentation's examples, with the awkward ones real dumps hold)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuledger import events as ev
from gpuledger.replay.importers.common import TraceImportError
from gpuledger.replay.importers.slurm import import_slurm
from gpuledger.replay.importers.slurm_sacct import expand_tasks, parse_tres, tres_resources
from gpuledger.replay.logio import read_log
from gpuledger.services.cli.main import app

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    out = tmp_path_factory.mktemp("slurm") / "slurm.jsonl"
    result = import_slurm(FIX / "sacct.txt", out, sinfo=FIX / "sinfo.txt")
    log = list(read_log(out))
    jobs = {e.job.job_id: e for _, _, e in log if isinstance(e, ev.JobSubmitted)}
    return result.summary, log, jobs


def test_steps_fold_into_their_job_and_arrays_and_het_jobs_become_jobs(imported):
    summary, _, jobs = imported
    assert sorted(jobs) == [
        "1001",
        "1002",
        "1003",
        "1004",
        "1005",
        "1006",
        "1010",  # the array: 1010_1, 1010_2 and the pending record 1010_[3-5%2]
        "1020",
        "1022+0",
        "1022+1",
        "1030",
        "1031",
        "1032",
    ]
    assert summary["steps_folded"] == 8
    # jobs count an array's tasks (as sacct lists them): 13 submissions, 17 jobs
    assert summary["jobs"] == 17 and summary["gangs"] == 3
    assert (summary["arrays"], summary["array_tasks"], summary["array_tasks_split"]) == (1, 5, 0)


def test_tres_gpus_typed_and_untyped_and_gangs(imported):
    _, _, jobs = imported
    j1001 = jobs["1001"].job
    # gres type `a100` through the GPU model vocabulary: the A100 family (size not known)
    assert (j1001.replicas, j1001.resources.gpus, j1001.resources.gpu_models) == (
        1,
        8,
        ("A100", "A100-40GB", "A100-80GB"),
    )
    assert j1001.resources.cpu_milli == 32000 and j1001.resources.memory_mib == 256 * 1024
    j1002 = jobs["1002"].job  # 2 nodes, gres/gpu:a100=16 -> 2 members of 8
    assert (j1002.replicas, j1002.resources.gpus, j1002.resources.memory_mib) == (2, 8, 500 * 1024)
    j1004 = jobs["1004"].job  # pending: ReqTRES (no type) -> any model
    assert (j1004.replicas, j1004.resources.gpus, j1004.resources.gpu_models) == (4, 8, ())
    het = jobs["1020"].job  # two equal components -> one gang
    assert (het.replicas, het.resources.gpus) == (2, 4)
    assert jobs["1022+0"].job.resources.gpus == 0 and jobs["1022+1"].job.resources.gpus == 1
    assert jobs["1030"].job.resources.gpus == 0  # CPU-only


def test_times_pending_cancelled_running_and_requeued(imported):
    summary, log, jobs = imported
    assert jobs["1001"].job.duration_s == 4 * 3600
    assert jobs["1005"].job.duration_s is None  # running at the dump
    assert jobs["1004"].job.duration_s is None  # pending at the dump
    cancels = [e for _, _, e in log if isinstance(e, ev.JobCancelled)]
    assert [c.job_id for c in cancels] == ["1003"]
    # cancelled after 45 min pending: it never ran, so the replay cancels it as it is
    # submitted (docs/importers.md, "Recorded outcomes")
    assert cancels[0].occurred_at_ms == jobs["1003"].occurred_at_ms
    assert summary["never_ran"] == {
        "ended before it started: cancelled at its submission in the replay": 1,
        "pending at the end of the trace: the replay may place it": 4,
    }
    # requeued: submitted at the first record, run time of the last
    assert jobs["1006"].occurred_at_ms == jobs["1001"].occurred_at_ms + 5 * 60 * 1000
    assert jobs["1006"].job.duration_s == 2 * 3600
    assert summary["requeued"] == 1 and summary["cancelled_before_start"] == 1
    assert summary["pending_at_end"] == 4 and summary["running_at_end"] == 1
    assert summary["gpu_hours"] == pytest.approx(429.5, abs=0.01)


def test_qos_and_account_become_classes_and_tenants(imported):
    _, log, jobs = imported
    assert jobs["1002"].job.priority_class == "high" and jobs["1002"].job.tenant == "chem"
    classes = {e.name: e for _, _, e in log if isinstance(e, ev.PriorityClassConfigured)}
    assert classes["high"].value == 100 and classes["scavenger"].value == 10
    assert classes["debug"].slo_class == "interactive"
    assert {e.tenant for _, _, e in log if isinstance(e, ev.TenantConfigured)} == {
        "chem",
        "physics",
    }


def test_bad_rows_are_reported_with_line_numbers(imported):
    summary, _, _ = imported
    skipped = summary["skipped"]
    assert summary["skipped_rows"] == 3
    assert skipped["no Submit time"]["first"] == [f"{FIX / 'sacct.txt'}:27"]
    assert skipped["7 fields, header has 20"]["first"] == [f"{FIX / 'sacct.txt'}:28"]
    assert skipped["step row without its job row"]["first"] == [f"{FIX / 'sacct.txt'}:29"]


def test_log_is_in_time_order_with_config_and_nodes_first(imported):
    _, log, _ = imported
    assert [s for s, _, _ in log] == list(range(1, len(log) + 1))
    times = [e.occurred_at_ms for _, _, e in log]
    assert times == sorted(times)
    nodes = [e.node for _, _, e in log if isinstance(e, ev.NodeRegistered)]
    assert [n.name for n in nodes] == ["gpu-a01", "gpu-a02", "gpu-a03", "gpu-v01", "cpu-01"]
    assert [g.model for g in nodes[0].gpus] == ["A100"] * 8 and nodes[0].gpus[0].memory_mib == 40960


def test_helpers():
    assert expand_tasks("[5-9%2]") == ["5", "6", "7", "8", "9"]
    assert expand_tasks("[1,3,5-6]") == ["1", "3", "5", "6"]
    res, total = tres_resources(parse_tres("cpu=8,gres/gpu:a100=2,gres/gpu:h100=2,mem=1T"), 2)
    assert (
        total == 4
        and res.gpus == 2
        and res.gpu_models == ("a100", "h100")
        and res.memory_mib == 512 * 1024
    )


def test_missing_columns_and_nodes_are_errors(tmp_path):
    bad = tmp_path / "sacct.txt"
    bad.write_text("JobID|State\n1|COMPLETED\n")
    with pytest.raises(
        TraceImportError, match=r"sacct.txt:1: missing column\(s\) Submit, Start, End, NNodes"
    ):
        import_slurm(bad, tmp_path / "o.jsonl", sinfo=FIX / "sinfo.txt")
    with pytest.raises(TraceImportError, match="exactly one of --sinfo FILE or --nodes FILE"):
        import_slurm(FIX / "sacct.txt", tmp_path / "o.jsonl")


def test_mapping_overrides_classes_and_tenants(tmp_path):
    mapping = tmp_path / "map.yaml"
    mapping.write_text(
        "tenant_from: account/user\nclasses: {high: urgent}\n"
        "priority_classes: [{name: urgent, value: 300, preemptible: false}]\n"
        "quotas: [{name: chem/bob, guaranteed: 16}]\n"
    )
    out = tmp_path / "o.jsonl"
    import_slurm(FIX / "sacct.txt", out, sinfo=FIX / "sinfo.txt", mapping=mapping)
    log = list(read_log(out))
    jobs = {e.job.job_id: e.job for _, _, e in log if isinstance(e, ev.JobSubmitted)}
    assert jobs["1002"].priority_class == "urgent" and jobs["1002"].tenant == "chem/bob"
    tenants = {e.tenant: e for _, _, e in log if isinstance(e, ev.TenantConfigured)}
    assert tenants["chem/bob"].guaranteed_gpu_milli == 16000
    mapping.write_text("tenant_form: user\n")
    with pytest.raises(
        TraceImportError,
        match=r"map.yaml: tenant_form: unknown key \(did you mean 'tenant_from'\?\)",
    ):
        import_slurm(FIX / "sacct.txt", out, sinfo=FIX / "sinfo.txt", mapping=mapping)


def test_small_runs_spill_to_disk_and_give_the_same_log(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    import_slurm(FIX / "sacct.txt", a, sinfo=FIX / "sinfo.txt")
    import_slurm(FIX / "sacct.txt", b, sinfo=FIX / "sinfo.txt", run_size=3)
    assert a.read_bytes() == b.read_bytes()


def test_cli_summary(tmp_path):
    r = CliRunner().invoke(
        app,
        [
            "import",
            "slurm",
            "--sacct",
            str(FIX / "sacct.txt"),
            "--sinfo",
            str(FIX / "sinfo.txt"),
            "--out",
            str(tmp_path / "o.jsonl"),
        ],
    )
    assert r.exit_code == 0, r.output
    assert (
        "jobs 17 (3 gangs, 22 members; 5 tasks in 1 arrays, 0 imported on their own), 2 tenants, "
        "observed 429.5 GPU-hours"
    ) in r.output
    assert "1 x no Submit time:" in r.output
    r = CliRunner().invoke(
        app, ["replay", str(tmp_path / "o.jsonl"), "--out", str(tmp_path / "r.jsonl")]
    )
    assert r.exit_code == 0, r.output


# ---------------------------------------------------------------------------- issue 36 fixes

OBSERVED = FIX / "sacct-observed.txt"


def _import(tmp_path, sacct, **kw):
    out = tmp_path / "o.jsonl"
    summary = import_slurm(sacct, out, sinfo=FIX / "sinfo.txt", **kw).summary
    jobs = {e.job.job_id: e.job for _, _, e in read_log(out) if isinstance(e, ev.JobSubmitted)}
    return summary, jobs, out


def test_rows_of_one_job_far_apart_are_one_job_with_its_requeued_run(tmp_path):
    summary, jobs, _ = _import(tmp_path, OBSERVED, run_size=3)  # spilled, merged runs
    # 2002's preempted run is on line 4, its re-run on line 13: one job, not a duplicate
    assert summary["requeued"] == 1 and summary["skipped_rows"] == 0
    assert jobs["2002"].duration_s == 2 * 3600  # the last run's time
    assert summary["final_states"] == {
        "CANCELLED": 1,
        "COMPLETED": 3,
        "FAILED": 1,
        "NODE_FAIL": 1,
        "PENDING": 1,
        "PREEMPTED": 1,
        "RUNNING": 1,
        "TIMEOUT": 1,
    }
    assert summary["jobs"] == 10 and summary["steps_folded"] == 2


def test_nnodes_zero_is_one_member_and_replays(tmp_path):
    _, jobs, out = _import(tmp_path, OBSERVED)
    assert (jobs["2003"].replicas, jobs["2003"].resources.gpus) == (1, 2)
    r = CliRunner().invoke(app, ["replay", str(out), "--out", str(tmp_path / "r.jsonl")])
    assert r.exit_code == 0, r.output
    rejected = [
        e.job_id for _, _, e in read_log(tmp_path / "r.jsonl") if isinstance(e, ev.JobRejected)
    ]
    assert rejected == []


def _columns(src: Path, dst: Path, keep: list[str], rename: dict[str, str] | None = None) -> None:
    lines = src.read_text().splitlines()
    header = lines[0].split("|")
    idx = [header.index(c) for c in keep]
    names = [(rename or {}).get(c, c) for c in keep]
    rows = ["|".join(names)] + ["|".join(line.split("|")[i] for i in idx) for line in lines[1:]]
    dst.write_text("\n".join(rows) + "\n")


def test_missing_account_and_qos_use_the_defaults(tmp_path):
    keep = ["JobID", "Submit", "Start", "End", "State", "NNodes", "AllocTRES", "ReqTRES"]
    _columns(OBSERVED, tmp_path / "s.txt", keep)
    _, jobs, _ = _import(tmp_path, tmp_path / "s.txt")
    assert {(j.tenant, j.priority_class) for j in jobs.values()} == {("default", "normal")}


def test_gpus_recorded_only_as_gres_are_read(tmp_path):
    sacct = tmp_path / "s.txt"
    sacct.write_text(
        "JobID|Submit|Start|End|State|NNodes|AllocTRES|AllocGRES|ReqGRES\n"
        "1|2024-03-01T08:00:00|2024-03-01T08:00:01|2024-03-01T09:00:01|COMPLETED|1|"
        "cpu=4,mem=16G,node=1|gpu:a100:2(IDX:0-1)|gpu:2\n"
        "2|2024-03-01T08:00:00|Unknown|Unknown|PENDING|1|||gpu:4\n"
    )
    _, jobs, _ = _import(tmp_path, sacct)
    assert (jobs["1"].resources.gpus, jobs["1"].resources.gpu_models) == (
        2,
        ("A100", "A100-40GB", "A100-80GB"),
    )
    assert jobs["2"].resources.gpus == 4


def test_a_headerless_dump_says_so_and_columns_reads_it(tmp_path):
    lines = OBSERVED.read_text().splitlines(keepends=True)
    bare = tmp_path / "bare.txt"
    bare.write_text("".join(lines[1:]))
    args = ["import", "slurm", "--sacct", str(bare), "--sinfo", str(FIX / "sinfo.txt")]
    r = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "a.jsonl")])
    assert r.exit_code == 2 and "Traceback" not in r.output
    err = r.output.strip().splitlines()
    assert len(err) == 1 and f"{bare}:1: the first line is not a header" in err[0]
    assert "--noheader" in err[0] and "--columns" in err[0]
    columns = lines[0].strip().replace("|", ",")
    r = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "b.jsonl"), "--columns", columns])
    assert r.exit_code == 0, r.output
    _, _, with_header = _import(tmp_path, OBSERVED)
    assert (tmp_path / "b.jsonl").read_bytes() == with_header.read_bytes()
