"""Elastic gangs (`min_members < replicas`): given a running gang with members above its
minimum and a blocked job, when preemption decides, then it takes members above the minimum
(highest ranks first) before any whole gang; when they have exited, the scheduler records
`GangResized` and the gang runs on with the others, their capacity released."""

from __future__ import annotations

import pytest

from gpuledger import events as ev
from gpuledger.events.reasons import PreemptionReason
from gpuledger.services.admission.decider import Admission
from gpuledger.services.domain.fold.refusals import Refused
from gpuledger.services.preemption.decider import Preemption
from gpuledger.services.scheduler.decider import Scheduler
from tests.services.given import cluster, exit_all, fold, given, of_type, stamped, submitted
from tests.services.test_preemption import QUIET, blocked, fleet, running, start, step

ELASTIC = {"id": "elastic", "tenant": "a", "gpus": 1, "replicas": 6, "min_members": 4}
URGENT = {"class": "interactive"}


def leave(ledger, req, at, checkpoint=True):
    """The members a preemption request names checkpoint (if asked) and exit at `at`."""
    rec = ledger.allocations[req.allocation_id]
    ranks = req.ranks if isinstance(req.ranks, tuple) else [m.rank for m in rec.members]
    out = []
    for m in rec.members:
        if m.rank not in ranks:
            continue
        common = dict(job_id=req.job_id, allocation_id=req.allocation_id, rank=m.rank, node=m.node)
        if checkpoint:
            out.append(
                stamped(ev.MemberCheckpointed, f"ck-{m.rank}", at, step=7, progress_ms=0, **common)
            )
        out.append(stamped(ev.MemberExited, f"ex-{m.rank}", at, outcome="preempted", **common))
    fold(ledger, out)


def test_a_blocked_job_takes_members_above_the_minimum_not_the_whole_gang():
    # given an elastic gang of 6 (min 4) and a 1-GPU job on one 8-GPU node
    ledger = running(fleet(), submitted(**ELASTIC), submitted(id="other", tenant="a", gpus=1))
    assert len(ledger.allocations["elastic#1"].members) == 6
    # when an urgent job needs 3 GPUs (1 free)
    out = blocked(ledger, 10, id="urgent", tenant="a", gpus=3, **URGENT)
    # then the gang gives up its two highest ranks; nothing is evicted whole
    (req,) = of_type(out, ev.PreemptionRequested)
    assert (req.job_id, req.ranks, req.reason) == ("elastic", (4, 5), PreemptionReason.Priority)
    assert "elastic members 4-5 (shrinks from 6 to 4 members)" in req.message
    assert req.details["victims"][0]["shrink"] == {"from": 6, "to": 4, "ranks": [4, 5]}
    # and the gang keeps running meanwhile
    assert ledger.jobs["elastic"].state == "running"


def test_a_shrink_takes_only_as_many_members_as_the_job_needs():
    ledger = running(fleet(), submitted(**ELASTIC), submitted(id="other", tenant="a", gpus=1))
    (req,) = of_type(
        blocked(ledger, 10, id="urgent", tenant="a", gpus=2, **URGENT), ev.PreemptionRequested
    )
    assert req.ranks == (5,)


def test_when_the_leaving_members_exited_the_gang_shrinks_and_the_job_lands():
    ledger = running(fleet(), submitted(**ELASTIC), submitted(id="other", tenant="a", gpus=1))
    (req,) = of_type(
        blocked(ledger, 10, id="urgent", tenant="a", gpus=3, **URGENT), ev.PreemptionRequested
    )
    fold(ledger, [req])
    # while the members checkpoint, the job waits for them
    (waiting,) = of_type(step(ledger, 11, Scheduler()), ev.PendingReasonChanged)
    assert waiting.reason == "WaitingForPreemptedWorkloads" and "elastic" in waiting.message
    # when ranks 4 and 5 checkpointed and exited
    leave(ledger, req, 20)
    out = step(ledger, 20, Scheduler()) + step(ledger, 20, Scheduler())
    # then the gang is resized from 6 to 4, nothing lost, and the urgent job is placed
    (resized,) = of_type(out, ev.GangResized)
    assert (resized.from_members, resized.to_members, resized.reason) == (6, 4, "Priority")
    assert (resized.preempted_by, resized.checkpointed, resized.lost_gpu_ms) == ("urgent", True, 0)
    assert [m.rank for m in resized.members] == [0, 1, 2, 3]
    (placed,) = of_type(out, ev.GangPlaced)
    assert placed.job_id == "urgent"
    rec = ledger.allocations["elastic#1"]
    assert (len(rec.members), rec.gpu_milli, rec.preemption) == (4, 4000, None)
    assert ledger.jobs["elastic"].state == "running"
    assert ledger.tenant_gpu_milli["a"] == 4000 + 1000 + 3000
    # and the 4 members that stayed complete the job
    exit_all(ledger, "elastic", "completed", 30, key="done-{rank}")
    (done,) = of_type(step(ledger, 30, Scheduler()), ev.GangCompleted)
    assert done.job_id == "elastic" and ledger.jobs["elastic"].state == "completed"


