"""Scheduled quotas (issue 29, seed 003): admission judges non-preemptible work against the
largest guarantee its tenant will have under the schedules in force within 7 days; a job that
fits only later is admitted, waits with `QuotaScheduled`, and starts at the fire time. Given
the configuration and `now` from the shell, when admission / the scheduler decide, then..."""

from __future__ import annotations

from datetime import UTC, datetime

from gpuledger import events as ev
from gpuledger.replay.scenario import from_document
from gpuledger.replay.simulator import simulate
from gpuledger.replay.verify import verify
from gpuledger.services.admission.decider import Admission
from gpuledger.services.domain.inputs.configfile import config_events, node_infos
from gpuledger.services.domain.policy import schedules as sched
from gpuledger.services.quota.decider import Quota
from gpuledger.services.scheduler.decider import Scheduler
from tests.services.given import fold, given, of_type, submitted

H = 3_600_000
ZONE = "Asia/Kolkata"


def ms(iso: str) -> int:
    return int(datetime.fromisoformat(iso).astimezone(UTC).timestamp() * 1000)


def doc(zone=ZONE, day_guarantee=6, classes=None, class_changes=None):
    return {
        "cluster": {"nodes": [{"name": "gpu1", "gpus": 8, "model": "H100-80GB"}]},
        "tenants": [{"name": "inference", "guaranteed": 0}, {"name": "training", "guaranteed": 8}],
        "priority_classes": classes or [{"name": "serving", "value": 1000, "preemptible": False}],
        "schedules": [
            {
                "name": "business-hours",
                "cron": "0 8 * * *",
                "timezone": zone,
                "tenants": [
                    {"name": "inference", "guaranteed": day_guarantee},
                    {"name": "training", "guaranteed": 8 - day_guarantee},
                ],
                **({"priority_classes": class_changes[0]} if class_changes else {}),
            },
            {
                "name": "night",
                "cron": "0 20 * * *",
                "timezone": zone,
                "tenants": [
                    {"name": "inference", "guaranteed": 0},
                    {"name": "training", "guaranteed": 8},
                ],
                **({"priority_classes": class_changes[1]} if class_changes else {}),
            },
        ],
    }


def at_night(d=None, at=None):
    """The cluster at 02:00 Kolkata with the night schedule published (as quota does)."""
    d = d or doc()
    now = at or ms("2026-06-02T02:00:00+05:30")
    events = config_events(d, at_ms=now - H)
    events += [
        ev.NodeRegistered(
            node=n, simulated=True, event_id=f"reg-{n.name}", producer="node-agent/sim"
        )
        for n in node_infos(d)
    ]
    ledger = given(*events)
    fold(ledger, Quota().decide(ledger, now - H))
    return ledger, now


def test_given_the_night_schedule_when_a_serving_job_fits_only_the_day_guarantee_then_it_is_admitted():
    ledger, now = at_night()
    assert ledger.config.tenants["inference"].guaranteed_gpu_milli == 0
    fold(
        ledger,
        [submitted(at_ms=now, id="serve", tenant="inference", gpus=6, **{"class": "serving"})],
    )
    (out,) = Admission().decide(ledger, now)
    assert isinstance(out, ev.JobAdmitted) and out.preemptible is False


def test_then_it_waits_with_quota_scheduled_naming_the_boundary_in_the_schedule_zone():
    ledger, now = at_night()
    fold(
        ledger,
        [submitted(at_ms=now, id="serve", tenant="inference", gpus=6, **{"class": "serving"})],
    )
    fold(ledger, Admission().decide(ledger, now))
    (out,) = Scheduler().decide(ledger, now)
    assert isinstance(out, ev.PendingReasonChanged)
    assert out.reason == "QuotaScheduled"
    assert out.message == (
        "tenant inference is guaranteed 0 now, 6 from 08:00 Asia/Kolkata; job needs 6"
    )
    assert out.details["starts_at_ms"] == ms("2026-06-02T08:00:00+05:30")
    assert out.details["schedule"] == "business-hours"
    fold(ledger, [out])
    assert Scheduler().decide(ledger, now + H) == [], "an unchanged reason is not repeated"


