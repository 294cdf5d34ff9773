"""The audit views answer the seed questions on the hand-built scenario."""

from __future__ import annotations

import json

import pytest

from tests.fold.story import admission
from tests.replay.simlog import rebuilt


@pytest.fixture(scope="module")
def con(tmp_path_factory, messages):
    db = tmp_path_factory.mktemp("views") / "p.duckdb"
    with rebuilt(messages, db) as c:
        yield c


def one(con, q, *args):
    cur = con.execute(q, list(args))
    cols = [d[0] for d in cur.description]
    rows = cur.fetchall()
    assert len(rows) == 1, rows
    return dict(zip(cols, rows[0], strict=True))


def test_who_preempted_whom_and_why(con):
    r = one(con, "SELECT * FROM who_preempted")
    assert (r["victim"], r["victim_tenant"], r["preemptor"], r["preemptor_tenant"]) == (
        "train-b",
        "org/b",
        "infer-a",
        "org/a",
    )
    assert (r["reason"], r["outcome"], r["checkpointed"]) == ("Reclaim", "evicted", True)
    assert r["lost_gpu_seconds"] == 40.0 and r["victim_gpus"] == 8.0
    alts = json.loads(r["alternatives"])
    assert [a["victims"] for a in alts] == [["small-a"], ["mig-a"]]


def test_borrowed_gpu_hours_per_tenant(con):
    b = one(con, "SELECT * FROM tenant_usage WHERE tenant = 'org/b'")
    # 4 GPUs above a 4-GPU guarantee from t=2 s to t=607 s
    assert b["borrowed_gpu_hours"] == pytest.approx(4 * 605 / 3600)
    # the borrowing placement: 8 GPUs from 2 s to 606 s
    assert b["borrowing_placement_gpu_hours"] == pytest.approx(8 * 604 / 3600)
    assert b["lost_gpu_hours"] == pytest.approx(40 / 3600) and b["times_preempted"] == 1
    a = one(con, "SELECT * FROM tenant_usage WHERE tenant = 'org/a'")
    assert a["borrowed_gpu_hours"] == pytest.approx(0.5 * 653 / 3600)
    assert a["preemptions_caused"] == 1


def test_allocation_vs_real_utilisation(con):
    b = one(con, "SELECT * FROM utilisation WHERE tenant = 'org/b'")
    assert b["allocated_gpu_hours"] == pytest.approx(8 * 604 / 3600)
    assert b["sm_active_avg"] == pytest.approx(0.9)
    assert b["idle_allocated_gpu_hours"] == pytest.approx(0.1 * b["measured_gpu_hours"])
    a = one(con, "SELECT * FROM utilisation WHERE tenant = 'org/a'")
    assert a["sm_active_avg"] < 0.3  # infer-a holds 8 GPUs at ~20 % SM activity
    assert a["idle_allocated_gpu_hours"] > 1.0


def test_fragmentation(con):
    rows = con.execute(
        "SELECT node, clique, free_gpus, stranded_gpus, largest_free_clique, pending_jobs "
        "FROM fragmentation ORDER BY node, clique"
    ).fetchall()
    assert ("*", "*", 8, 8, 4, 2) in rows  # 8 free H100s, none usable by an 8-GPU member
    assert ("n2", "n2-nvl0", 4, 4, 4, 2) in rows and ("n2", "n2-nvl1", 4, 4, 4, 2) in rows


def test_fragmentation_free_gpus_usable_by_a_small_pending_job(tmp_path, messages):
    import msgspec

    from gpuledger import events as ev

    extra = [
        ev.JobSubmitted(
            occurred_at_ms=1_300_000,
            job=ev.JobSpec(job_id="four", tenant="org/a", resources=ev.Resources(gpus=4)),
        ),
        admission("four", "org/a", occurred_at_ms=1_300_000),
    ]
    n = len(messages)
    extra = [
        msgspec.structs.replace(e, producer="admission/0") if isinstance(e, ev.JobAdmitted) else e
        for e in extra
    ]
    msgs = messages + [(n + i + 1, ev.subject_for(e), e) for i, e in enumerate(extra)]
    with rebuilt(msgs, tmp_path / "f.duckdb") as c:
        overall = c.execute(
            "SELECT stranded_gpus, free_gpus FROM fragmentation WHERE node = '*'"
        ).fetchone()
    assert overall == (0, 8)


def test_why_pending(con):
    rows = con.execute(
        "SELECT job_id, reason, queue_position, preemption_would_help, "
        "declined_reason FROM why_pending ORDER BY job_id"
    ).fetchall()
    assert rows == [
        ("big-b", "Resources", 2, False, "NoVictims"),
        ("train-b", "Resources", 1, False, None),
    ]
    hist = json.loads(
        one(con, "SELECT node_histogram FROM why_pending WHERE job_id = 'big-b'")["node_histogram"]
    )
    assert hist == {"insufficient free GPUs in one clique": 2, "wrong model": 1}


def test_slo(con):
    r = one(con, "SELECT * FROM slo WHERE slo_class = 'latency-critical'")
    assert (r["jobs"], r["placed"], r["time_to_place_p50_s"]) == (1, 1, 17.0)
    b = one(con, "SELECT * FROM slo WHERE slo_class = 'batch'")
    assert b["waiting_now"] == 2 and b["admission_wait_p99_s"] <= 1.0


def test_decisions_carry_their_inputs(con):
    r = one(con, "SELECT input_seq, seq FROM decisions WHERE type = 'PreemptionRequested'")
    assert r == {"input_seq": 40, "seq": 42}
