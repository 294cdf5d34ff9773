"""Checking mode hands every decide a read-only view of the folded state
(replay/readonly.py): a write raises at once, naming the path; reads answer as the
ledger does; the transparent memos (docs/deciders.md, "Caches") are the only exception."""

from __future__ import annotations

import pytest

from gpuledger.replay.checking import DecideDrift, checked_decide
from gpuledger.replay.readonly import StateWriteError, read_only, transparent_memos
from gpuledger.replay.scenario import from_document, load
from gpuledger.replay.simulator import Simulator, simulate, standard_services
from gpuledger.services.domain.fold.ledger import JobRecord, Ledger
from gpuledger.services.placement import Fleet
from gpuledger.services.placement.fragmentation import Fragmentation
from gpuledger.services.placement.state import NodeState
from gpuledger.services.scheduler.decider import Scheduler
from gpuledger.services.scheduler.round import Round
from tests.services.test_pure_deciders import b2_then_j


def running() -> Simulator:
    """The b2/j scenario at t=3s: jobs placed and pending, nodes registered."""
    doc = from_document(b2_then_j())
    sim = Simulator(standard_services(doc.nodes))
    for event in doc.config:
        sim.publish(event)
    sim.schedule(doc.inputs)
    sim.run(until_ms=3_000)
    return sim


class Impure(Scheduler):
    """A toy decider that writes one thing to the state it is given, then decides."""

    def __init__(self, write) -> None:
        super().__init__()
        self.write = write

    def decide(self, state, now_ms):
        self.write(state)
        return super().decide(state, now_ms)


def first(d):
    return d[sorted(d)[0]]


WRITES = {
    "assigns a field of a job": (
        lambda s: setattr(first(s.jobs), "message", "x"),
        r"assignment to state\.jobs\['\w+'\]\.message",
    ),
    "mutates a job's details dict": (
        lambda s: first(s.jobs).details.update(x=1),
        r"update of state\.jobs\['\w+'\]\.details",
    ),
    "sets a dict item": (
        lambda s: s.tenant_gpu_milli.__setitem__("a", 0),
        r"assignment to state\.tenant_gpu_milli\['a'\]",
    ),
    "adds to an index set": (lambda s: s.pending.add("zzz"), r"add to state\.pending"),
    "extends a list": (
        lambda s: first(s.jobs).placements.append(None),
        r"append to state\.jobs\['\w+'\]\.placements",
    ),
    "assigns a top-level field": (
        lambda s: setattr(s, "nodes_version", 0),
        r"assignment to state\.nodes_version",
    ),
    "writes a fleet node record": (
        lambda s: setattr(s.fleet.node_state("n1"), "free_cpu", 0),
        r"assignment to state\.fleet\..*free_cpu",
    ),
    "writes a node's GPU list": (
        lambda s: s.fleet.node_state("n1").gpu_free.__setitem__(0, 0),
        r"assignment to state\.fleet\..*gpu_free\[0\]",
    ),
    "allocates on the folded fleet": (
        lambda s: s.fleet.release(sorted(s.fleet.allocation_ids())[0]),
        r"state\.fleet",
    ),
    "deletes from allocations": (
        lambda s: s.allocations.pop(sorted(s.allocations)[0]),
        r"pop from state\.allocations\['",
    ),
    "changes the configuration": (
        lambda s: s.config.tenants.clear(),
        r"clear of state\.config\.tenants",
    ),
    "writes through __dict__": (
        lambda s: first(s.allocations).__dict__.__setitem__("ended", True),
        r"assignment to state\.allocations.*ended",
    ),
}


@pytest.mark.parametrize("name", sorted(WRITES))
def test_an_impure_decider_raises_at_the_write_naming_the_path(name):
    write, path = WRITES[name]
    sim = running()
    with pytest.raises(StateWriteError, match=path):
        write(read_only(sim.ledger))


@pytest.mark.parametrize("name", sorted(WRITES))
def test_checking_mode_stops_an_impure_decider_before_it_changes_anything(name):
    write, path = WRITES[name]
    sim = running()
    field = path.split(r"state\.")[1].split("\\")[0].split(".")[0]
    with pytest.raises(
        DecideDrift,
        match=rf"scheduler/0 decide after seq \d+ at t=3s wrote to the folded state \({field}\): .*{path}",
    ):
        checked_decide(Impure(write), sim.ledger, 3_000)
    assert (
        simulate(from_document(b2_then_j())).log[: len(sim.log)] == sim.log
    )  # nothing was written


def test_an_event_holding_a_piece_of_the_state_is_refused():
    class Aliases(Scheduler):
        def decide(self, state, now_ms):
            out = super().decide(state, now_ms)
            job = first(state.jobs)
            aliased = Round.start(self, state, now_ms).pending(
                job, "Resources", "aliased", job.details
            )
            return out + aliased

    sim = running()
    first(sim.ledger.jobs).details = {"a": [1]}
    with pytest.raises(DecideDrift, match="holding a piece of the folded state instead of a copy"):
        checked_decide(Aliases(), sim.ledger, 3_000)


def test_reads_answer_as_the_ledger_does():
    ledger = running().ledger
    view = read_only(ledger)
    assert (
        isinstance(view, Ledger)
        and isinstance(view.jobs, dict)
        and isinstance(first(view.jobs), JobRecord)
    )
    assert sorted(view.jobs) == sorted(ledger.jobs) and len(view.pending) == len(ledger.pending)
    assert view.jobs == ledger.jobs and dict(view.tenant_gpu_milli) == ledger.tenant_gpu_milli
    assert (
        view.pending | {"x"} == ledger.pending | {"x"}
        and {"x"} | view.pending == {"x"} | ledger.pending
    )
    assert view.nominated_nodes() == ledger.nominated_nodes()
    assert view.fleet.node_names() == ledger.fleet.node_names()
    job = first(ledger.jobs)
    assert view.gang_request(first(view.jobs)) == ledger.gang_request(job)
    assert view.fleet.place(ledger.gang_request(job)) == ledger.fleet.place(
        ledger.gang_request(job)
    )
    copied = view.jobs.copy()
    copied["new"] = None  # a copy is the decider's own
    assert "new" not in ledger.jobs


def test_the_transparent_memos_are_exactly_the_documented_ones():
    assert transparent_memos(Fleet) == {"_caches", "_state_ids", "_next_state_id"}
    assert transparent_memos(NodeState) == {"eligible", "frag_memo", "state_key_memo"}
    assert transparent_memos(Fragmentation) == {"_memo"}
    with open("docs/deciders.md") as f:
        doc = f.read()
    for names in (
        transparent_memos(Fleet),
        transparent_memos(NodeState),
        transparent_memos(Fragmentation),
    ):
        for name in names:
            assert f"`{name}`" in doc, name


def test_a_placement_through_the_view_fills_only_the_memos():
    ledger = running().ledger
    job = first(ledger.jobs)
    request = ledger.gang_request(job)
    with ledger.fleet.caches_set_aside():
        assert read_only(ledger).fleet.trial().place(request) == ledger.fleet.trial().place(request)


SCENARIOS = [
    "replay/scenarios/demo.yaml",
    "examples/backfill.yaml",
    "examples/preempt-batch.yaml",
    "examples/inference-burst.yaml",
    "examples/latency-critical.yaml",
    "examples/usage-decay.yaml",
]


@pytest.mark.parametrize("path", SCENARIOS)
def test_the_real_deciders_run_scenarios_under_the_read_only_view(path):
    scenario = load(path)
    assert simulate(scenario, check=True).log == simulate(scenario).log
