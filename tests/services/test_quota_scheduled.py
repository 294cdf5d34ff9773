"""Issue 30: what the quota role publishes is folded only if it is what a schedule in force
produces at that time; anything else is refused `NotScheduled` (docs/security.md).

Given the day/night schedules of tests/services/test_schedules.py, when quota's own decide
publishes the day's changes, then they are folded; when the quota role publishes anything
else (another value, another tenant, a schedule that does not exist, a fire time that is not
the latest, a field the schedule does not set), then the fold refuses it and the configuration
in force stays as it was."""

from __future__ import annotations

import msgspec
import pytest

from gpuledger import events as ev
from gpuledger.events.reasons import FoldRefusal
from gpuledger.services.domain.fold.acceptance import admit
from gpuledger.services.domain.inputs.configfile import config_events
from gpuledger.services.quota.decider import Quota
from tests.services.given import given
from tests.services.test_schedules import doc, ms

NOW = ms("2026-06-01T10:00:00+00:00")  # day (08:00) fired last
DAY = ms("2026-06-01T08:00:00+00:00")


def configured():
    return given(*config_events(doc(), at_ms=NOW - 1))


def scheduled():
    """What quota decides at NOW: the night's catch-up, then the day's changes."""
    return Quota().decide(configured(), NOW)


def test_what_the_schedules_produce_is_folded():
    ledger = configured()
    out = scheduled()
    assert out and all(e.producer.startswith("quota/") for e in out)
    for e in out:
        assert admit(ledger, ledger.last_seq + 1, e, ev.subject_for(e)) is None
    assert ledger.config.tenants["inference"].guaranteed_gpu_milli == 6000
    assert ledger.config.classes["research"].value == 30


def day_change(ledger_events=()):
    ledger = configured()
    for e in ledger_events:
        assert admit(ledger, ledger.last_seq + 1, e) is None
    (change,) = [
        e
        for e in scheduled()
        if isinstance(e, ev.TenantConfigured)
        and e.tenant == "inference"
        and e.correlation_id == "schedule:day"
    ]
    return ledger, change


@pytest.mark.parametrize(
    ("forge", "why"),
    [
        (dict(guaranteed_gpu_milli=1_000_000_000), "guaranteed_gpu_milli=1000000000"),
        (dict(limit_gpu_milli=1), "limit_gpu_milli=1"),
        (dict(tenant="training", guaranteed_gpu_milli=6000), "guaranteed_gpu_milli=6000"),
        (dict(correlation_id="schedule:weekend"), "no schedule 'weekend' in force"),
        (dict(correlation_id="quota"), "names no schedule"),
        (dict(causation_id=f"day@{DAY - 86_400_000}"), "last fired at"),
        (dict(causation_id="night@1"), "is not 'day@<fire ms>'"),
        (dict(tenant="nobody"), "does not change tenant 'nobody'"),
    ],
)
def test_anything_else_from_quota_is_not_scheduled(forge, why):
    ledger, change = day_change()
    before = dict(ledger.config.tenants), ledger.config.digest
    forged = msgspec.structs.replace(change, **forge)
    refusal = admit(ledger, ledger.last_seq + 1, forged, ev.subject_for(forged))
    assert refusal is not None and refusal.code == FoldRefusal.NotScheduled
    assert why in refusal.message
    assert (dict(ledger.config.tenants), ledger.config.digest) == before


def test_a_scheduled_value_at_another_time_is_not_scheduled():
    ledger, change = day_change()
    # the day's change of 08:00, claimed at 07:00: that fire had not come yet
    early = msgspec.structs.replace(change, occurred_at_ms=ms("2026-06-01T07:00:00+00:00"))
    refusal = admit(ledger, ledger.last_seq + 1, early)
    assert refusal is not None and refusal.code == FoldRefusal.NotScheduled


def test_quota_cannot_claim_another_producer_on_its_own_subject():
    _, change = day_change()
    as_admin = msgspec.structs.replace(change, producer="admin", guaranteed_gpu_milli=10**9)
    refusal = admit(configured(), 99, as_admin, "gl.quota.TenantConfigured")
    assert refusal is not None and refusal.code == "WrongSubject"


def test_the_operator_changes_configuration_as_before():
    ledger = configured()
    mine = ev.TenantConfigured(tenant="inference", guaranteed_gpu_milli=10**6, producer="cli")
    assert admit(ledger, 99, mine, "gl.admin.TenantConfigured") is None
    assert ledger.config.tenants["inference"].guaranteed_gpu_milli == 10**6


def test_a_service_scaled_by_quota_must_be_the_schedules_replicas():
    """Given the inference service scaled by schedules (tests/replay/test_service_scenarios.py),
    when the quota role scales it to another count, or scales another tenant's job, then the
    fold refuses it; the schedule's own scaling is folded (the scenario ran with it)."""
    import yaml

    from gpuledger.replay.scenario import from_document
    from gpuledger.replay.simulator import simulate
    from tests.replay.test_service_scenarios import EXAMPLES

    doc = yaml.safe_load((EXAMPLES / "inference-scale.yaml").read_text())
    doc["timeline"] = [e for e in doc["timeline"] if "scale" not in e]
    doc["schedules"] = [
        {"name": "peak", "cron": "0 8 * * *", "services": [{"job": "bert-sentiment-inference", "replicas": 6}]}
    ]  # fmt: skip
    run = simulate(from_document(doc), until_ms=9 * 3_600_000)
    scaled = [e for _, _, e in run.log if isinstance(e, ev.ServiceScaled)]
    assert scaled and all(e.producer.startswith("quota/") for e in scaled)
    ledger, last = run.ledger, scaled[-1]
    for forge, why in (
        (dict(replicas=1000), "sets bert-sentiment-inference to 6 replicas, not 1000"),
        (dict(job_id="resnet-1"), "scales no service 'resnet-1'"),
        (dict(tenant="someone/else"), "scales no service"),
    ):
        forged = msgspec.structs.replace(last, event_id=f"forged-{len(why)}", **forge)
        refusal = admit(ledger, ledger.last_seq + 1, forged)
        assert refusal is not None and refusal.code == FoldRefusal.NotScheduled, forge
        assert why in refusal.message, refusal.message
