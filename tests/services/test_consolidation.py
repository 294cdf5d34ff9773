"""The consolidation pass as a specification: given a fleet with free GPUs scattered over
nodes and a job that needs them in one clique, when the preemption service decides, then it
migrates the fewest movable allocations (`ConsolidationPlanned` + `PreemptionRequested`
`Consolidate`) or says in the decline why no move would do."""

from __future__ import annotations

from gpuledger import events as ev
from gpuledger.services.admission.decider import Admission
from gpuledger.services.domain.fold.ledger import PreemptionRecord
from gpuledger.services.preemption.decider import Preemption
from gpuledger.services.scheduler.decider import Scheduler
from tests.services.given import cluster, fold, given, of_type, stamped, submitted

QUIET = {
    "min_runtime_s": 0,
    "eviction_budget_per_hour": 0,
    "aging_after_preemptions": 0,
    "aging_after_wait_s": 0,
}
NODES = ({"name": "n1", "gpus": 4}, {"name": "n2", "gpus": 4})


def fragmented(wide_gpus: int = 2, free_per_node: int = 1, cls: str = "train", **policy):
    """Eight 1-GPU jobs fill two 4-GPU nodes; `free_per_node` of them end on each node; then
    `wide` (`wide_gpus` GPUs) is submitted and found not to fit."""
    ledger = given(
        *cluster(
            *NODES,
            tenants=[{"name": "a", "guaranteed": 8}],
            policy={**QUIET, "consolidation": True, **policy},
        )
    )
    fold(
        ledger,
        [submitted(at_ms=0, id=f"s{i}", tenant="a", gpus=1, **{"class": cls}) for i in range(1, 9)],
    )
    fold(ledger, Admission().decide(ledger, 0))
    fold(ledger, Scheduler().decide(ledger, 0))
    ends = []
    for n in ("n1", "n2"):
        ends += sorted(a for a in ledger.active if ledger.allocations[a].nodes() == (n,))[
            :free_per_node
        ]
    fold(
        ledger,
        [stamped(ev.GangCompleted, a, at=2, job_id=a.split("#")[0], allocation_id=a) for a in ends],
    )
    fold(ledger, [submitted(at_ms=3, id="wide", tenant="a", gpus=wide_gpus)])
    fold(ledger, Admission().decide(ledger, 3))
    fold(ledger, Scheduler().decide(ledger, 3))
    assert ledger.jobs["wide"].reason == "TopologyUnsatisfiable"
    return ledger


def test_one_move_makes_room_and_is_a_consolidate_preemption():
    out = Preemption().decide(fragmented(), 5)
    (planned,) = of_type(out, ev.ConsolidationPlanned)
    (req,) = of_type(out, ev.PreemptionRequested)
    (move,) = planned.moves
    assert (req.job_id, req.allocation_id, req.reason, req.beneficiary) == (
        move.job_id,
        move.allocation_id,
        "Consolidate",
        "wide",
    )
    assert move.from_nodes != move.to_nodes and planned.target_nodes == move.from_nodes
    assert planned.free_gpu_milli == 2000


def test_the_bound_on_moves_holds():
    # 2 + 2 free, wide needs 4: two 1-GPU moves off one node
    out = Preemption().decide(
        fragmented(wide_gpus=4, free_per_node=2, consolidation_max_moves=1), 5
    )
    assert of_type(out, ev.ConsolidationPlanned) == []
    (declined,) = of_type(out, ev.PreemptionDeclined)
    assert (
        "no set of at most 1 movable allocations on one node makes room"
        in declined.details["consolidation"]
    )
    out = Preemption().decide(
        fragmented(wide_gpus=4, free_per_node=2, consolidation_max_moves=2), 5
    )
    (planned,) = of_type(out, ev.ConsolidationPlanned)
    assert len(planned.moves) == 2 and len(of_type(out, ev.PreemptionRequested)) == 2
    assert len({m.from_nodes for m in planned.moves}) == 1


def test_the_eviction_budget_protects_movers():
    ledger = fragmented(eviction_budget_per_hour=1)
    for job in ledger.jobs.values():  # given every running job was evicted 10 minutes ago
        if job.job_id != "wide":
            job.preemptions.append(
                PreemptionRecord(at_ms=0, by="x", reason="Priority", allocation_id="x#1")
            )
    out = Preemption().decide(ledger, 600_000)
    assert of_type(out, ev.ConsolidationPlanned) == []
    (declined,) = of_type(out, ev.PreemptionDeclined)
    assert (
        "movable, " in declined.details["consolidation"]
        and "protected" in declined.details["consolidation"]
    )


def test_non_preemptible_work_is_never_moved():
    out = Preemption().decide(fragmented(cls="build"), 5)
    assert (
        of_type(out, ev.ConsolidationPlanned) == [] and of_type(out, ev.PreemptionRequested) == []
    )


def test_not_fragmentation_no_move():
    # nothing ended: no GPU is free at all, moving cannot help
    ledger = fragmented()
    fold(ledger, [submitted(at_ms=4, id="more", tenant="a", gpus=2)])
    fold(ledger, Admission().decide(ledger, 4))
    fold(ledger, Scheduler().decide(ledger, 4))
    out = Preemption().decide(ledger, 5)
    plans = of_type(out, ev.ConsolidationPlanned)
    assert [p.job_id for p in plans] == ["wide"]  # one plan; `more` finds the 2 GPUs spoken for
    (declined,) = [e for e in of_type(out, ev.PreemptionDeclined) if e.job_id == "more"]
    assert declined.details["consolidation"].startswith("not fragmentation")
