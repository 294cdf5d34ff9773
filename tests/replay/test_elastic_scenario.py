"""The elastic-shrink example through the simulator in checking mode (every decide re-run
without caches and re-decided from the log): given a 6-member gang (min 4) and a 2-GPU job
on 8 GPUs, when an interactive job needs 2 GPUs, then the gang gives up its two highest
ranks (checkpointed, nothing lost) and runs on with 4, no gang is evicted, and the
interactive job starts as soon as they have left."""

from pathlib import Path

from gpuledger import events as ev
from gpuledger.replay.scenario import load
from gpuledger.replay.simulator import simulate

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def of(log, cls, **match):
    return [
        e
        for _, _, e in log
        if isinstance(e, cls) and all(getattr(e, k) == v for k, v in match.items())
    ]


def test_an_elastic_gang_shrinks_from_6_to_4_instead_of_being_evicted():
    sim = simulate(load(EXAMPLES / "elastic-shrink.yaml"), check=True)
    log = sim.log
    assert of(log, ev.GangEvicted) == []
    (req,) = of(log, ev.PreemptionRequested)
    assert (req.job_id, req.beneficiary, req.ranks) == ("pretrain", "notebook", (4, 5))
    (resized,) = of(log, ev.GangResized)
    assert (resized.occurred_at_ms, resized.from_members, resized.to_members) == (1_820_000, 6, 4)
    assert (resized.checkpointed, resized.lost_gpu_ms) == (True, 0)
    exits = {e.rank: e.outcome for e in of(log, ev.MemberExited, job_id="pretrain")}
    assert exits == {
        0: "completed",
        1: "completed",
        2: "completed",
        3: "completed",
        4: "preempted",
        5: "preempted",
    }
    (nb,) = of(log, ev.GangPlaced, job_id="notebook")
    assert nb.occurred_at_ms == 1_820_000
    (done,) = of(log, ev.GangCompleted, job_id="pretrain")
    assert done.occurred_at_ms == 7_200_000  # the 4 that stayed ran their 2 hours on
    assert {j.job_id: j.state for j in sim.ledger.jobs.values()} == {
        "pretrain": "completed",
        "eval": "completed",
        "notebook": "completed",
    }
