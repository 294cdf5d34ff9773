"""compare: metrics of hand-built logs with known answers, JSON, table and PNG output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuledger import events as ev
from gpuledger.events import (
    GpuInfo,
    GpuSample,
    JobSpec,
    MemberPlacement,
    NodeInfo,
    Resources,
    TenantShare,
)
from gpuledger.replay.compare import compare, jain, load, percentile, rows, summarize
from gpuledger.replay.logio import write_log
from gpuledger.services.cli.main import app
from tests.fold.story import admission
from tests.services.given import produced

S = 1000  # ms per second

NODE = NodeInfo(
    name="n1",
    cpu_milli=64000,
    memory_mib=65536,
    gpus=tuple(
        GpuInfo(index=i, uuid=f"GPU-n1-{i}", model="H100-80GB", memory_mib=81920, clique="n1-nvl0")
        for i in range(4)
    ),
)


def _job(job_id: str, tenant: str, gpus: int) -> JobSpec:
    return JobSpec(
        job_id=job_id, tenant=tenant, priority_class="train", resources=Resources(gpus=gpus)
    )


def _share(tenant: str, fair: int) -> TenantShare:
    return TenantShare(
        tenant=tenant,
        guaranteed_gpu_milli=2000,
        fair_share_gpu_milli=fair,
        allocated_gpu_milli=0,
        demand_gpu_milli=0,
    )


def _entries(evts: list[ev.Event]) -> list[tuple[int, str, ev.Event]]:
    return [(i, ev.subject_for(e), e) for i, e in enumerate(map(produced, evts), 1)]


def _admit(job_id: str, tenant: str, at: int, slo: str = "batch") -> ev.JobAdmitted:
    return admission(job_id, tenant, event_id=f"adm-{job_id}", occurred_at_ms=at, slo_class=slo)


def _place(job_id: str, tenant: str, at: int, gpus: tuple[int, ...]) -> ev.GangPlaced:
    return ev.GangPlaced(
        event_id=f"pl-{job_id}-{at}",
        occurred_at_ms=at,
        job_id=job_id,
        allocation_id=f"{job_id}#1",
        tenant=tenant,
        members=(MemberPlacement(rank=0, node="n1", gpus=gpus),),
    )


def log_a() -> list[ev.Event]:
    """4 GPUs for 200 s; org/a's j1 (2 GPUs) waits 10 s and runs 100 s; org/b's j2 (1 GPU)
    waits 50 s, runs 50 s and is preempted, losing 30 GPU-s; org/b's fair share drops to 0 at
    100 s; SM activity samples 0.5, 0.3, 0.7."""
    return [
        ev.TenantConfigured(event_id="t0", tenant="org", guaranteed_gpu_milli=4000),
        ev.TenantConfigured(event_id="t1", tenant="org/a", guaranteed_gpu_milli=2000),
        ev.TenantConfigured(event_id="t2", tenant="org/b", guaranteed_gpu_milli=2000),
        ev.NodeRegistered(event_id="n1", node=NODE, simulated=True),
        ev.JobSubmitted(event_id="s1", job=_job("j1", "org/a", 2)),
        ev.JobSubmitted(event_id="s2", job=_job("j2", "org/b", 1)),
        _admit("j1", "org/a", 0),
        _admit("j2", "org/b", 0),
        ev.FairShareUpdated(
            event_id="f1",
            shares=(_share("org", 4000), _share("org/a", 2000), _share("org/b", 2000)),
        ),
        _place("j1", "org/a", 10 * S, (0, 1)),
        ev.GpuMetricsReported(
            event_id="m1",
            occurred_at_ms=20 * S,
            node="n1",
            samples=(
                GpuSample(uuid="GPU-n1-0", sm_active=0.5),
                GpuSample(uuid="GPU-n1-1", sm_active=0.3),
            ),
        ),
        ev.GpuMetricsReported(
            event_id="m2",
            occurred_at_ms=40 * S,
            node="n1",
            samples=(GpuSample(uuid="GPU-n1-0", sm_active=0.7), GpuSample(uuid="GPU-n1-2")),
        ),
        _place("j2", "org/b", 50 * S, (2,)),
        ev.GangEvicted(
            event_id="e2",
            occurred_at_ms=100 * S,
            job_id="j2",
            allocation_id="j2#1",
            reason="Priority",
            preempted_by="x",
            lost_gpu_ms=30 * S,
        ),
        ev.FairShareUpdated(
            event_id="f2",
            occurred_at_ms=100 * S,
            shares=(_share("org", 2000), _share("org/a", 2000), _share("org/b", 0)),
        ),
        ev.GangCompleted(event_id="c1", occurred_at_ms=110 * S, job_id="j1", allocation_id="j1#1"),
        ev.NodeHeartbeat(event_id="h", occurred_at_ms=200 * S, node="n1"),
    ]


def log_b() -> list[ev.Event]:
    """Same cluster and jobs, no preemption: j1 placed at 0 runs 100 s, j2 placed at 0 runs
    60 s; 200 s window; no metrics samples."""
    return [
        *log_a()[:9],
        _place("j1", "org/a", 0, (0, 1)),
        _place("j2", "org/b", 0, (2,)),
        ev.GangCompleted(event_id="c2", occurred_at_ms=60 * S, job_id="j2", allocation_id="j2#1"),
        ev.GangCompleted(event_id="c1", occurred_at_ms=100 * S, job_id="j1", allocation_id="j1#1"),
        ev.NodeHeartbeat(event_id="h", occurred_at_ms=200 * S, node="n1"),
    ]


def test_percentile_and_jain():
    assert percentile([], 0.5) is None
    assert percentile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert percentile([10.0, 50.0], 0.99) == 50.0
    assert jain([1.0, 1.0, 1.0]) == 1.0
    assert jain([1.0, 0.0, 0.0, 0.0]) == pytest.approx(0.25)
    assert jain([]) is None


def test_metrics_of_a_known_log():
    m = summarize(_entries(log_a())).metrics
    # allocation: 2000 milli x 100 s + 1000 x 50 s over 4000 x 200 s
    assert m["gpu_allocation_pct"] == pytest.approx(100 * 250_000 / 800_000)
    assert m["sm_activity_pct"] == pytest.approx(50.0)  # mean of 0.5, 0.3, 0.7 (None skipped)
    assert m["wait_s_p50_by_class"] == {"batch": 10.0}
    assert m["wait_s_p99_by_class"] == {"batch": 50.0}
    assert m["never_placed_by_class"] == {"batch": 0}
    assert m["preemptions"] == 1
    assert m["lost_gpu_hours"] == pytest.approx(30 / 3600)
    # attainment: org/a 2000x100 / 2000x200 = 0.5; org/b 1000x50 / 2000x100 = 0.25 (org is
    # not a leaf, so it is left out)
    assert m["share_attainment_by_tenant"] == pytest.approx({"org/a": 0.5, "org/b": 0.25})
    assert m["fairness_jain"] == pytest.approx(0.75**2 / (2 * (0.25 + 0.0625)))
    assert m["jobs_completed"] == 1
    assert m["jct_s_mean"] == m["jct_s_p50"] == m["jct_s_p99"] == 110.0
    assert m["jobs"] == {
        "submitted": 2,
        "completed": 1,
        "failed": 0,
        "rejected": 0,
        "cancelled": 0,
        "unfinished": 1,
    }
    assert (m["start_s"], m["end_s"], m["events"]) == (0.0, 200.0, len(log_a()))


def test_series_for_plots():
    s = summarize(_entries(log_a()))
    assert s.allocation == [(0.0, 0.0), (10.0, 50.0), (50.0, 75.0), (100.0, 50.0), (110.0, 0.0)]
    assert s.utilisation == [(20.0, 40.0), (40.0, 50.0)]
    assert s.waits == {"batch": [10.0, 50.0]}


def test_delta_is_b_minus_a():
    a, b = summarize(_entries(log_a()), "a"), summarize(_entries(log_b()), "b")
    result = compare(a, b)
    mb = result["b"]["metrics"]
    assert mb["gpu_allocation_pct"] == pytest.approx(100 * (2000 * 100 + 1000 * 60) / 800_000)
    assert mb["sm_activity_pct"] is None
    assert mb["fairness_jain"] == pytest.approx(jain([0.5, 1000 * 60 / (2000 * 200)]))
    assert mb["jct_s_mean"] == pytest.approx(80.0) and mb["jct_s_p99"] == 100.0
    d = result["delta"]
    assert d["gpu_allocation_pct"] == pytest.approx(32.5 - 31.25)
    assert d["preemptions"] == -1
    assert d["wait_s_p99_by_class"] == {"batch": -50.0}
    assert d["sm_activity_pct"] is None
    assert d["jobs"]["completed"] == 1
    table = {r[0]: r[1:] for r in rows(result)}
    assert table["preemptions"] == ("1", "0", "-1")
    assert table["SM activity % (mean)"] == ("50.0", "n/a", "n/a")
    assert table["wait p99 batch"] == ("50.0s", "0.0s", "-50.0s")
    assert table["fairness (Jain, share attainment)"][0] == "0.900"
    json.dumps(result)  # machine-readable as is


def test_identical_logs_have_zero_deltas():
    a = summarize(_entries(log_a()))
    d = compare(a, a)["delta"]
    assert d["gpu_allocation_pct"] == 0 and d["preemptions"] == 0 and d["fairness_jain"] == 0


def _is_png(path: Path) -> bool:
    data = path.read_bytes()
    return data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_cli_table_json_and_plots(tmp_path):
    pa, pb = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    write_log(pa, _entries(log_a()))
    write_log(pb, _entries(log_b()))
    out = tmp_path / "cmp.json"
    res = CliRunner().invoke(
        app, ["compare", str(pa), str(pb), "--json", str(out), "--plots", str(tmp_path / "plots")]
    )
    assert res.exit_code == 0, res.output
    assert "METRIC" in res.output and "DELTA" in res.output and "wait p99 batch" in res.output
    data = json.loads(out.read_text())
    assert data["a"]["metrics"]["preemptions"] == 1 and data["delta"]["preemptions"] == -1
    for name in ("allocation.png", "wait_cdf.png"):
        assert _is_png(tmp_path / "plots" / name), name
    res = CliRunner().invoke(app, ["compare", str(pa), str(pb), "-o", "json"])
    assert res.exit_code == 0 and json.loads(res.output)["b"]["metrics"]["preemptions"] == 0


def test_cli_errors(tmp_path):
    pa = tmp_path / "a.jsonl"
    write_log(pa, _entries(log_a()))
    res = CliRunner().invoke(app, ["compare", str(pa), str(tmp_path / "missing.jsonl")])
    assert res.exit_code == 2 and "missing.jsonl" in res.output
    bad = tmp_path / "bad.jsonl"
    bad.write_text(pa.read_text().splitlines()[0] + "\n{not json\n")
    res = CliRunner().invoke(app, ["compare", str(pa), str(bad)])
    assert res.exit_code == 2 and "bad.jsonl:2" in res.output
    res = CliRunner().invoke(app, ["compare", str(pa), str(tmp_path / "x.duckdb")])
    assert res.exit_code == 2 and "x.duckdb" in res.output


def test_a_duckdb_projection_compares_like_the_log_it_was_built_from(tmp_path):
    from gpuledger.projections.store import rebuild

    log = tmp_path / "a.jsonl"
    write_log(log, _entries(log_a()))
    db = tmp_path / "a.duckdb"
    rebuild(log, db)
    assert load(db).metrics == load(log).metrics


def test_load_reads_files(tmp_path):
    p = tmp_path / "a.jsonl"
    write_log(p, _entries(log_a()))
    assert load(p).metrics == summarize(_entries(log_a())).metrics


def test_cli_import(tmp_path):
    pods = tmp_path / "pods.csv"
    nodes = tmp_path / "nodes.csv"
    pods.write_text(
        "name,num_gpu,gpu_milli,qos,creation_time,deletion_time,scheduled_time\n"
        "p1,1,500,LS,0,10,0\n"
    )
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn1,8000,8192,2,T4\n")
    out = tmp_path / "log.jsonl"
    res = CliRunner().invoke(
        app,
        ["import", "alibaba-openb", "--pods", str(pods), "--nodes", str(nodes), "--out", str(out)],
    )
    assert res.exit_code == 0, res.output
    assert "wrote 8 events" in res.output
    assert len(out.read_text().splitlines()) == 8
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn1,8000,8192,2,T9\n")
    res = CliRunner().invoke(
        app,
        ["import", "alibaba-openb", "--pods", str(pods), "--nodes", str(nodes), "--out", str(out)],
    )
    assert res.exit_code == 2 and "nodes.csv:2: unknown GPU model 'T9'" in res.output
