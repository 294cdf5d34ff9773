"""The generic CSV importer: the openb mapping gives the dedicated importer's log byte for
byte; a hand-written trace with the awkward rows of real ones; strict mapping errors; and a
property: import -> replay -> export keeps every job."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from gpuledger import events as ev
from gpuledger.replay.importers import import_openb
from gpuledger.replay.importers.common import TraceImportError
from gpuledger.replay.importers.csvtrace import import_csv
from gpuledger.replay.logio import read_log, write_log
from gpuledger.replay.whatif import external_inputs, replay
from gpuledger.services.cli.main import app
from tests.openb.conftest import OPENB_FIXTURES

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "csv"
OPENB_MAP = ROOT / "examples" / "openb-mapping.yaml"


@pytest.mark.parametrize(
    "pods, nodes",
    [
        ("openb_pod_list_default.csv", "openb_node_list_gpu_node.csv"),
        ("openb_pod_list_gpuspec25.csv", "openb_node_list_all_node.csv"),
    ],
)
def test_the_openb_mapping_gives_the_dedicated_importers_log(tmp_path, pods, nodes):
    pods, nodes = OPENB_FIXTURES / pods, OPENB_FIXTURES / nodes
    a, b = tmp_path / "csv.jsonl", tmp_path / "openb.jsonl"
    import_csv(pods, a, mapping=OPENB_MAP, nodes=nodes, run_size=97)  # spilled runs, merged
    write_log(b, import_openb(pods, nodes).entries())
    assert a.read_bytes() == b.read_bytes()


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    out = tmp_path_factory.mktemp("csv") / "c.jsonl"
    result = import_csv(
        FIX / "jobs.csv", out, mapping=FIX / "mapping.yaml", nodes_file=FIX / "nodes.yaml"
    )
    log = list(read_log(out))
    return (
        result.summary,
        log,
        {e.job.job_id: e for _, _, e in log if isinstance(e, ev.JobSubmitted)},
    )


T0 = 1714550400000  # 2024-05-01T08:00:00Z, the mapping's epoch


def test_dates_value_maps_units_and_gangs(imported):
    _, _, jobs = imported
    j1 = jobs["j-0001"]
    assert j1.occurred_at_ms == T0 and j1.job.duration_s == 7200
    assert j1.job.tenant == "research/vision" and j1.job.priority_class == "inference"
    assert (j1.job.resources.gpus, j1.job.resources.cpu_milli, j1.job.resources.memory_mib) == (
        8,
        32000,
        256 * 1024,
    )
    share = jobs["j-0002"].job.resources
    # `A100|H100` in the trace: each family name allows the family's sizes (GPU model vocabulary)
    assert (share.gpu_milli, share.gpu_models) == (
        500,
        ("A100", "A100-40GB", "A100-80GB", "H100", "H100-80GB", "H100-94GB", "H100-96GB"),
    )
    gang = jobs["train-7"].job  # two adjacent rows of task_group train-7
    assert (gang.replicas, gang.resources.gpus) == (2, 8)
    assert gang.duration_s == 2 * 3600 - 1  # last member started 09:00:12, last ended 11:00:11
    assert jobs["j-0007"].job.resources.gpus == 0  # CPU-only row kept


def test_rows_before_and_after_the_trace_window(imported, tmp_path):
    summary, log, jobs = imported
    # empty submit: existed before the trace began -> submitted at the trace start
    assert jobs["j-0003"].occurred_at_ms == T0
    # a start before the trace start is moved to it: run time counted from there
    assert jobs["j-0003"].job.duration_s == 3600
    assert jobs["j-0004"].job.duration_s is None  # NaN end: outlived the trace
    assert jobs["j-0005"].job.duration_s is None  # never started, no end: pending at the end
    cancels = [e for _, _, e in log if isinstance(e, ev.JobCancelled)]
    # never started, ended at 50 min: it never ran, so it is cancelled as it is submitted
    assert [(c.job_id, c.occurred_at_ms - T0) for c in cancels] == [("j-0006", 35 * 60 * 1000)]
    assert cancels[0].occurred_at_ms == jobs["j-0006"].occurred_at_ms
    assert summary["pending_at_end"] == 1 and summary["running_at_end"] == 1


def test_unmappable_rows_are_reported_with_line_numbers(imported):
    summary, _, jobs = imported
    where = lambda n: f"{FIX / 'jobs.csv'}:{n}"  # noqa: E731
    s = summary["skipped"]
    assert s["gpus: not a number: 'two'"]["first"] == [where(11)]
    assert s["unknown queue 'vip' (expected prod, dev, batch, ml)"]["first"] == [where(12)]
    assert s[f"duplicate job id 'j-0002' (kept {where(3)})"]["first"] == [where(13)]
    assert s["end time before start time"]["first"] == [where(14)]
    assert s["gpu_milli must be at most 1000, got 1500"]["first"] == [where(15)]
    assert summary["skipped_rows"] == 5
    assert jobs["j-0002"].job.resources.gpu_milli == 500  # the first j-0002 is the one kept


def test_the_imported_log_replays_without_rejections(imported):
    _, log, _ = imported
    sim = replay(external_inputs(log))
    assert not any(isinstance(e, ev.JobRejected) for _, _, e in sim.log)
    assert sim.ledger.jobs["train-7"].state == "completed"


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "trace: x\njobs: {id: job_id, sumbit: submitted}\n",
            "jobs.sumbit: unknown key (did you mean 'submit'?)",
        ),
        (
            "jobs: {id: job_id, cpu: {column: cpu_cores, unit: kores}}\n",
            "jobs.cpu.unit: 'kores' is not one of cores, milli (did you mean 'cores'?)",
        ),
        ("jobs: {id: job_id}\ntime: {unit: days}\n", "time.unit: 'days' is not one of"),
        ("jobs: {id: job_id}\ntime: {epoch: yesterday}\n", "time.epoch: cannot read 'yesterday'"),
        (
            "jobs: {id: job_id}\npolicy: {preemptoin: false}\n",
            "policy.preemptoin: unknown key (did you mean 'preemption'?)",
        ),
        ("jobs: {id: jobid}\n", "jobs.id: no column 'jobid' (did you mean 'job_id'?)"),
    ],
)
def test_mapping_errors_are_one_line_each(tmp_path, text, message):
    mapping = tmp_path / "m.yaml"
    mapping.write_text(text)
    with pytest.raises(TraceImportError) as err:
        import_csv(
            FIX / "jobs.csv", tmp_path / "o.jsonl", mapping=mapping, nodes_file=FIX / "nodes.yaml"
        )
    assert message in str(err.value)


def test_cli_summary_and_skipped_file(tmp_path):
    skipped = tmp_path / "skipped.txt"
    r = CliRunner().invoke(
        app,
        [
            "import",
            "csv",
            str(FIX / "jobs.csv"),
            "--mapping",
            str(FIX / "mapping.yaml"),
            "--config-nodes",
            str(FIX / "nodes.yaml"),
            "--out",
            str(tmp_path / "o.jsonl"),
            "--skipped",
            str(skipped),
        ],
    )
    assert r.exit_code == 0, r.output
    assert "jobs 8 (1 gangs, 9 members), 4 tenants" in r.output and "skipped 5 rows:" in r.output
    assert len(skipped.read_text().splitlines()) == 5


# ---------------------------------------------------------------------------- property

row = st.fixed_dictionaries(
    {
        "gpus": st.sampled_from(["0", "1", "2", "8", ""]),  # NaN GPUs: test_import_hostile
        "share": st.sampled_from(["", "250", "500", "1000"]),
        "submit": st.one_of(st.integers(0, 5000).map(str), st.sampled_from(["", "nan"])),
        "ran": st.one_of(st.none(), st.tuples(st.integers(0, 500), st.integers(0, 5000))),
        "cancel_after": st.one_of(st.none(), st.integers(0, 900)),
        "qos": st.sampled_from(["hi", "lo", "", "HI"]),
        "tenant": st.sampled_from(["a", "b", "c/d"]),
    }
)

PROP_MAP = """
time: {unit: s}
jobs: {id: id, tenant: tenant, submit: submit, start: start, end: end, gpus: gpus,
       gpu_milli: share, cpu: {column: cpu, unit: milli}, priority: {column: qos, values: {hi: hi, lo: lo}, default: lo}}
