"""The pure mappers, without a database."""

from __future__ import annotations

import pytest

from gpuledger import events as ev
from gpuledger.projections.mappers import (
    APPEND_COLUMNS,
    ROW_CLASSES,
    Batch,
    JsonColumn,
    Projection,
    SequenceGap,
    columns_of,
)
from gpuledger.projections.queries import gpus_label
from tests.fold.story import admission
from tests.services.given import produced


def fold(messages, p: Projection | None = None) -> Projection:
    p = p or Projection()
    for seq, subject, event in messages:
        p.apply(seq, subject, event)
    return p


def test_job_lifecycle_states_and_transitions(messages):
    p = fold(messages)
    states = {j: r.state for j, r in p.jobs.items()}
    assert states == {
        "train-b": "pending",
        "small-a": "completed",
        "mig-a": "running",
        "bad-a": "rejected",
        "infer-a": "running",
        "big-b": "pending",
    }
    b = p.drain()
    path = [(t[4], t[5]) for t in b.rows("job_transitions") if t[2] == "train-b"]
    assert path == [
        (None, "submitted"),
        ("submitted", "pending"),
        ("pending", "running"),
        ("running", "preempting"),
        ("preempting", "pending"),
    ]
    train = b.upserts["jobs"][("train-b",)]
    assert (train.attempts, train.preemptions, train.progress_ms) == (1, 1, 590_000)
    assert train.reason == "Resources" and train.allocation_id is None


def test_allocation_intervals_per_gpu_share_and_mig(messages):
    b = fold(messages).drain()
    cols = columns_of("allocations")
    allocs = [dict(zip(cols, t, strict=True)) for t in b.rows("allocations")]  # a row per GPU
    train = [r for r in allocs if r["allocation_id"] == "train-b#1"]
    assert sorted(r["gpu_index"] for r in train) == list(range(8))
    assert {r["gpu_milli"] for r in train} == {1000}
    assert all(r["ended_at_ms"] == 606_000 and r["end_reason"] == "preempted" for r in train)
    assert all(r["borrowing"] and r["gpu_uuid"] == f"GPU-n1-{r['gpu_index']}" for r in train)
    (share,) = [r for r in allocs if r["allocation_id"] == "small-a#1"]
    assert (share["sharing"], share["gpu_milli"], share["end_reason"]) == (
        "milli",
        500,
        "completed",
    )
    (mig,) = [r for r in allocs if r["allocation_id"] == "mig-a#1"]
    assert (mig["sharing"], mig["gpu_milli"], mig["ended_at_ms"]) == ("mig", 143, None)
    # one projection row per member, its GPU columns one value per GPU
    (member,) = [r for k, r in b.upserts["allocations"].items() if k[:2] == ("train-b#1", 0)]
    assert member.gpu_index == tuple(range(8)) and len(member.gpu_model) == 8


def test_preemption_row(messages):
    b = fold(messages).drain()
    (p,) = b.upserts["preemptions"].values()
    assert (p.victim_job_id, p.beneficiary, p.reason) == ("train-b", "infer-a", "Reclaim")
    assert (p.victim_tenant, p.beneficiary_tenant) == ("org/b", "org/a")
    assert p.checkpointed and p.checkpointed_at_ms == 605_000 and p.lost_gpu_ms == 40_000
    assert p.outcome == "evicted" and "alternatives" in p.details


def test_duplicates_skipped_and_gap_refused(messages):
    p = fold(messages[:10])
    assert p.apply(*messages[9]) is False  # redelivered
    assert p.apply(*messages[0]) is False
    with pytest.raises(SequenceGap, match="expected stream sequence 11, got 12"):
        p.apply(*messages[11])
    assert p.last_seq == 10