def test_members_that_leave_without_a_checkpoint_lose_their_work_only():
    ledger = given_elastic_running_since(0)
    (req,) = of_type(
        blocked(ledger, 600_000, id="urgent", tenant="a", gpus=3, **URGENT),
        ev.PreemptionRequested,
    )
    fold(ledger, [req])
    leave(ledger, req, 600_000, checkpoint=False)
    (resized,) = of_type(step(ledger, 600_000, Scheduler()), ev.GangResized)
    # two members ran 600 s without a checkpoint: 2 x 600 GPU-s lost, the gang keeps its own
    assert (resized.checkpointed, resized.lost_gpu_ms) == (False, 2 * 600_000)


def given_elastic_running_since(at):
    return running(fleet(), submitted(**ELASTIC), submitted(id="other", tenant="a", gpus=1), at=at)


def test_a_gang_at_its_minimum_is_evicted_whole_as_before():
    # given the gang runs with only its 4-member minimum (the node holds 4 others)
    ledger = running(
        fleet(),
        submitted(id="other", tenant="a", gpus=4, **{"class": "build"}),
        submitted(at_ms=1, **ELASTIC),
    )
    assert len(ledger.allocations["elastic#1"].members) == 4
    (req,) = of_type(
        blocked(ledger, 10, id="urgent", tenant="a", gpus=2, **URGENT), ev.PreemptionRequested
    )
    assert (
        req.job_id == "elastic"
        and req.ranks
        is ev.PreemptionRequested(
            job_id="x", allocation_id="x", beneficiary="x", reason="x", deadline_ms=0
        ).ranks
    )  # absent: the whole gang


def test_minimum_runtime_protects_members_above_the_minimum_too():
    ledger = running(
        fleet(min_runtime_s=600),
        submitted(**ELASTIC),
        submitted(id="other", tenant="a", gpus=1),
    )
    out = blocked(ledger, 10, id="urgent", tenant="a", gpus=3, **URGENT)
    assert of_type(out, ev.PreemptionRequested) == []
    (declined,) = of_type(out, ev.PreemptionDeclined)
    assert declined.reason == "MinRuntime"


def test_a_partial_preemption_that_would_leave_fewer_than_the_minimum_is_refused():
    ledger = running(fleet(), submitted(**ELASTIC), submitted(id="other", tenant="a", gpus=1))
    bad = stamped(
        ev.PreemptionRequested,
        "bad",
        10,
        job_id="elastic",
        allocation_id="elastic#1",
        beneficiary="other",
        reason="Priority",
        deadline_ms=100,
        ranks=(1, 2, 3),
    )
    with pytest.raises(Refused) as err:
        ledger.fold(ledger.last_seq + 1, bad)
    assert err.value.refusal.code == "InvalidResize"
    assert ledger.allocations["elastic#1"].preemption is None


def test_the_preemption_service_does_not_act_twice_while_a_gang_shrinks():
    ledger = running(fleet(), submitted(**ELASTIC), submitted(id="other", tenant="a", gpus=1))
    out = blocked(ledger, 10, id="urgent", tenant="a", gpus=3, **URGENT)
    fold(ledger, out)
    step(ledger, 11, Scheduler())
    assert of_type(Preemption().decide(ledger, 12), ev.PreemptionRequested) == []


# ---------------------------------------------------------------- grow


def shrunk_to_4(policy=None, at=20):
    """A 6-member elastic gang shrunk to 4 for an urgent 3-GPU job; returns the ledger."""
    ledger = running(
        fleet(**(policy or {})), submitted(**ELASTIC), submitted(id="other", tenant="a", gpus=1)
    )
    (req,) = of_type(
        blocked(ledger, 10, id="urgent", tenant="a", gpus=3, **URGENT), ev.PreemptionRequested
    )
    fold(ledger, [req])
    leave(ledger, req, at)
    step(ledger, at, Scheduler())
    step(ledger, at, Scheduler())
    start(ledger, at)
    assert len(ledger.allocations["elastic#1"].members) == 4
    return ledger