priority_classes: [{name: hi, value: 100}, {name: lo, value: 10}]
"""
PROP_NODES = "cluster: {nodes: [{name_prefix: n, count: 3, gpus: 8, model: X, sharing: [mps, mps, mps, mps, mps, mps, mps, mps]}]}\n"


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(rows=st.lists(row, min_size=1, max_size=30))
def test_import_replay_export_keeps_every_job(tmp_path, rows):
    trace, mapping, nodes = tmp_path / "t.csv", tmp_path / "m.yaml", tmp_path / "n.yaml"
    mapping.write_text(PROP_MAP)
    nodes.write_text(PROP_NODES)
    with open(trace, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "tenant", "submit", "start", "end", "gpus", "share", "cpu", "qos"])
        for i, r in enumerate(rows):
            sub = r["submit"]
            base = int(sub) if sub not in ("", "nan") else 0
            if r["ran"] is not None:
                start, end = str(base + r["ran"][0]), str(base + r["ran"][0] + r["ran"][1])
            elif r["cancel_after"] is not None:
                start, end = "", str(base + r["cancel_after"])
            else:
                start, end = "", ""
            w.writerow(
                [f"job-{i}", r["tenant"], sub, start, end, r["gpus"], r["share"], "500", r["qos"]]
            )
    out = tmp_path / "o.jsonl"
    summary = import_csv(trace, out, mapping=mapping, nodes_file=nodes, run_size=7).summary
    assert summary["jobs"] + summary["skipped_rows"] == len(rows)
    assert summary["skipped_rows"] == 0
    log = list(read_log(out))
    imported = {e.job.job_id for _, _, e in log if isinstance(e, ev.JobSubmitted)}
    assert imported == {f"job-{i}" for i in range(len(rows))}
    sim = replay(external_inputs(log))
    exported = tmp_path / "x.jsonl"
    write_log(exported, sim.log)
    replayed = {e.job.job_id for _, _, e in read_log(exported) if isinstance(e, ev.JobSubmitted)}
    assert replayed == imported
    assert set(sim.ledger.jobs) == imported
    assert not any(isinstance(e, ev.JobRejected) for _, _, e in sim.log)
    # a second import -> replay round trip of the replayed log keeps them too
    again = replay(external_inputs(list(read_log(exported))))
    assert set(again.ledger.jobs) == imported


def test_a_per_group_per_node_limit_becomes_a_spread_constraint_that_why_explains(tmp_path):
    out = tmp_path / "apps.jsonl"
    summary = import_csv(
        FIX / "apps.csv", out, mapping=FIX / "apps-mapping.yaml", nodes_file=FIX / "apps-nodes.yaml"
    ).summary
    assert summary["spread_limited"] == 6  # batch rows: empty limit, and 0 (no limit)
    jobs = {e.job.job_id: e.job for _, _, e in read_log(out) if isinstance(e, ev.JobSubmitted)}
    assert jobs["web-1"].spread == ev.Spread(group="web", max_per_node=1)
    assert jobs["db-3"].spread == ev.Spread(group="db", max_per_node=2)
    assert not jobs["batch-1"].spread and not jobs["batch-2"].spread
    sim = replay(external_inputs(list(read_log(out))))
    for group, limit in (("web", 1), ("db", 2)):
        for t in range(0, 1000, 5):  # never more than the limit on a node at any time
            per_node: dict[str, int] = {}
            for j, job in sim.ledger.jobs.items():
                if not j.startswith(group):
                    continue
                for at, members in job.placements:
                    if at <= t * 1000 < (job.finished_ms or 10**12):
                        for m in members:
                            per_node[m.node] = per_node.get(m.node, 0) + 1
            assert max(per_node.values(), default=0) <= limit
    assert sim.ledger.jobs["web-3"].placements[0][0] == 600_000  # waited for web-1/web-2
    # `why` of a job the limit keeps out
    trace = tmp_path / "pending.csv"
    trace.write_text(
        (FIX / "apps.csv")
        .read_text()
        .replace("web-1,web,1,0,600", "web-1,web,1,0,")
        .replace("web-2,web,1,0,600", "web-2,web,1,0,")
    )
    import_csv(trace, out, mapping=FIX / "apps-mapping.yaml", nodes_file=FIX / "apps-nodes.yaml")
    db = tmp_path / "p.duckdb"
    r = CliRunner().invoke(
        app, ["replay", str(out), "--out", str(tmp_path / "r.jsonl"), "--duckdb", str(db)]
    )
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(app, ["why", "web-3", "--db", str(db)])
    assert r.exit_code == 0, r.output
    assert (
        "spread group 'web' allows at most 1 per node; the nodes where it would fit are at "
        "that limit (node-1, node-2)"
    ) in r.output
