"""Cordon through the simulator: given two nodes, when the operator cordons one, then what runs
there runs on to its end, new work goes to the other node or waits with `NodeCordoned`, and
after the uncordon the node takes work again."""

from gpuledger import events as ev
from gpuledger.replay.scenario import from_document
from gpuledger.replay.simulator import simulate

DOC = {
    "cluster": {"nodes": [{"name_prefix": "node-", "count": 2, "gpus": 8}]},
    "tenants": [{"name": "ml", "guaranteed": 16}],
    "timeline": [
        {"at": 0, "submit": {"id": "a", "tenant": "ml", "gpus": 8, "duration": "10m"}},
        {"at": "1m", "cordon": "node-1", "reason": "firmware update"},
        {"at": "2m", "submit": {"id": "b", "tenant": "ml", "gpus": 8, "duration": "10m"}},
        {"at": "3m", "submit": {"id": "c", "tenant": "ml", "gpus": 8, "duration": "10m"}},
        {"at": "20m", "uncordon": "node-1"},
    ],
}


def placements(sim):
    return {
        e.job_id: (e.occurred_at_ms // 1000, e.members[0].node)
        for _, _, e in sim.log
        if isinstance(e, ev.GangPlaced)
    }


def test_a_cordoned_node_takes_no_new_work_until_uncordoned():
    sim = simulate(from_document(DOC))
    assert placements(sim) == {
        "a": (0, "node-1"),  # runs on to its end after the cordon
        "b": (120, "node-2"),
        "c": (720, "node-2"),  # waits for b although node-1 is free from 10 m
    }
    (why,) = [
        e
        for _, _, e in sim.log
        if isinstance(e, ev.PendingReasonChanged) and e.job_id == "c" and e.reason == "NodeCordoned"
    ]
    assert why.message == "fits only on cordoned nodes: node-1 (firmware update)"
    assert sim.ledger.jobs["a"].state == "completed"


def test_preemption_frees_capacity_only_where_the_beneficiary_may_go():
    # given both nodes busy with preemptible work, node-1 cordoned
    doc = {
        **DOC,
        "timeline": [
            {"at": 0, "submit": {"id": "on-1", "tenant": "ml", "gpus": 8, "duration": "1h"}},
            {"at": 0, "submit": {"id": "on-2", "tenant": "ml", "gpus": 8, "duration": "1h"}},
            {"at": "1m", "cordon": "node-1"},
            {
                "at": "10m",
                "submit": {"id": "serve", "tenant": "ml", "gpus": 8, "class": "inference"},
            },
        ],
        "until": "12m",
    }
    sim = simulate(from_document(doc))
    where = {e.job_id: e.members[0].node for _, _, e in sim.log if isinstance(e, ev.GangPlaced)}
    # then the victim is the run on node-2, where serve is placed
    (asked,) = [e for _, _, e in sim.log if isinstance(e, ev.PreemptionRequested)]
    assert asked.job_id == [j for j in ("on-1", "on-2") if where[j] == "node-2"][0]
    assert where["serve"] == "node-2"