def test_when_the_day_schedule_fires_then_the_job_is_placed():
    ledger, now = at_night()
    fold(
        ledger,
        [submitted(at_ms=now, id="serve", tenant="inference", gpus=6, **{"class": "serving"})],
    )
    fold(ledger, Admission().decide(ledger, now))
    fold(ledger, Scheduler().decide(ledger, now))
    eight = ms("2026-06-02T08:00:00+05:30")
    fold(ledger, Quota().decide(ledger, eight))  # the business-hours change is published
    assert ledger.config.tenants["inference"].guaranteed_gpu_milli == 6000
    (placed,) = of_type(Scheduler().decide(ledger, eight), ev.GangPlaced)
    assert placed.job_id == "serve" and len(placed.members[0].gpus) == 6


def test_a_job_no_schedule_ever_gives_enough_is_rejected_naming_the_most_it_would_get():
    ledger, now = at_night()
    fold(
        ledger, [submitted(at_ms=now, id="big", tenant="inference", gpus=8, **{"class": "serving"})]
    )
    (out,) = Admission().decide(ledger, now)
    assert isinstance(out, ev.JobRejected) and out.reason == "NonPreemptibleOverQuota"
    assert out.message == (
        "non-preemptible class 'serving' needs 8 GPUs; tenant inference is guaranteed 0 "
        "(and at most 6 under its schedules in the next 7 days)"
    )


def test_a_guarantee_only_beyond_the_7_day_horizon_does_not_count():
    d = doc()
    d["schedules"][0]["cron"] = "0 8 1 1 *"  # once a year: New Year's Day
    ledger, now = at_night(d)
    fold(
        ledger,
        [submitted(at_ms=now, id="serve", tenant="inference", gpus=6, **{"class": "serving"})],
    )
    (out,) = Admission().decide(ledger, now)
    assert isinstance(out, ev.JobRejected) and out.reason == "NonPreemptibleOverQuota"
    # 6 days before New Year the same job waits for it
    ledger, now = at_night(d, at=ms("2026-12-26T02:00:00+05:30"))
    fold(
        ledger,
        [submitted(at_ms=now, id="serve", tenant="inference", gpus=6, **{"class": "serving"})],
    )
    (out,) = Admission().decide(ledger, now)
    assert isinstance(out, ev.JobAdmitted)
    fold(ledger, [out])
    (wait,) = Scheduler().decide(ledger, now)
    assert wait.reason == "QuotaScheduled"
    assert "6 from 2027-01-01 08:00 Asia/Kolkata" in wait.message


def test_a_class_a_schedule_makes_preemptible_at_night_waits_for_the_night_then_runs():
    # `ci` is non-preemptible by day, preemptible at night; inference has no guarantee
    # at any time, so its builds can run only at night
    d = doc(
        day_guarantee=0,
        classes=[{"name": "ci", "value": 100, "preemptible": False}],
        class_changes=(
            [{"name": "ci", "preemptible": False}],
            [{"name": "ci", "preemptible": True}],
        ),
    )
    ledger, now = at_night(d, at=ms("2026-06-02T10:00:00+05:30"))
    assert ledger.config.classes["ci"].preemptible is False
    fold(ledger, [submitted(at_ms=now, id="b", tenant="inference", gpus=2, **{"class": "ci"})])
    (out,) = Admission().decide(ledger, now)
    assert isinstance(out, ev.JobAdmitted) and out.preemptible is False
    fold(ledger, [out])
    (wait,) = Scheduler().decide(ledger, now)
    assert wait.reason == "QuotaScheduled"
    assert wait.message == (
        "tenant inference is guaranteed 0 now, class ci preemptible from 20:00 "
        "Asia/Kolkata; job needs 2"
    )
    fold(ledger, [wait])
    night = ms("2026-06-02T20:00:00+05:30")
    fold(ledger, Quota().decide(ledger, night))
    assert ledger.jobs["b"].preemptible is True, "a waiting job takes its class's new value"
    (placed,) = of_type(Scheduler().decide(ledger, night), ev.GangPlaced)
    assert placed.job_id == "b"


