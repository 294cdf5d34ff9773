"""A drain honours disruption budgets (`min_available`; services/preemption/drain_budget.py),
through the simulator: given a 3-replica service (min_available 2) and a gang with
min_available on node-1, when the operator drains node-1, then the replicas leave one at a
time (the next once the last runs again elsewhere), never fewer than 2 running, the gang
waits and the drain says why (`drain.waiting`), until `--force`, the deadline or a
maintenance window's start, which evict regardless."""

from gpuledger import events as ev
from gpuledger.replay.scenario import from_document
from gpuledger.replay.simulator import simulate
from gpuledger.services.domain.fold.nodes import node_state
from gpuledger.services.preemption.drain import waiting


def scenario(drain, *more):
    return {
        "cluster": {"nodes": [{"name_prefix": "node-", "count": 2, "gpus": 8}]},
        "tenants": [{"name": "ml", "guaranteed": 16}],
        "timeline": [
            {
                "at": 0,
                "submit": {
                    "id": "web",
                    "tenant": "ml",
                    "kind": "service",
                    "replicas": 3,
                    "min_available": 2,
                    "gpus": 2,
                },
            },
            {
                "at": 0,
                "submit": {
                    "id": "ring",
                    "tenant": "ml",
                    "gpus": 2,
                    "min_available": 1,
                    "duration": "3h",
                },
            },
            {"at": "10m", "drain": "node-1", **drain},
            *more,
        ],
    }


def asked(sim):
    return [
        (e.job_id, e.occurred_at_ms // 1000)
        for _, _, e in sim.log
        if isinstance(e, ev.PreemptionRequested)
    ]


def running_replicas_after_each_event(sim):
    up, out = set(), []
    for _, _, e in sim.log:
        if isinstance(e, ev.GangPlaced) and e.job_id.startswith("web~"):
            up.add(e.job_id)
        elif isinstance(e, ev.PreemptionRequested) and e.job_id.startswith("web~"):
            up.discard(e.job_id)
        else:
            continue
        out.append(len(up))
    return out


def test_replicas_leave_one_at_a_time_and_the_gang_waits_saying_why():
    # given all on node-1 since 0 (past their minimum runtime at 10 m)
    sim = simulate(from_document(scenario({})), until_ms=602_000)
    # when the drain starts at 600 s: one replica is asked to leave, the others wait
    assert asked(sim) == [("web~0", 600)]
    assert waiting(sim.ledger, 602_000) == {
        "node-1": [
            (
                "ring",
                "gang ring keeps min_available 1 of 1 members: evicting it would leave 0 running",
            ),
            (
                "web~1",
                "service web keeps min_available 2: 2 of its replicas run, "
                "evicting web~1 would leave 1",
            ),
            (
                "web~2",
                "service web keeps min_available 2: 2 of its replicas run, "
                "evicting web~2 would leave 1",
            ),
        ]
    }
    # then each next replica leaves once the last runs again on node-2
    sim = simulate(from_document(scenario({})), until_ms=1_200_000)
    assert asked(sim) == [("web~0", 600), ("web~1", 605), ("web~2", 610)]
    assert min(running_replicas_after_each_event(sim)[3:]) == 2
    # and the gang stays: node-1 is draining, with ring left
    assert node_state(sim.ledger, "node-1") == "draining"
    assert [job for job, _ in waiting(sim.ledger, 1_200_000)["node-1"]] == ["ring"]


def test_force_the_deadline_and_a_windows_start_evict_regardless_of_the_budget():
    forced = simulate(from_document(scenario({"force": True})), until_ms=601_000)
    assert sorted(asked(forced)) == [("ring", 600), ("web~0", 600), ("web~1", 600), ("web~2", 600)]
    late = simulate(from_document(scenario({"deadline": "5m"})), until_ms=1_200_000)
    assert ("ring", 900) in asked(late)
    window = {
        "at": "11m",
        "maintenance": {"id": "fw", "nodes": ["node-1"], "start": "15m", "end": "2h"},
    }
    windowed = simulate(from_document(scenario({}, window)), until_ms=1_200_000)
    assert ("ring", 900) in asked(windowed)
    assert node_state(windowed.ledger, "node-1") == "drained"
