"""A simulated agent of some nodes reads only the allocations on its nodes (`gpuledger up`
runs one per node): at every step, its decide is exactly its nodes' share of what one agent
of every node decides, and it runs under the read-only view of checking mode."""

from __future__ import annotations

import pytest

from gpuledger.replay.checking import checked_decide
from gpuledger.replay.scenario import load
from gpuledger.replay.simulator import Simulator, standard_services
from gpuledger.services.node_agent.simulated import SimulatedAgent


@pytest.mark.parametrize(
    "path",
    ["replay/scenarios/demo.yaml", "examples/backfill.yaml", "examples/inference-burst.yaml"],
)
def test_an_agent_of_one_node_decides_its_share_of_the_whole(path):
    scenario = load(path)
    whole = SimulatedAgent(tuple(scenario.nodes))
    singles = [SimulatedAgent((node,)) for node in scenario.nodes]
    sim = Simulator(standard_services(scenario.nodes))
    steps = 0

    def compare(seq, subject, event):
        nonlocal steps
        steps += 1
        now = event.occurred_at_ms
        expected = whole.uncached().decide(sim.ledger, now)
        parts = [e for agent in singles for e in checked_decide(agent.uncached(), sim.ledger, now)]
        assert sorted(e.event_id for e in parts) == sorted(e.event_id for e in expected), seq
        assert min(
            (t for a in singles if (t := a.next_wakeup_ms(sim.ledger, now)) is not None),
            default=None,
        ) == whole.next_wakeup_ms(sim.ledger, now), seq

    sim.on_event = compare
    for event in scenario.config:
        sim.publish(event)
    sim.schedule(scenario.inputs)
    sim.run()
    assert steps > 20 and all(a._narrow(sim.ledger) for a in singles)
