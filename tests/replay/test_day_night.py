"""Seed 003's day/night policy on 8 GPUs through the simulator for 48 hours: business hours
give inference 6 GPUs, the night gives training all 8; the configuration changes are events
at the cron times (examples/day-night.yaml)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuledger import events as ev
from gpuledger.replay.scenario import load
from gpuledger.replay.simulator import simulate

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "day-night.yaml"
H = 3_600_000


def gpus_by_tenant(sim) -> dict[str, int]:
    out: dict[str, int] = {}
    for alloc_id in sim.ledger.active:
        job = sim.ledger.jobs[sim.ledger.allocations[alloc_id].job_id]
        out[job.tenant] = out.get(job.tenant, 0) + job.gpu_milli() // 1000
    return out


@pytest.fixture(scope="module")
def snapshots():
    """Allocations at given instants of one 48-hour run (the simulator stops at each)."""
    sc = load(EXAMPLE)
    from gpuledger.replay.simulator import Simulator, standard_services

    sim = Simulator(standard_services(sc.nodes))
    for e in sc.config:
        sim.publish(e)
    sim.schedule(sc.inputs)
    at = {}
    for hour in (2, 7.9, 8.5, 14, 20.5, 26, 32.5, 38, 44.5, 47.9):
        sim.run(round(hour * H))
        at[hour] = gpus_by_tenant(sim)
    return at, sim


def test_by_day_inference_holds_6_and_by_night_training_holds_8(snapshots):
    at, _ = snapshots
    assert at[2] == {"training": 8}
    assert at[7.9] == {"training": 8}
    assert at[8.5] == {"inference": 6, "training": 2}
    assert at[14] == {"inference": 6, "training": 2}
    assert at[20.5] == {"training": 8}
    assert at[26] == {"training": 8}  # 02:00 on day 2
    assert at[32.5] == {"inference": 6, "training": 2}
    assert at[38] == {"inference": 6, "training": 2}  # 14:00 on day 2
    assert at[44.5] == {"training": 8}
    assert at[47.9] == {"training": 8}


def test_the_configuration_changes_are_events_at_the_cron_times(snapshots):
    _, sim = snapshots
    changes = [
        (e.occurred_at_ms, e.correlation_id, e.tenant, e.guaranteed_gpu_milli)
        for _, _, e in sim.log
        if isinstance(e, ev.TenantConfigured) and e.producer.startswith("quota")
    ]
    fired = sorted({(t, c) for t, c, _, _ in changes})
    # t=0 catches up the last fire of each (yesterday 08:00, then 20:00: night in force)
    assert fired == [
        (0, "schedule:business-hours"),
        (0, "schedule:night"),
        (8 * H, "schedule:business-hours"),
        (20 * H, "schedule:night"),
        (32 * H, "schedule:business-hours"),
        (44 * H, "schedule:night"),
    ]
    day2 = [(g, tenant) for t, c, tenant, g in changes if t == 32 * H]
    assert day2 == [(6000, "inference"), (2000, "training")]
    # the operator's configuration on gl.admin, the schedules' changes on quota's own subjects
    subjects = {
        (e.producer.partition("/")[0], s)
        for _, s, e in sim.log
        if isinstance(e, ev.TenantConfigured)
    }
    assert {s for p, s in subjects if p == "quota"} == {"gl.quota.TenantConfigured"}
    assert all(s == "gl.admin.TenantConfigured" for p, s in subjects if p != "quota")


def test_the_example_runs_to_its_until_and_the_same_inputs_give_the_same_log():
    a = simulate(load(EXAMPLE))
    b = simulate(load(EXAMPLE))
    assert a.now_ms == 48 * H
    assert [e.event_id for _, _, e in a.log] == [e.event_id for _, _, e in b.log]
    assert sum(isinstance(e, ev.PreemptionRequested) for _, _, e in a.log) == 12


def test_checking_mode_passes_on_the_first_day():
    simulate(load(EXAMPLE), until_ms=21 * H, check=True)
