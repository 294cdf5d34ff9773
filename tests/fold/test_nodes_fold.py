"""The nodes fold (services/domain/fold/nodes.py): registration, heartbeats, lost and back."""

from __future__ import annotations

from gpuledger import events as ev
from gpuledger.services.domain.fold import nodes
from tests.fold.story import admitted, given, node, placed, submitted, when


def test_the_nodes_fold_handles_the_node_events():
    assert set(nodes.FOLD.handlers) == {
        ev.NodeRegistered,
        ev.NodeHeartbeat,
        ev.NodeLost,
        ev.NodeCordoned,
        ev.NodeUncordoned,
        ev.MaintenanceScheduled,
        ev.MaintenanceCancelled,
    }


def test_a_cordon_is_kept_across_a_reregistration_and_an_unknown_node_is_refused():
    # given n1 cordoned by the operator
    ledger = given(node("n1"), ev.NodeCordoned(node="n1", reason="firmware"))
    assert ledger.sched.cordoned == {"n1"} and nodes.node_state(ledger, "n1") == "cordoned"
    # when its agent restarts and registers again, the cordon stands (it keeps reporting)
    when(ledger, node("n1"))
    assert ledger.nodes["n1"].cordon.reason == "firmware" and ledger.sched.cordoned == {"n1"}
    # a cordon of a node nobody registered changes nothing
    refusal = when(ledger, ev.NodeCordoned(node="n9"))
    assert refusal.code == "UnknownNode" and ledger.sched.cordoned == {"n1"}
    # when it is uncordoned it is ready again
    when(ledger, ev.NodeUncordoned(node="n1"))
    assert ledger.sched.cordoned == set() and nodes.node_state(ledger, "n1") == "ready"


def test_a_registered_node_is_in_the_fleet_and_promises_heartbeats():
    ledger = given(node("n1"))
    assert ledger.nodes["n1"].lost is False and ledger.nodes_version == 1
    assert ledger.sched.heartbeating == {"n1"}
    assert ledger.fleet.node_state("n1").schedulable


def test_a_lost_node_is_unschedulable_its_gangs_settle_and_a_heartbeat_brings_it_back():
    # given job a running on n1
    ledger = given(node("n1"), submitted("a"), admitted("a"), placed("a"))
    # when n1 is declared lost
    when(ledger, ev.NodeLost(node="n1", producer="scheduler/0"))
    # then it takes no work and its allocation is to be settled
    assert ledger.nodes["n1"].lost and not ledger.fleet.node_state("n1").schedulable
    assert ledger.sched.settle_ready == {"a#1"} and ledger.nodes_version == 2
    # when it heartbeats again
    when(ledger, ev.NodeHeartbeat(node="n1", producer="node-agent/n1", occurred_at_ms=9000))
    # then it is back
    assert not ledger.nodes["n1"].lost and ledger.fleet.node_state("n1").schedulable
    assert ledger.nodes["n1"].last_heartbeat_ms == 9000 and ledger.nodes_version == 3


def test_a_nodes_status_says_since_when_cordoned_draining_drained_and_lost():
    # given job a running on n1 and n2 idle
    ledger = given(node("n1"), node("n2"), submitted("a"), admitted("a"), placed("a"))
    assert nodes.node_status(ledger, "n1") == ("ready", None, "")
    # when n2 is cordoned at 10 s and n1 drained at 20 s
    when(ledger, ev.NodeCordoned(node="n2", reason="cables", occurred_at_ms=10_000))
    when(ledger, ev.NodeCordoned(node="n1", reason="firmware", drain=True, occurred_at_ms=20_000))
    # then each says since when and why; n1 drains while a runs there
    assert nodes.node_status(ledger, "n2") == ("cordoned", 10_000, "cables")
    assert nodes.node_status(ledger, "n1") == ("draining", 20_000, "firmware")
    # when a ends at 95 s, n1 is drained since then
    done = ev.GangCompleted(
        job_id="a", allocation_id="a#1", producer="scheduler/0", occurred_at_ms=95_000
    )
    when(ledger, done)
    assert nodes.node_status(ledger, "n1") == ("drained", 95_000, "firmware")
    # a node drained with nothing on it is drained since the drain
    when(ledger, ev.NodeCordoned(node="n2", drain=True, occurred_at_ms=99_000))
    assert nodes.node_status(ledger, "n2") == ("drained", 99_000, "")
    # a lost node is lost since its loss, and ready (no since) once back
    when(
        ledger,
        ev.NodeUncordoned(node="n2"),
        ev.NodeLost(node="n2", producer="scheduler/0", occurred_at_ms=120_000),
    )
    assert nodes.node_status(ledger, "n2") == ("lost", 120_000, "")
    when(ledger, ev.NodeHeartbeat(node="n2", producer="node-agent/n2", occurred_at_ms=130_000))
    assert nodes.node_status(ledger, "n2") == ("ready", None, "")
