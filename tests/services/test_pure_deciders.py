"""Deciders are pure: `decide` never writes to the folded state, trial placements live in a
copy-on-write `TrialFleet`, no cache changes an answer, and checking mode
(`replay.checking`) stops at the first decide that writes or whose uncached re-run differs."""

from __future__ import annotations

import pytest

from gpuledger.events import PendingReasonChanged
from gpuledger.replay.checking import DecideDrift, checked_decide, digest
from gpuledger.replay.scenario import from_document
from gpuledger.replay.simulator import Simulator, simulate, standard_services
from gpuledger.services.domain.fold.ledger import Ledger
from gpuledger.services.placement import (
    Fleet,
    GangRequest,
    GpuSpec,
    MemberRequest,
    NodeSpec,
    Placement,
)
from gpuledger.services.scheduler.decider import Scheduler


def b2_then_j() -> dict:
    """One 8-GPU node; tenant t may use at most 6 GPUs. x (tenant u) holds 4 GPUs; j (t, 5
    GPUs) waits for capacity; then b2 (t, 2 GPUs) is placed: t runs 2, so j (5 more) now
    exceeds t's limit."""
    return {
        "cluster": {"nodes": [{"name": "n1", "gpus": 8}]},
        "tenants": [{"name": "t", "guaranteed": 6, "limit": 6}, {"name": "u", "guaranteed": 2}],
        "timeline": [
            {
                "at": 0,
                "submit": {"id": "x", "tenant": "u", "class": "train", "gpus": 4, "duration": 600},
            },
            {
                "at": 1,
                "submit": {"id": "j", "tenant": "t", "class": "train", "gpus": 5, "duration": 60},
            },
            {
                "at": 2,
                "submit": {"id": "b2", "tenant": "t", "class": "train", "gpus": 2, "duration": 600},
            },
        ],
    }


def test_a_job_whose_tenant_reaches_its_limit_says_exceeds_limit_as_a_fresh_decide_does():
    # given j pending for capacity, when b2 of the same tenant is placed
    sim = simulate(from_document(b2_then_j()), until_ms=10_000)
    assert sim.ledger.jobs["b2"].state == "running"
    # then j's recorded reason is the limit, not capacity
    j = sim.ledger.jobs["j"]
    assert (j.state, j.reason) == ("pending", "ExceedsLimit"), j.message
    assert "uses 2 of its 6-GPU limit, job needs 5" in j.message
    # and a fresh scheduler on a fresh fold of the same log has nothing to add
    fresh = Ledger()
    for seq, _, e in sim.log:
        fresh.apply(seq, e)
    assert [
        e for e in Scheduler().decide(fresh, sim.now_ms) if isinstance(e, PendingReasonChanged)
    ] == []


def test_the_b2_j_scenario_passes_checking_mode():
    sim = simulate(from_document(b2_then_j()), check=True)
    assert sim.ledger.jobs["j"].state == "completed"


def test_decide_leaves_the_folded_state_and_node_versions_untouched():
    # given a busy ledger (a pending gang, a running one) mid-scenario
    sim = simulate(from_document(b2_then_j()), until_ms=10_000)
    ledger = sim.ledger
    versions = {n: ledger.fleet.node_state(n).version for n in ledger.fleet.node_names()}
    before = digest(ledger)
    # when every service decides
    for service in standard_services([]):
        service.decide(ledger, sim.now_ms)
    # then nothing of the folded state moved, not even a node record's version
    assert digest(ledger) == before
    assert {n: ledger.fleet.node_state(n).version for n in ledger.fleet.node_names()} == versions


def fleet_of_two() -> Fleet:
    gpus = tuple(GpuSpec(i, f"u{i}", "H100-80GB", 81920, "c0") for i in range(4))
    return Fleet([NodeSpec(f"n{k}", 64_000, 512_000, gpus) for k in (1, 2)])


