"""Issue 30: a node reports only on members placed on it (docs/security.md, the table).

Given a job whose one member runs on n2, when another node (n1) reports that member
started, checkpointed or exited, then the fold refuses it (`WrongNode`) and nothing changes;
the same fact from n2 is folded. A fact naming another job than the allocation's is
`WrongJob`; one about an allocation the log does not hold changes nothing."""

from __future__ import annotations

import pytest

from gpuledger import events as ev
from gpuledger.events.reasons import FoldRefusal
from gpuledger.services.domain.fold.acceptance import admit
from gpuledger.services.domain.fold.ledger import Ledger
from tests.services.test_acceptance import gpu, job


def two_nodes_and_a_job_on_n2() -> Ledger:
    ledger = Ledger()
    log: list[ev.Event] = []
    for name in ("n1", "n2"):
        node = ev.NodeInfo(
            name=name, cpu_milli=64000, memory_mib=512000, gpus=tuple(gpu(i) for i in range(8))
        )
        log.append(ev.NodeRegistered(node=node, producer=f"node-agent/{name}"))
    member = ev.MemberPlacement(rank=0, node="n2", gpus=tuple(range(8)))
    log += [
        *job("a"),
        ev.GangPlaced(
            job_id="a", allocation_id="a#1", tenant="org/a", members=(member,), producer="scheduler"
        ),
    ]
    for seq, e in enumerate(log, 1):
        assert admit(ledger, seq, e) is None
    return ledger


def fact(kind: str, node: str, *, rank: int = 0, job_id: str = "a", alloc: str = "a#1"):
    common = dict(
        job_id=job_id, allocation_id=alloc, rank=rank, node=node, producer=f"node-agent/{node}"
    )
    if kind == "started":
        return ev.MemberStarted(**common)
    if kind == "checkpointed":
        return ev.MemberCheckpointed(step=7, progress_ms=1000, **common)
    return ev.MemberExited(outcome="completed", **common)


def member_state(ledger: Ledger):
    rec = ledger.allocations["a#1"]
    return (
        dict(rec.started),
        dict(rec.exited),
        dict(rec.checkpoints),
        set(ledger.sched.settle_ready),
    )


@pytest.mark.parametrize("kind", ["started", "checkpointed", "exited"])
def test_another_node_cannot_report_on_a_member_it_does_not_run(kind):
    ledger = two_nodes_and_a_job_on_n2()
    before = member_state(ledger)
    refusal = admit(ledger, 10, fact(kind, "n1"))
    assert refusal is not None and refusal.code == FoldRefusal.WrongNode
    assert "'n1'" in refusal.message and "runs on 'n2'" in refusal.message
    assert member_state(ledger) == before
    assert ledger.jobs["a"].state == "running" and "a#1" in ledger.active


@pytest.mark.parametrize("kind", ["started", "checkpointed", "exited"])
def test_the_node_that_runs_the_member_is_believed(kind):
    ledger = two_nodes_and_a_job_on_n2()
    assert admit(ledger, 10, fact(kind, "n2")) is None
    started, exited, checkpoints, settle = member_state(ledger)
    if kind == "started":
        assert started == {0: 0}
    elif kind == "checkpointed":
        assert checkpoints == {0: (7, 1000, 0)}
    else:
        assert exited == {0: ("completed", 0)} and settle == {"a#1"}


def test_a_rank_the_allocation_does_not_have_is_wrong_node():
    ledger = two_nodes_and_a_job_on_n2()
    refusal = admit(ledger, 10, fact("exited", "n2", rank=3))
    assert refusal is not None and refusal.code == FoldRefusal.WrongNode
    assert "no such rank" in refusal.message
    assert ledger.allocations["a#1"].exited == {}


def test_a_fact_naming_another_job_is_wrong_job():
    ledger = two_nodes_and_a_job_on_n2()
    refusal = admit(ledger, 10, fact("exited", "n2", job_id="b"))
    assert refusal is not None and refusal.code == FoldRefusal.WrongJob
    assert ledger.allocations["a#1"].exited == {} and not ledger.sched.settle_ready


def test_a_fact_about_an_unknown_allocation_changes_nothing():
    ledger = two_nodes_and_a_job_on_n2()
    before = member_state(ledger)
    assert admit(ledger, 10, fact("exited", "n1", alloc="ghost#1")) is None
    assert member_state(ledger) == before and "ghost#1" not in ledger.allocations