def test_the_outlook_lists_the_stretches_in_time_order():
    ledger, now = at_night()
    out = sched.outlook(ledger.config, "inference", "serving", now)
    assert [(s.at_ms, s.guaranteed_gpu_milli, s.schedule) for s in out[:3]] == [
        (now, 0, ""),
        (ms("2026-06-02T08:00:00+05:30"), 6000, "business-hours"),
        (ms("2026-06-02T20:00:00+05:30"), 0, "night"),
    ]
    assert len(out) == 1 + 2 * 7  # 7 days ahead: each day and each night
    assert sched.first_fit(out, 7000) is None


SCENARIO = {
    "name": "serve-at-dawn",
    "cluster": {
        "nodes": [{"name": "gpu1", "gpus": 8, "model": "H100-80GB", "cpu": 128, "memory": "1Ti"}]
    },
    "tenants": [
        {"name": "inference", "guaranteed": 0, "limit": 6},
        {"name": "training", "guaranteed": 8},
    ],
    "priority_classes": [
        {"name": "serving", "value": 1000, "preemptible": False},
        {"name": "research", "value": 40},
    ],
    "schedules": [
        {
            "name": "business-hours",
            "cron": "0 8 * * *",
            "timezone": "UTC",
            "tenants": [
                {"name": "inference", "guaranteed": 6},
                {"name": "training", "guaranteed": 2},
            ],
        },
        {
            "name": "night",
            "cron": "0 20 * * *",
            "timezone": "UTC",
            "tenants": [
                {"name": "inference", "guaranteed": 0},
                {"name": "training", "guaranteed": 8},
            ],
        },
    ],
    "policy": {
        "preemption": True,
        "preemption_scope": "cluster",
        "default_grace_s": 30,
        "min_runtime_s": 0,
    },
    "until": "12h",
    "timeline": [
        *[
            {
                "at": 0,
                "submit": {
                    "id": f"train-{i}",
                    "tenant": "training",
                    "class": "research",
                    "gpus": 1,
                    "duration": "3d",
                    "checkpoint": {"interval": "10m"},
                },
            }
            for i in range(1, 9)
        ],
        {
            "at": "2h",
            "submit": {
                "id": "serve",
                "tenant": "inference",
                "class": "serving",
                "gpus": 6,
                "duration": "6h",
            },
        },
    ],
}


def test_seed_003_a_serving_job_submitted_at_0200_under_the_night_schedule_starts_at_0800():
    sim = simulate(from_document(SCENARIO), check=True)
    log = [e for _, _, e in sim.log if getattr(e, "job_id", None) == "serve"]
    assert not of_type(log, ev.JobRejected)
    (admitted,) = of_type(log, ev.JobAdmitted)
    assert admitted.occurred_at_ms == 2 * H
    (wait, *_) = of_type(log, ev.PendingReasonChanged)
    assert (wait.occurred_at_ms, wait.reason) == (2 * H, "QuotaScheduled")
    assert wait.message == "tenant inference is guaranteed 0 now, 6 from 08:00 UTC; job needs 6"
    # at 08:00 the day guarantee is in force; six training jobs are reclaimed for it
    reclaims = [e for _, _, e in sim.log if isinstance(e, ev.PreemptionRequested)]
    assert len(reclaims) == 6 and {e.reason for e in reclaims} == {"Reclaim"}
    assert {e.occurred_at_ms for e in reclaims} == {8 * H}
    (placed,) = of_type(log, ev.GangPlaced)
    assert 8 * H <= placed.occurred_at_ms <= 8 * H + 30_000  # within the victims' grace
    assert sim.ledger.jobs["serve"].state == "running"
    assert verify(sim.log).ok, "re-deciding from the log reproduces every decision"
