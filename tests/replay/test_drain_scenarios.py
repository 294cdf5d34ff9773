"""Drain through the simulator: given two nodes, when the operator drains one, then its
preemptible runs checkpoint and move to the other node once past their minimum runtime,
non-preemptible work is left to finish unless forced or past the deadline, new work avoids
the node, and the node reads `draining` while runs are left, then `drained`."""

from gpuledger import events as ev
from gpuledger.replay.scenario import from_document
from gpuledger.replay.simulator import simulate
from gpuledger.services.domain.fold.nodes import node_state

NODES = {"cluster": {"nodes": [{"name_prefix": "node-", "count": 2, "gpus": 8}]}}
TENANTS = {"tenants": [{"name": "ml", "guaranteed": 16}]}


def job(at, name, gpus=8, minutes=30, klass=None):
    spec = {"id": name, "tenant": "ml", "gpus": gpus, "duration": f"{minutes}m"}
    if klass:
        spec["class"] = klass
    return {"at": at, "submit": spec}


def evictions(sim):
    return [
        (e.job_id, e.reason, e.occurred_at_ms // 1000)
        for _, _, e in sim.log
        if isinstance(e, ev.GangEvicted)
    ]


def placements(sim, name):
    return [
        (e.occurred_at_ms // 1000, e.members[0].node)
        for _, _, e in sim.log
        if isinstance(e, ev.GangPlaced) and e.job_id == name
    ]


def test_a_drain_waits_for_the_minimum_runtime_then_moves_the_run_and_the_node_is_drained():
    # given train on node-1 since 0 (minimum runtime 300 s by default)
    doc = {**NODES, **TENANTS, "timeline": [job(0, "train"), {"at": 60, "drain": "node-1"}]}
    sim = simulate(from_document(doc), until_ms=200_000)
    # then at 200 s it still runs there: the drain waits, the node is draining
    assert placements(sim, "train") == [(0, "node-1")]
    assert node_state(sim.ledger, "node-1") == "draining"
    sim = simulate(from_document(doc))
    # then at 300 s it is asked to leave, checkpoints, and runs again on node-2
    (asked,) = [e for _, _, e in sim.log if isinstance(e, ev.PreemptionRequested)]
    assert (asked.reason, asked.beneficiary, asked.occurred_at_ms) == ("Drain", "", 300_000)
    (evicted,) = [e for _, _, e in sim.log if isinstance(e, ev.GangEvicted)]
    assert (evicted.reason, evicted.preempted_by, evicted.checkpointed) == ("Drain", None, True)
    assert placements(sim, "train")[-1][1] == "node-2"
    assert node_state(sim.ledger, "node-1") == "drained"
    # and it is not counted against the eviction budget
    assert [p.reason for p in sim.ledger.jobs["train"].preemptions] == ["Drain"]


def test_non_preemptible_work_is_left_to_finish_unless_forced_or_past_the_deadline():
    base = [job(0, "build", gpus=4, minutes=20, klass="build"), job(0, "train", gpus=4)]
    waits = {**NODES, **TENANTS, "timeline": [*base, {"at": 400, "drain": "node-1"}]}
    sim = simulate(from_document(waits), until_ms=1_000_000)
    assert evictions(sim) == [("train", "Drain", 405)]  # build runs on to its end at 1200 s
    assert node_state(sim.ledger, "node-1") == "draining"
    forced = {**waits, "timeline": [*base, {"at": 60, "drain": "node-1", "force": True}]}
    sim = simulate(from_document(forced), until_ms=100_000)
    assert sorted(e[0] for e in evictions(sim)) == ["build", "train"]
    assert node_state(sim.ledger, "node-1") == "drained"
    late = {**waits, "timeline": [*base, {"at": 60, "drain": "node-1", "deadline": "10m"}]}
    sim = simulate(from_document(late), until_ms=1_000_000)
    assert sorted(evictions(sim)) == [("build", "Drain", 665), ("train", "Drain", 305)]