def test_a_trial_fleet_takes_writes_while_the_base_fleet_is_only_read():
    # given a fleet with one 3-GPU allocation on one node
    fleet = fleet_of_two()
    req = GangRequest("a", "t", MemberRequest(gpus=3), 1)
    placed = fleet.place(req)
    assert isinstance(placed, Placement)
    fleet.allocate("a#1", "t", placed, req)
    free_before = fleet.free_gpus()
    # when a trial view releases it and places a 4-GPU gang of two members
    trial = fleet.trial()
    trial.release("a#1")
    big = GangRequest("b", "t", MemberRequest(gpus=4), 2)
    got = trial.place(big)
    assert isinstance(got, Placement) and len(got.members) == 2
    trial.allocate("b#1", "t", got, big)
    # then the view sees its own changes, the base fleet none of them
    assert "a#1" not in trial.allocation_ids() and "b#1" in trial.allocation_ids()
    assert fleet.allocation_ids() == ("a#1",)
    assert fleet.free_gpus() == free_before == 5
    assert not isinstance(fleet.place(big, explain=False), Placement)
    # and a fork is isolated from its parent
    child = trial.fork()
    child.release("b#1")
    assert "b#1" in trial.allocation_ids() and "b#1" not in child.allocation_ids()


class WritesToState(Scheduler):
    """A broken decider: it records a reason on the folded job directly."""

    def decide(self, state, now_ms):
        for job in state.jobs.values():
            job.message = "written by decide"
        return []


class RemembersTooMuch(Scheduler):
    """A broken decider: a memo that survives the inputs it depends on."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list = []

    def decide(self, state, now_ms):
        out = [] if self.seen else super().decide(state, now_ms)
        self.seen.append(now_ms)
        return out


def started(services) -> Simulator:
    sim = Simulator(services)
    doc = from_document(b2_then_j())
    for event in doc.config:
        sim.publish(event)
    sim.schedule(doc.inputs)
    return sim


def test_checking_mode_names_the_decide_that_wrote_to_the_state():
    sim = started(standard_services(from_document(b2_then_j()).nodes))
    sim.run(until_ms=3_000)
    with pytest.raises(
        DecideDrift,
        match=r"scheduler/0 decide after seq \d+ at t=3s wrote to the folded state \(jobs\)",
    ):
        checked_decide(WritesToState(), sim.ledger, 3_000)


def test_checking_mode_names_a_decide_whose_uncached_run_differs():
    doc = from_document(b2_then_j())
    services = standard_services(doc.nodes)
    services[3] = RemembersTooMuch()
    sim = Simulator(services, check=True)
    for event in doc.config:
        sim.publish(event)
    sim.schedule(doc.inputs)
    with pytest.raises(DecideDrift, match=r"cached and uncached runs differ"):
        sim.run()


def test_simulate_and_verify_check_the_demo_with_zero_mismatches(tmp_path):
    from typer.testing import CliRunner

    from gpuledger.services.cli.main import app

    runner = CliRunner()
    log = tmp_path / "demo.jsonl"
    sim = runner.invoke(
        app, ["simulate", "replay/scenarios/demo.yaml", "-q", "--check", "--log", str(log)]
    )
    assert sim.exit_code == 0, sim.output
    out = runner.invoke(app, ["verify", str(log), "--check"])
    assert out.exit_code == 0, out.output
    assert "24 decisions re-decided, 0 mismatches" in out.output


def test_verify_check_stops_at_a_decide_that_writes_with_one_line_and_exit_1(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from gpuledger.replay.logio import write_log
    from gpuledger.services.cli.main import app

    sim = simulate(from_document(b2_then_j()))
    log = tmp_path / "b2j.jsonl"
    write_log(log, sim.log)
    monkeypatch.setattr(Scheduler, "decide", WritesToState.decide)
    out = CliRunner().invoke(app, ["verify", str(log), "--check"])
    assert out.exit_code == 1
    lines = out.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: check: scheduler/0 decide after seq "), (
        lines
    )
    assert "wrote to the folded state (jobs)" in lines[0]