def test_load_from_rows_continues_identically(messages):
    """The state rebuilt from stored rows folds the rest of the log like the original."""
    for cut in (9, 25, 42, 44, 60):
        whole = fold(messages).drain()
        first = fold(messages[:cut])
        b1 = first.drain()
        stored = {t: b1.rows(t) for t in ROW_CLASSES}  # the tables' rows (one per GPU)
        log = messages[:cut]  # what the stored `events` rows hold
        resumed = fold(messages[cut:], Projection.load(cut, stored, log))
        b2 = resumed.drain()
        merged = Batch()
        for t in ROW_CLASSES:
            merged.upserts[t] = {**b1.upserts[t], **b2.upserts[t]}
            got = sorted(merged.rows(t))
            want = sorted(whole.rows(t))
            assert got == want, (cut, t)
        for t in APPEND_COLUMNS:
            assert b1.rows(t) + b2.rows(t) == whole.rows(t), (cut, t)


def test_events_and_decisions_rows(messages):
    b = fold(messages).drain()
    assert [r[0] for r in b.rows("events")] == list(range(1, len(messages) + 1))
    types = {r[2] for r in b.rows("decisions")}
    assert {"JobAdmitted", "GangPlaced", "PreemptionRequested", "PreemptionDeclined"} <= types
    assert "JobSubmitted" not in types
    ev_row = b.rows("events")[8]
    assert ev_row[2] == "JobAdmitted" and ev_row[8] == 8  # input_seq


def test_node_reregistration_drops_missing_gpus():
    p = Projection()
    gpus = tuple(
        ev.GpuInfo(index=i, uuid=f"G{i}", model="H100-80GB", memory_mib=1, clique="c")
        for i in range(4)
    )
    for seq, e in (
        (1, ev.NodeRegistered(node=ev.NodeInfo(name="n", cpu_milli=1, memory_mib=1, gpus=gpus))),
        (2, ev.NodeLost(node="n", occurred_at_ms=5)),
    ):
        e = produced(e)
        p.apply(seq, ev.subject_for(e), e)
    assert p.nodes["n"].status == "lost"
    again = produced(
        ev.NodeRegistered(node=ev.NodeInfo(name="n", cpu_milli=1, memory_mib=1, gpus=gpus[:2]))
    )
    p.apply(3, ev.subject_for(again), again)
    b = p.drain()
    assert b.upserts["gpus"][("n", 3)] is None and ("n", 1) in p.gpus
    assert p.nodes["n"].status == "ready" and len(b.rows("gpus")) == 2


def job_j_placed_on_n(**placed) -> list[ev.Event]:
    """Node n (one H100) registered, job j of tenant t (1 GPU) submitted, admitted and placed
    on it (allocation j#1; `placed`: more fields of the GangPlaced)."""
    spec = ev.JobSpec(job_id="j", tenant="t", resources=ev.Resources(gpus=1))
    gpu = ev.GpuInfo(index=0, uuid="GPU-0", model="H100-80GB", memory_mib=81920, clique="c0")
    return [
        ev.NodeRegistered(node=ev.NodeInfo(name="n", cpu_milli=1, memory_mib=1, gpus=(gpu,))),
        ev.JobSubmitted(job=spec),
        admission("j", "t", priority=1),
        ev.GangPlaced(
            job_id="j",
            allocation_id="j#1",
            tenant="t",
            members=(ev.MemberPlacement(rank=0, node="n", gpus=(0,)),),
            **placed,
        ),
    ]


def test_cancel_while_running_ends_cancelled():
    msgs = [
        *job_j_placed_on_n(),
        ev.JobCancelled(job_id="j", tenant="t"),
        ev.MemberExited(job_id="j", allocation_id="j#1", rank=0, node="n", outcome="cancelled"),
        ev.GangEvicted(job_id="j", allocation_id="j#1", reason="Cancelled"),
    ]
    p = Projection()
    for i, e in enumerate(map(produced, msgs), 1):
        p.apply(i, ev.subject_for(e), e)
        if i == 5:
            assert p.jobs["j"].state == "running"
    assert p.jobs["j"].state == "cancelled" and not p.open_allocs


