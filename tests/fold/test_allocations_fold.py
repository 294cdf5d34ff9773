"""The allocations fold (services/domain/fold/allocations.py, members.py, resize.py): a
gang's placement, its members' facts, its end, and an elastic gang's resize."""

from __future__ import annotations

from gpuledger import events as ev
from gpuledger.services.domain.fold import allocations
from tests.fold.story import admitted, given, node, placed, submitted, when


def running(job: str = "a", **spec):
    return given(node(), submitted(job, **spec), admitted(job), placed(job))


def test_the_allocations_fold_handles_the_run_events():
    assert {ev.GangPlaced, ev.GangResized, ev.GangEvicted, ev.MemberExited} <= set(
        allocations.FOLD.handlers
    )


def test_a_placement_books_the_gang_everywhere_and_its_end_gives_it_all_back():
    # given a job of 8 GPUs
    # when it is placed on n1
    ledger = running()
    # then the allocation is active, booked in the fleet, its tenant and its node
    assert ledger.active == {"a#1"} and ledger.awaiting_start == {"a#1"}
    assert ledger.fleet.allocation_ids() == ("a#1",)
    assert ledger.tenant_gpu_milli == {"org/a": 8000}
    assert ledger.tenant_by_model == {("org/a", "H100-80GB"): 8000}
    assert ledger.agents.node_allocations == {"n1": {"a#1"}}
    assert ledger.jobs["a"].state == "running" and ledger.jobs["a"].allocation_id == "a#1"
    # when it completes
    when(ledger, ev.GangCompleted(job_id="a", allocation_id="a#1", producer="scheduler/0"))
    # then everything is given back and the job is completed
    assert ledger.active == set() and ledger.fleet.allocation_ids() == ()
    assert ledger.tenant_gpu_milli == {"org/a": 0} and ledger.tenant_by_model == {}
    assert ledger.agents.node_allocations == {"n1": set()}
    assert ledger.jobs["a"].state == "completed" and ledger.jobs["a"].allocation_id is None


def test_an_evicted_gang_requeues_its_job_with_the_preemption_on_record():
    ledger = running()
    who = {"job_id": "a", "allocation_id": "a#1", "producer": "scheduler/0"}
    when(ledger, ev.GangEvicted(**who, reason="Priority", preempted_by="b"))
    job = ledger.jobs["a"]
    assert job.state == "pending" and ledger.pending == {"a"}
    assert [(p.by, p.reason) for p in job.preemptions] == [("b", "Priority")]


def test_a_member_fact_from_another_node_is_refused():
    ledger = running()
    fact = ev.MemberStarted(
        job_id="a", allocation_id="a#1", rank=0, node="n2", producer="node-agent/n2"
    )
    refusal = when(ledger, fact)
    assert refusal is not None and refusal.code == "WrongNode"
    assert ledger.allocations["a#1"].started == {}


def test_an_elastic_gang_grows_onto_more_gpus_and_its_tenant_pays_for_them():
    # given an elastic gang of up to 4 one-GPU members, placed with 2
    ledger = given(
        node(),
        submitted("e", gpus=1, replicas=4, min_members=2),
        admitted("e"),
        placed("e", ("n1", (0,)), ("n1", (1,))),
    )
    assert ledger.sched.growable == {"e#1"}
    # when it grows to 4
    members = tuple(ev.MemberPlacement(rank=r, node="n1", gpus=(r,)) for r in range(4))
    when(
        ledger,
        ev.GangResized(
            job_id="e",
            allocation_id="e#1",
            from_members=2,
            to_members=4,
            members=members,
            reason="Grow",
            producer="scheduler/0",
        ),
    )
    # then it holds 4 members, is no longer growable, and its tenant uses 4 GPUs
    assert len(ledger.allocations["e#1"].members) == 4 and ledger.sched.growable == set()
    assert ledger.tenant_gpu_milli == {"org/a": 4000}
