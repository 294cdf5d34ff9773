"""Draining the work still running when a maintenance window starts, through the simulator:
given runs on node-1 and a window on it planned after they started, when the window starts,
then everything left there is asked to leave at once (reason `Drain`, naming the window:
the window's start is the drain's deadline, so neither minimum runtime nor
non-preemptibility holds it back), checkpoints, is requeued and placed off the window's nodes;
before the start, or when the window is cancelled first, nothing is evicted."""

from gpuledger import events as ev
from gpuledger.replay.scenario import from_document
from gpuledger.replay.simulator import simulate

MINUTE = 60_000


def scenario(nodes=2, *more):
    return {
        "cluster": {"nodes": [{"name_prefix": "node-", "count": nodes, "gpus": 8}]},
        "tenants": [{"name": "ml", "guaranteed": 8 * nodes}],
        "timeline": [
            {"at": 0, "submit": {"id": "train", "tenant": "ml", "gpus": 4, "duration": "3h"}},
            {
                "at": 0,
                "submit": {
                    "id": "build",
                    "tenant": "ml",
                    "gpus": 4,
                    "duration": "3h",
                    "class": "build",  # not preemptible
                },
            },
            {
                "at": "1m",
                "maintenance": {"id": "fw", "nodes": ["node-1"], "start": "1h", "end": "2h"},
                "reason": "firmware",
            },
            *more,
        ],
    }


def of(sim, kind):
    return [e for _, _, e in sim.log if isinstance(e, kind)]


def placements(sim):
    return sorted(
        (e.occurred_at_ms // 1000, e.job_id, e.members[0].node) for e in of(sim, ev.GangPlaced)
    )


def test_at_the_windows_start_what_runs_on_its_nodes_is_drained_and_placed_elsewhere():
    # given train and build placed on node-1 at 0, before the window was planned
    sim = simulate(from_document(scenario()), until_ms=59 * MINUTE)
    assert placements(sim) == [(0, "build", "node-1"), (0, "train", "node-1")]
    assert of(sim, ev.PreemptionRequested) == []  # then nothing leaves before the start
    # when the window starts at 1 h
    sim = simulate(from_document(scenario()), until_ms=70 * MINUTE)
    asked = of(sim, ev.PreemptionRequested)
    # then both are asked to leave at once, the non-preemptible build too, naming the window
    assert sorted((e.job_id, e.reason, e.beneficiary, e.occurred_at_ms) for e in asked) == [
        ("build", "Drain", "", 3_600_000),
        ("train", "Drain", "", 3_600_000),
    ]
    assert {e.message for e in asked} == {"node node-1 is in maintenance window fw (firmware)"}
    assert {e.details["window"] for e in asked} == {"fw"}
    # and they checkpoint, are requeued, and run again on node-2
    evicted = of(sim, ev.GangEvicted)
    assert sorted((e.job_id, e.reason, e.checkpointed) for e in evicted) == [
        ("build", "Drain", True),
        ("train", "Drain", True),
    ]
    assert placements(sim)[2:] == [(3605, "build", "node-2"), (3605, "train", "node-2")]
    # and a drain is a requeue, not a preemption suffered
    assert [p.reason for p in sim.ledger.jobs["train"].preemptions] == ["Drain"]


def test_work_that_fits_only_on_the_windows_nodes_waits_for_its_end():
    # given one node: the evicted work has nowhere else to go
    sim = simulate(from_document(scenario(1)), until_ms=130 * MINUTE)
    assert placements(sim) == [
        (0, "build", "node-1"),
        (0, "train", "node-1"),
        (7200, "build", "node-1"),  # the window's end
        (7200, "train", "node-1"),
    ]
    waits = {
        (e.job_id, e.reason, e.message)
        for e in of(sim, ev.PendingReasonChanged)
        if e.occurred_at_ms == 3_605_000
    }
    assert (
        "train",
        "Maintenance",
        "fits only on nodes of maintenance window fw (node-1, t+1h to t+2h): in force (firmware)",
    ) in waits


def test_a_window_cancelled_before_its_start_evicts_nothing():
    doc = scenario(2, {"at": "30m", "maintenance_cancel": "fw"})
    sim = simulate(from_document(doc), until_ms=90 * MINUTE)
    assert of(sim, ev.PreemptionRequested) == []
    assert placements(sim) == [(0, "build", "node-1"), (0, "train", "node-1")]
