"""Time-of-day policies live (issue 17): a real nats-server with authentication on and the
quota service as its own process under its own identity. Given the seed 003 day/night
schedules (inference 6 of 8 GPUs from 08:00, training all 8 from 20:00, UTC), when quota
starts, then it catches up the fires of the last day: it publishes the configuration changes
(on the quota identity's own `gl.quota.TenantConfigured`, folded as what the schedule produces) and, after the latest fire,
the guarantees in force are that schedule's. The simulated 48 hours are in
tests/replay/test_day_night.py; live, the wall clock decides which schedule fired last."""

from __future__ import annotations

import time

import pytest
import yaml

from gpuledger import events as ev
from gpuledger.replay import live_player
from gpuledger.replay.scenario import load
from gpuledger.services.domain.policy import schedules as sched
from tests.integration.cluster import Processes
from tests.waiting import eventually_async

pytestmark = pytest.mark.integration

DOC = {
    "tenants": [{"name": "inference", "guaranteed": 0}, {"name": "training", "guaranteed": 8}],
    "schedules": [
        {
            "name": "day",
            "cron": "0 8 * * *",
            "tenants": [
                {"name": "inference", "guaranteed": 6},
                {"name": "training", "guaranteed": 2},
            ],
        },
        {
            "name": "night",
            "cron": "0 20 * * *",
            "tenants": [
                {"name": "inference", "guaranteed": 0},
                {"name": "training", "guaranteed": 8},
            ],
        },
    ],
}


async def test_quota_publishes_the_schedule_in_force_live(server, bus, tmp_path):
    config = tmp_path / "day-night.yaml"
    config.write_text(yaml.safe_dump(DOC))
    await live_player.publish_config(bus, load(config))
    now_ms = time.time_ns() // 1_000_000
    day_fire = sched.last_fire_ms("0 8 * * *", "UTC", now_ms)
    night_fire = sched.last_fire_ms("0 20 * * *", "UTC", now_ms)
    latest = "day" if day_fire > night_fire else "night"
    want = {
        "day": {"inference": 6000, "training": 2000},
        "night": {"inference": 0, "training": 8000},
    }[latest]

    procs = Processes(server, config, tmp_path)
    try:
        procs.start("quota")

        async def four_changes():
            ledger, log = await live_player.fold(bus)
            found = [
                (subject, e)
                for _, subject, e in log
                if isinstance(e, ev.TenantConfigured) and e.correlation_id.startswith("schedule:")
            ]
            return (ledger, log, found) if len(found) >= 4 else None

        ledger, log, changes = await eventually_async(
            four_changes, 30, "four scheduled changes", interval_s=0.3
        )
    finally:
        procs.stop()

    # one change per tenant per schedule, the latest schedule's last, from quota, on its subjects
    assert [e.correlation_id for _, e in changes][-2:] == [f"schedule:{latest}"] * 2
    assert all(
        s == "gl.quota.TenantConfigured" and e.producer.startswith("quota/") for s, e in changes
    )
    assert {t: ledger.config.tenants[t].guaranteed_gpu_milli for t in want} == want
    assert not [e for _, _, e in log if isinstance(e, ev.DeadLettered)]
