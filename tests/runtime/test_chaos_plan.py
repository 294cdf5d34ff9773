"""The chaos soak's fault schedule and job mix (services/runtime/chaos.py): seeded, spread
over the run, enough faults, every kind of target and fault, and jobs `gpuledger submit` reads."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from gpuledger.services.cli.chaos_soak import SoakResult
from gpuledger.services.domain.inputs.jobfile import job_spec
from gpuledger.services.runtime.chaos import (
    COOLDOWN_S,
    WARMUP_S,
    Fault,
    job_doc,
    plan_faults,
)

TARGETS = [
    ("admission", "service"),
    ("quota", "service"),
    ("scheduler", "service"),
    ("preemption", "service"),
    ("a1", "node-agent"),
    ("a2", "node-agent"),
    ("m1", "node-agent"),
    ("projector", "projector"),
]


def test_a_two_minute_plan_has_at_least_twenty_faults_inside_the_run():
    plan = plan_faults(random.Random(1), 120, TARGETS, nats_nodes=3)
    assert len(plan) >= 20
    times = [f.at_s for f in plan]
    assert times == sorted(times) and WARMUP_S <= times[0] and times[-1] <= 120 - COOLDOWN_S
    assert {f.kind for f in plan} == {"kill9", "restart", "pause"}
    assert {f.target_kind for f in plan} == {"service", "node-agent", "projector", "nats"}
    # a NATS node is killed or paused, never asked to stop cleanly; each outage ends
    assert all(f.kind != "restart" and f.hold_s > 0 for f in plan if f.target_kind == "nats")
    assert all(f.hold_s > 0 for f in plan if f.kind == "pause")


def test_the_plan_is_a_function_of_the_seed():
    def plan(seed):
        return plan_faults(random.Random(seed), 600, TARGETS, 3)

    assert plan(4) == plan(4) and plan(4) != plan(5)
    assert len(plan(4)) >= 120  # 12 a minute
    assert len(plan_faults(random.Random(1), 60, TARGETS, 1, min_faults=30)) == 30
    # without a NATS cluster the single node is a target too
    assert any(f.target == "nats-1" for f in plan_faults(random.Random(2), 600, TARGETS, 1))


def test_the_job_mix_is_valid_and_has_gangs_mig_shares_and_production_work():
    rng = random.Random(3)
    specs = [job_spec(job_doc(rng, i, "x")) for i in range(200)]
    assert len({s.job_id for s in specs}) == 200
    kinds = Counter(
        "mig"
        if s.resources.mig_profile
        else "share"
        if s.resources.gpu_milli
        else "prod"
        if s.priority_class == "prod"
        else "gang"
        if s.replicas > 1
        else "single"
        for s in specs
    )
    assert set(kinds) == {"mig", "share", "prod", "gang", "single"} and min(kinds.values()) >= 20
    assert {s.tenant for s in specs} == {"research", "product"}


def test_unplanned_restarts_are_those_no_fault_explains():
    r = SoakResult(seed=1, duration_s=60, nats_nodes=1)
    r.faults = [
        Fault(5, "kill9", "scheduler", "service", outcome="done"),
        Fault(9, "pause", "projector", "projector", 2.0, outcome="done"),
        Fault(12, "restart", "a1", "node-agent", outcome="done"),
    ]
    r.restarts = {"scheduler": 1, "projector": 1, "a1": 1, "quota": 0}
    assert r.unplanned_restarts == {"projector": 1}
    r.invariants = {"no_lost_job": True, "verify_zero_mismatches": False}
    assert not r.ok and not SoakResult(1, 60, 1).ok


@pytest.mark.parametrize("bad", ["5x", "-3"])
def test_a_bad_duration_is_one_error_line(bad):
    from typer.testing import CliRunner

    from gpuledger.services.cli.main import app

    out = CliRunner().invoke(app, ["chaos", "--duration", bad])
    assert out.exit_code == 2
    assert "error: --duration: cannot read" in out.output and "Traceback" not in out.output


@pytest.mark.parametrize("seed", range(20))
def test_every_seed_covers_every_kind_of_target_and_fault(seed):
    # in the order the soak lists its processes (sorted by name)
    plan = plan_faults(random.Random(seed), 120, sorted(TARGETS), nats_nodes=3)
    assert {f.target_kind for f in plan} == {"service", "node-agent", "projector", "nats"}
    assert {f.kind for f in plan if f.target_kind != "nats"} == {"kill9", "restart", "pause"}
