"""The elastic-shrink example through the simulator in checking mode (every decide re-run
without caches and re-decided from the log): given a 6-member gang (min 4) and a 2-GPU job
on 8 GPUs, when an interactive job needs 2 GPUs, then the gang gives up its two highest
ranks (checkpointed, nothing lost) and runs on with 4, no gang is evicted, and the
interactive job starts as soon as they have left; when it ends and nothing waits, the gang
grows back to 6 (`GangResized`, reason Grow) and still finishes at 2 h."""

from pathlib import Path

from gpuledger import events as ev
from gpuledger.replay.invariants import check_log
from gpuledger.replay.scenario import load
from gpuledger.replay.simulator import simulate

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def of(log, cls, **match):
    return [
        e
        for _, _, e in log
        if isinstance(e, cls) and all(getattr(e, k) == v for k, v in match.items())
    ]


def test_an_elastic_gang_shrinks_from_6_to_4_instead_of_being_evicted_then_grows_back():
    sim = simulate(load(EXAMPLES / "elastic-shrink.yaml"), check=True)
    log = sim.log
    assert of(log, ev.GangEvicted) == []
    (req,) = of(log, ev.PreemptionRequested)
    assert (req.job_id, req.beneficiary, req.ranks) == ("pretrain", "notebook", (4, 5))
    (resized,) = of(log, ev.GangResized, reason="Priority")
    assert (resized.occurred_at_ms, resized.from_members, resized.to_members) == (1_820_000, 6, 4)
    assert (resized.checkpointed, resized.lost_gpu_ms) == (True, 0)
    # the shrink: ranks 4 and 5 leave with their checkpoint
    left = [e for e in of(log, ev.MemberExited, job_id="pretrain") if e.outcome == "preempted"]
    assert sorted(e.rank for e in left) == [4, 5]
    (nb,) = of(log, ev.GangPlaced, job_id="notebook")
    assert nb.occurred_at_ms == 1_820_000
    # the grow: when the notebook ends and nothing waits, the gang takes its 2 GPUs back
    grown = of(log, ev.GangResized, reason="Grow")
    assert [(e.occurred_at_ms, e.from_members, e.to_members) for e in grown] == [(3_620_000, 4, 6)]
    assert [m.rank for m in grown[0].members] == [0, 1, 2, 3, 4, 5]
    again = of(log, ev.MemberStarted, job_id="pretrain", allocation_id="pretrain#1")
    assert sorted((e.rank, e.occurred_at_ms) for e in again if e.occurred_at_ms > 0) == [
        (4, 3_620_000),
        (5, 3_620_000),
    ]
    # and the gang's work still ends at 2 h: the members added end with the others
    (done,) = of(log, ev.GangCompleted, job_id="pretrain")
    assert done.occurred_at_ms == 7_200_000
    assert {j.job_id: j.state for j in sim.ledger.jobs.values()} == {
        "pretrain": "completed",
        "eval": "completed",
        "notebook": "completed",
    }
    # and the whole-system invariants hold (no GPU held twice across the shrink and the grow)
    assert {f.name: f.as_dict()["examples"] for f in check_log(log) if not f.ok} == {}