def test_a_cancel_of_an_unknown_job_or_from_another_tenant_creates_no_row():
    spec = ev.JobSpec(job_id="j", tenant="t", resources=ev.Resources(gpus=1))
    p = Projection()
    p.apply(1, "gl.cancel.t.ghost", ev.JobCancelled(job_id="ghost", tenant="t"))
    p.apply(2, "gl.submit.t.j", ev.JobSubmitted(job=spec))
    p.apply(3, "gl.cancel.other.j", ev.JobCancelled(job_id="j", tenant="other"))
    assert set(p.jobs) == {"j"} and p.jobs["j"].state == "submitted"
    assert not p.jobs["j"].cancel_requested


def test_gpus_label():
    assert gpus_label(1, 8, 0, None) == "8"
    assert gpus_label(2, 8, 0, None) == "2x8"
    assert gpus_label(1, 0, 500, None) == "500m"
    assert gpus_label(1, 0, 0, "1g.10gb") == "1g.10gb"


def test_a_json_column_encodes_each_value_on_append():
    col = JsonColumn()
    col.append({"node": "gpu-é"})
    col.append(ev.JobCancelled(job_id="j", tenant="t"))
    assert len(col) == 2
    assert list(col) == [
        '{"node":"gpu-é"}'.encode(),
        ev.encode(ev.JobCancelled(job_id="j", tenant="t")),
    ]


def test_batch_columns_and_frozen_snapshot(messages):
    """Appended rows are kept as columns; `freeze` snapshots upserted rows as columns that
    later folding (which mutates the same Row objects) does not change."""
    p = fold(messages[:40])
    b = p.drain()
    events = b.rows("events")
    assert [len(c) for c in b.appends["events"]] == [len(events)] * len(APPEND_COLUMNS["events"])
    assert all(isinstance(r[-1], bytes) for r in events)  # payload JSON as UTF-8 bytes
    before = {t: sorted(b.rows(t), key=repr) for t in ROW_CLASSES}
    b.freeze()
    fold(messages[40:], p)  # mutates rows the frozen batch also holds
    assert {t: sorted(b.rows(t), key=repr) for t in ROW_CLASSES} == before
    for t, (keys, cols) in b.frozen.items():
        cls = ROW_CLASSES[t]
        assert len(keys) == len(cls.KEY) and len(cols) == len(cls.COLUMNS), t


def test_a_decision_forged_in_another_roles_name_is_a_refusal_row_with_its_producer():
    # given job j running on n, placed by the scheduler's leader of epoch 1
    msgs = [produced(e) for e in job_j_placed_on_n(leader_epoch=1)]
    # when a PreemptionRequested on its own subject claims the scheduler, at epoch 2**62,
    # and then the real scheduler (epoch 1) decides again
    forged = ev.PreemptionRequested(
        job_id="j",
        allocation_id="j#1",
        beneficiary="x",
        reason="Priority",
        deadline_ms=1,
        producer="scheduler/x",
        leader_epoch=2**62,
    )
    real = ev.PendingReasonChanged(
        job_id="j", reason="Resources", message="m", producer="scheduler/0", leader_epoch=1
    )
    p = Projection()
    for seq, e in enumerate([*msgs, forged, real], 1):
        p.apply(seq, ev.subject_for(e), e)
    # then the forgery is a refusal row naming who claimed it and why, and nothing else
    b = p.drain()
    (row,) = b.rows("refusals")
    cols = APPEND_COLUMNS["refusals"]
    got = dict(zip(cols, row, strict=True))
    assert (got["seq"], got["type"], got["job_id"]) == (5, "PreemptionRequested", "j")
    assert (got["producer"], got["code"]) == ("scheduler/x", "WrongProducer")
    assert got["subject"] == "gl.preempt.j.PreemptionRequested" and "preemption" in got["message"]
    assert p.jobs["j"].state == "running" and not b.upserts.get("preemptions")
    # and the real scheduler's later decision is folded, not stale
    assert {r[0] for r in b.rows("decisions")} >= {4, 6}
    assert p.ledger.intake.leader_epochs == {"scheduler": 1}
