"""Time-of-day policies in the quota decider, as specifications: given the folded
configuration and `now` from the shell, when quota decides, then the schedule's changes are
published once per cron time, with deterministic ids, and never again after a refold."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gpuledger import events as ev
from gpuledger.services.domain.inputs.configfile import config_events
from gpuledger.services.domain.inputs.schema import InputError, validate_file
from gpuledger.services.domain.policy import schedules as sched
from gpuledger.services.quota.decider import Quota
from tests.services.given import given

H = 3_600_000


def ms(iso: str) -> int:
    return int(datetime.fromisoformat(iso).astimezone(UTC).timestamp() * 1000)


def doc(cron_day="0 8 * * *", cron_night="0 20 * * *", tz="UTC"):
    return {
        "tenants": [{"name": "inference", "guaranteed": 0}, {"name": "training", "guaranteed": 8}],
        "priority_classes": [{"name": "research", "value": 40}],
        "schedules": [
            {
                "name": "day",
                "cron": cron_day,
                "timezone": tz,
                "tenants": [
                    {"name": "inference", "guaranteed": 6},
                    {"name": "training", "guaranteed": 2},
                ],
                "priority_classes": [{"name": "research", "value": 30}],
            },
            {
                "name": "night",
                "cron": cron_night,
                "timezone": tz,
                "tenants": [
                    {"name": "inference", "guaranteed": 0},
                    {"name": "training", "guaranteed": 8},
                ],
            },
        ],
    }


def run(ledger, now_ms, quota=None):
    """Quota decides at `now_ms`; its events are folded (as either shell does)."""
    out = (quota or Quota()).decide(ledger, now_ms)
    for e in out:
        ledger.apply(ledger.last_seq + 1, e)
    return out


def schedule_events(out):
    return [e for e in out if e.correlation_id.startswith("schedule:")]


def test_given_a_new_schedule_when_quota_decides_then_the_latest_fire_is_caught_up_in_time_order():
    ledger = given(*config_events(doc(), at_ms=ms("2026-06-01T10:00:00+00:00")))
    out = schedule_events(run(ledger, ms("2026-06-01T10:00:00+00:00")))
    # yesterday's night (20:00) and today's day (08:00) are due; the day folds last
    assert [e.correlation_id for e in out] == ["schedule:night"] * 2 + ["schedule:day"] * 3
    assert ledger.config.tenants["inference"].guaranteed_gpu_milli == 6000
    assert ledger.config.tenants["training"].guaranteed_gpu_milli == 2000
    assert ledger.config.classes["research"].value == 30
    assert all(
        e.producer == "quota/0" and e.occurred_at_ms == ms("2026-06-01T10:00:00+00:00") for e in out
    )


def test_it_fires_once_per_cron_time_and_wakes_at_the_next():
    t0 = ms("2026-06-01T10:00:00+00:00")
    ledger = given(*config_events(doc(), at_ms=t0))
    run(ledger, t0)
    q = Quota()
    assert schedule_events(q.decide(ledger, t0 + 1000)) == []
    assert q.next_wakeup_ms(ledger, t0) == ms("2026-06-01T20:00:00+00:00")
    night = schedule_events(run(ledger, ms("2026-06-01T20:00:00+00:00")))
    assert [e.tenant for e in night] == ["inference", "training"]
    assert ledger.config.tenants["training"].guaranteed_gpu_milli == 8000
    assert schedule_events(q.decide(ledger, ms("2026-06-01T23:59:00+00:00"))) == []
    assert q.next_wakeup_ms(ledger, ms("2026-06-01T20:00:00+00:00")) == ms(
        "2026-06-02T08:00:00+00:00"
    )


def test_ids_are_deterministic_and_a_refold_after_restart_does_not_fire_again():
    t0 = ms("2026-06-01T10:00:00+00:00")
    events = config_events(doc(), at_ms=t0)
    first = given(*events)
    out_a = run(first, t0)
    out_b = Quota().decide(given(*events), t0)  # another instance, same inputs: same events
    assert [e.event_id for e in out_a] == [e.event_id for e in out_b]
    assert len({e.event_id for e in out_a}) == len(out_a)
    # restart: refold the log (config + what quota published) and decide later that day
    restarted = given(*events, *out_a)
    assert restarted.config.fired == first.config.fired
    assert schedule_events(Quota().decide(restarted, t0 + 5 * H)) == []
    # the next fire, decided late (the service was down at 20:00), is published once
    late = schedule_events(run(restarted, ms("2026-06-01T21:30:00+00:00")))
    assert {e.correlation_id for e in late} == {"schedule:night"}
    again = Quota().decide(given(*events, *out_a, *late), ms("2026-06-01T21:31:00+00:00"))
    assert schedule_events(again) == []


def test_missed_fires_catch_up_only_the_latest_of_each_schedule():
    t0 = ms("2026-06-01T10:00:00+00:00")
    ledger = given(*config_events(doc(), at_ms=t0))
    run(ledger, t0)
    out = schedule_events(run(ledger, ms("2026-06-04T09:00:00+00:00")))  # down for 3 days
    names = [e.correlation_id for e in out]
    assert names == ["schedule:night"] * 2 + ["schedule:day"] * 3
    assert {e.causation_id for e in out} == {
        "night@" + str(ms("2026-06-03T20:00:00+00:00")),
        "day@" + str(ms("2026-06-04T08:00:00+00:00")),
    }


def test_a_changed_schedule_puts_its_new_values_in_force_at_once():
    t0 = ms("2026-06-01T10:00:00+00:00")
    ledger = given(*config_events(doc(), at_ms=t0))
    run(ledger, t0)
    edited = doc()
    edited["schedules"][0]["tenants"][0]["guaranteed"] = 5
    for e in config_events(edited, at_ms=t0 + H):
        ledger.apply(ledger.last_seq + 1, e)
    out = schedule_events(run(ledger, t0 + H))
    assert [e.correlation_id for e in out] == ["schedule:day"] * 3
    assert ledger.config.tenants["inference"].guaranteed_gpu_milli == 5000


def test_daylight_saving_fire_times_follow_the_zone():
    tz = "Europe/Berlin"
    # 08:00 in Berlin is 07:00 UTC in winter and 06:00 UTC in summer (change on 2026-03-29)
    assert sched.next_fire_ms("0 8 * * *", tz, ms("2026-03-28T09:00:00+01:00")) == ms(
        "2026-03-29T08:00:00+02:00"
    )
    assert sched.next_fire_ms("0 8 * * *", tz, ms("2026-03-28T00:00:00+01:00")) == ms(
        "2026-03-28T07:00:00+00:00"
    )
    # 02:30 does not exist on 2026-03-29: it fires once, right after the gap (03:00 CEST)
    spring = sched.next_fire_ms("30 2 * * *", tz, ms("2026-03-29T00:00:00+01:00"))
    assert spring == ms("2026-03-29T03:00:00+02:00")
    assert sched.next_fire_ms("30 2 * * *", tz, spring) == ms("2026-03-30T02:30:00+02:00")
    # 02:30 happens twice on 2026-10-25: it fires once
    first = sched.next_fire_ms("30 2 * * *", tz, ms("2026-10-25T00:00:00+02:00"))
    assert first == ms("2026-10-25T02:30:00+02:00")
    assert sched.next_fire_ms("30 2 * * *", tz, first) == ms("2026-10-26T02:30:00+01:00")
    # the last fire at or before an instant
    assert sched.last_fire_ms("0 8 * * *", tz, ms("2026-03-29T06:00:00+00:00")) == ms(
        "2026-03-29T06:00:00+00:00"
    )
    assert sched.last_fire_ms("0 8 * * *", tz, ms("2026-03-29T05:59:59+00:00")) == ms(
        "2026-03-28T07:00:00+00:00"
    )


def test_the_decider_fires_at_the_zone_local_time_across_a_dst_change():
    ledger = given(*config_events(doc(tz="Europe/Berlin"), at_ms=ms("2026-03-28T12:00:00+01:00")))
    run(ledger, ms("2026-03-28T12:00:00+01:00"))
    q = Quota()
    t = ms("2026-03-28T12:00:00+01:00")
    fires = []
    for _ in range(4):
        t = q.next_wakeup_ms(ledger, t)
        fires.append(t)
        assert schedule_events(run(ledger, t))
    assert fires == [
        ms("2026-03-28T20:00:00+01:00"),
        ms("2026-03-29T08:00:00+02:00"),
        ms("2026-03-29T20:00:00+02:00"),
        ms("2026-03-30T08:00:00+02:00"),
    ]


def test_the_fold_refuses_a_schedule_with_a_bad_cron_or_zone():
    bad = ev.ScheduleConfigured(
        name="x", cron="0 8 * *", tenants=(ev.TenantChange(tenant="a", guaranteed_gpu_milli=1),)
    )
    zone = ev.ScheduleConfigured(name="y", cron="0 8 * * *", timezone="Mars/Olympus")
    ledger = given(bad, zone)
    assert ledger.config.schedules == {}


@pytest.mark.parametrize(
    "schedule, line",
    [
        (
            {"name": "a", "cron": "0 25 * * *", "tenants": [{"name": "training", "guaranteed": 1}]},
            "schedules[0].cron: cannot read cron expression '0 25 * * *': Bad hour",
        ),
        (
            {
                "name": "a",
                "cron": "0 8 * * *",
                "timezone": "Europe/Berln",
                "tenants": [{"name": "training", "limit": 1}],
            },
            "schedules[0].timezone: unknown time zone 'Europe/Berln' (an IANA name such as Europe/Berlin) "
            "(did you mean 'Europe/Berlin'?)",
        ),
        (
            {"name": "a", "cron": "0 8 * * *", "tenants": [{"name": "trainng", "guaranteed": 1}]},
            "schedules[0].tenants[0].name: tenant 'trainng' is not configured (did you mean 'training'?)",
        ),
        (
            {
                "name": "a",
                "cron": "0 8 * * *",
                "priority_classes": [{"name": "reserch", "value": 1}],
            },
            "schedules[0].priority_classes[0].name: priority class 'reserch' is not configured (did you mean 'research'?)",
        ),
        (
            {"name": "a", "cron": "0 8 * * *", "tenants": [{"name": "training", "guarantee": 1}]},
            "schedules[0].tenants[0].guarantee: unknown key (did you mean 'guaranteed'?)",
        ),
        (
            {"name": "a", "cron": "0 8 * * *", "replicas": {"svc": 6}},
            "schedules[0].replicas: unknown key (known keys: name, cron, timezone, description, tenants, priority_classes, "
            "services)",
        ),
        (
            {"name": "a", "cron": "0 8 * * *", "services": [{"job": "svc", "replica": 6}]},
            [
                "schedules[0].services[0].replica: unknown key (did you mean 'replicas'?)",
                "schedules[0].services[0]: missing required key 'replicas'",
            ],
        ),
        (
            {"name": "a", "cron": "0 8 * * *", "services": [{"job": "a.b", "replicas": 6}]},
            "schedules[0].services[0].job: invalid job id 'a.b': only letters, digits and _-:+@=,~ are allowed "
            "(no '.', '*', '>', spaces)",
        ),
        (
            {"name": "a", "cron": "0 8 * * *", "services": [{"job": "svc", "replicas": -1}]},
            "schedules[0].services[0].replicas: must be >= 0 (got -1)",
        ),
    ],
)
def test_a_bad_schedule_is_one_line_with_its_key_path(schedule, line):
    d = doc()
    d["schedules"] = [schedule]
    with pytest.raises(InputError) as err:
        validate_file(d)
    assert err.value.problems == (line if isinstance(line, list) else [line])


def test_the_quota_role_publishes_schedules_changes_only_on_its_own_subjects():
    from gpuledger.services.runtime.auth import permissions

    pub = permissions("quota")["publish"]
    # issue 30: schedules' changes go to quota's own subjects, never the operator's
    assert not any(s.startswith(("gl.admin", "gl.scale")) for s in pub)
    assert "gl.quota.>" in pub
    assert not any(s.startswith("gl.admin") for s in permissions("scheduler")["publish"])
    change = ev.TenantConfigured(tenant="a", producer="quota/0")
    assert ev.subject_for(change) == "gl.quota.TenantConfigured"
    assert ev.subject_for(ev.TenantConfigured(tenant="a")) == "gl.admin.TenantConfigured"
    # configuration events have no producing role: anyone may claim them on gl.admin
    assert ev.subjects.role_of(ev.TenantConfigured) is None
    assert ev.subjects.role_of(ev.ScheduleConfigured) is None


def test_gpuledger_schedules_lists_name_when_change(tmp_path):
    import json
    from pathlib import Path

    from typer.testing import CliRunner

    from gpuledger.services.cli.main import app

    example = Path(__file__).resolve().parents[2] / "examples" / "day-night.yaml"
    r = CliRunner().invoke(
        app, ["schedules", "--config", str(example), "--at", "1970-01-01T12:00:00Z", "-n", "1"]
    )
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines[0].split() == ["NAME", "WHEN", "CHANGE"]
    assert lines[1].split()[:2] == ["night", "1970-01-01T20:00:00+00:00"]
    r = CliRunner().invoke(app, ["schedules", "--config", str(example), "--at", "0", "-o", "json"])
    rows = json.loads(r.output)["schedules"]
    assert [x["when_ms"] for x in rows] == [8 * H, 20 * H, 32 * H, 44 * H]