def finish(ledger, job_id, at):
    exit_all(ledger, job_id, "completed", at, key="done-{job_id}-{rank}")
    step(ledger, at, Scheduler())


def test_a_gang_below_replicas_grows_when_capacity_frees_and_nothing_waits():
    ledger = shrunk_to_4()
    # when the urgent job ends (3 GPUs free, nothing queued)
    finish(ledger, "urgent", 100)
    out = step(ledger, 100, Scheduler())
    # then the gang grows back to its 6 replicas with the next ranks
    (grown,) = of_type(out, ev.GangResized)
    assert (grown.from_members, grown.to_members, grown.reason) == (4, 6, "Grow")
    assert [m.rank for m in grown.members] == [0, 1, 2, 3, 4, 5]
    rec = ledger.allocations["elastic#1"]
    assert (len(rec.members), rec.gpu_milli, ledger.tenant_gpu_milli["a"]) == (6, 6000, 7000)
    assert "elastic#1" not in ledger.sched.growable and "elastic#1" in ledger.awaiting_start
    assert step(ledger, 100, Scheduler()) == []  # full: nothing more


def test_a_gang_does_not_grow_while_a_job_waits_for_capacity():
    ledger = shrunk_to_4()
    finish(ledger, "urgent", 100)
    fold(ledger, [submitted(at_ms=100, id="big", tenant="a", gpus=8)])
    out = step(ledger, 100, Admission(), Scheduler())
    assert of_type(out, ev.PendingReasonChanged)[0].job_id == "big"
    assert of_type(step(ledger, 101, Scheduler()), ev.GangResized) == []


def test_a_shrunk_gang_does_not_grow_back_within_the_minimum_runtime():
    # given the policy's minimum runtime is 600 s and the gang shrank at 20 ms
    ledger = shrunk_to_4()
    fold(
        ledger,
        [
            stamped(
                ev.PolicyConfigured, "mr", 30, policy=ev.Policy(**{**QUIET, "min_runtime_s": 600})
            )
        ],
    )
    finish(ledger, "urgent", 100)
    # then it does not grow before 600 s after the shrink, and the scheduler wakes then
    assert of_type(step(ledger, 100, Scheduler()), ev.GangResized) == []
    assert Scheduler().next_wakeup_ms(ledger, 100) == 20 + 600_000
    (grown,) = of_type(step(ledger, 20 + 600_000, Scheduler()), ev.GangResized)
    assert grown.to_members == 6


def test_a_gang_grows_only_as_far_as_its_tenants_quota_allows():
    cfg = fleet(
        tenants=[
            {"name": "a", "guaranteed": 4, "borrowing_limit": 1},
            {"name": "b", "guaranteed": 4},
        ]
    )
    ledger = given(*cfg, submitted(**ELASTIC))
    # when it is placed: with as many members as its quota allows, 5 (4 + 1 borrowed)
    step(ledger, 0, Admission(), Scheduler())
    start(ledger, 0)
    assert len(ledger.allocations["elastic#1"].members) == 5
    # and it never grows past its borrowing limit, though 3 GPUs stay free
    assert of_type(step(ledger, 10, Scheduler()), ev.GangResized) == []
    assert ledger.tenant_gpu_milli["a"] == 5000


def test_the_next_blocked_job_counts_only_the_members_that_leave():
    # given the gang (6, min 4) and a 1-GPU job fill 7 of 8 GPUs; two urgent jobs arrive
    ledger = running(fleet(), submitted(**ELASTIC), submitted(id="other", tenant="a", gpus=1))
    fold(
        ledger,
        [
            submitted(at_ms=10, id="urgent-1", tenant="a", gpus=3, **URGENT),
            submitted(at_ms=11, id="urgent-2", tenant="a", gpus=4, **URGENT),
        ],
    )
    step(ledger, 12, Admission(), Scheduler())
    # when preemption plans for both in one decide
    out = Preemption().decide(ledger, 12)
    # then the first takes the gang's 2 spare members; the second does not count on the
    # gang's other 4 GPUs (they stay): it must find victims of its own, and finds none
    reqs = of_type(out, ev.PreemptionRequested)
    assert [(r.job_id, r.beneficiary, r.ranks) for r in reqs] == [("elastic", "urgent-1", (4, 5))]
    (declined,) = of_type(out, ev.PreemptionDeclined)
    assert declined.job_id == "urgent-2"


def test_a_gang_shrunk_once_and_grown_back_can_be_preempted_again():
    # given the gang shrank 6 -> 4 for an urgent job and grew back to 6 when it ended
    ledger = running(fleet(), submitted(**ELASTIC), submitted(id="other", tenant="a", gpus=1))
    (first,) = of_type(
        blocked(ledger, 10, id="urgent", tenant="a", gpus=3, **URGENT), ev.PreemptionRequested
    )
    fold(ledger, [first])
    leave(ledger, first, 20)
    step(ledger, 20, Scheduler())
    step(ledger, 20, Scheduler())
    start(ledger, 20)
    finish(ledger, "urgent", 100)
    (grown,) = of_type(step(ledger, 100, Scheduler()), ev.GangResized)
    assert grown.to_members == 6
    start(ledger, 100)
    # when a second urgent job needs 3 GPUs (1 free)
    (req,) = of_type(
        blocked(ledger, 5_400, id="urgent-2", tenant="a", gpus=3, **URGENT),
        ev.PreemptionRequested,
    )
    assert (req.job_id, req.beneficiary, req.ranks) == ("elastic", "urgent-2", (4, 5))
    # then it is a new decision, not a repeat of the first: its id differs (the bus, like
    # JetStream, drops an event whose id it has seen, for the rest of the allocation)
    assert req.event_id != first.event_id
    # and the gang shrinks again for it
    fold(ledger, [req])
    leave(ledger, req, 5_500)
    (resized,) = of_type(step(ledger, 5_500, Scheduler()), ev.GangResized)
    assert (resized.from_members, resized.to_members, resized.preempted_by) == (6, 4, "urgent-2")


def test_a_gang_grows_only_where_its_spread_group_allows():
    # given a spread group `g` (at most 1 member per node): `w` holds the A100 node, so the
    # elastic gang of the group (4 replicas, min 2) is placed with 2 members on the H100 node
    cfg = cluster(
        {"name": "a100", "gpus": 4, "model": "A100-80GB"},
        {"name": "h100", "gpus": 2, "model": "H100-80GB"},
        tenants=[{"name": "a", "guaranteed": 8}],
        policy=QUIET,
    )
    g = {"group": "g", "max_per_node": 1}
    ledger = running(cfg, submitted(id="w", tenant="a", gpus=1, models=["A100-80GB"], spread=g))
    fold(
        ledger,
        [submitted(at_ms=1, id="e", tenant="a", gpus=1, replicas=4, min_members=2, spread=g)],
    )
    step(ledger, 1, Admission(), Scheduler())
    start(ledger, 1)
    assert {m.node for m in ledger.allocations["e#1"].members} == {"h100"}
    # when 3 GPUs stay free on the A100 node and nothing waits
    out = step(ledger, 10, Scheduler())
    # then the gang does not grow onto it: the group is at its limit there, as for a placement
    assert of_type(out, ev.GangResized) == []
    assert ledger.sched.spread_nodes["g"] == {"a100": 1, "h100": 2}


def test_a_non_preemptible_gang_grows_only_within_its_models_guarantee():
    # given a tenant guaranteed 2 A100s and a non-preemptible elastic gang (4, min 1) that
    # got 2 members, the other 2 A100s held by a preemptible job
    cfg = cluster(
        {"name": "a100", "gpus": 4, "model": "A100-80GB"},
        tenants=[{"name": "a", "guaranteed": 8, "guaranteed_by_model": {"A100-80GB": 2}}],
        policy=QUIET,
    )
    ledger = running(cfg, submitted(id="hold", tenant="a", gpus=2))
    fold(
        ledger,
        [
            submitted(
                at_ms=1, id="e", tenant="a", gpus=1, replicas=4, min_members=1,
                **{"class": "inference"},
            )
        ],
    )  # fmt: skip
    step(ledger, 1, Admission(), Scheduler())
    start(ledger, 1)
    assert len(ledger.allocations["e#1"].members) == 2
    # when the preemptible job ends and 2 A100s are free
    finish(ledger, "hold", 10)
    out = step(ledger, 10, Scheduler())
    # then the gang does not grow past its tenant's A100 guarantee, as a placement would not
    assert of_type(out, ev.GangResized) == []
    assert ledger.sched.tenant_fixed_by_model[("a", "A100-80GB")] == 2000
