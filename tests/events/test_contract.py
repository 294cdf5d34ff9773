"""The event contract: golden fixtures of every published version decode to current types,
current types encode back to their fixture, old versions are upcast, bad input is refused."""

import json
from pathlib import Path

import pytest

from gpuledger import events as e
from gpuledger.events.schema import client_schema

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "golden"
CURRENT_TAGS = sorted(c.__struct_config__.tag for c in e.ALL_EVENTS)


def contains(new, old) -> bool:
    """`new` carries every field of `old` with the same value (additive changes allowed)."""
    if isinstance(old, dict):
        return isinstance(new, dict) and all(
            k in new and contains(new[k], v) for k, v in old.items()
        )
    if isinstance(old, list):
        return isinstance(new, list) and len(new) == len(old) and all(map(contains, new, old))
    return new == old


@pytest.mark.parametrize("tag", CURRENT_TAGS)
def test_every_current_event_round_trips_through_its_golden_fixture(tag):
    raw = (GOLDEN / f"{tag}.json").read_bytes()
    event = e.decode(raw)
    assert type(event).__struct_config__.tag == tag
    assert contains(json.loads(e.encode(event)), json.loads(raw))
    assert e.decode(e.encode(event)) == event


def test_an_additive_field_keeps_old_payloads_decodable():
    assert contains({"a": 1, "b": {"c": 2, "new": 3}}, {"a": 1, "b": {"c": 2}})
    assert not contains({"a": 1, "b": {"c": 5}}, {"a": 1, "b": {"c": 2}})


def test_every_golden_fixture_names_a_known_or_upcastable_version():
    for path in GOLDEN.glob("*.json"):
        assert e.decode(path.read_bytes()) is not None, path.name


def test_gpu_metrics_v1_is_upcast_to_v2_with_a_ratio_and_its_source():
    old = e.decode((GOLDEN / "GpuMetricsReported.v1.json").read_bytes())
    assert isinstance(old, e.GpuMetricsReported)
    (sample,) = old.samples
    assert sample.sm_active == pytest.approx(0.40)
    assert sample.util_source == "nvml_utilization"
    assert old.event_id == "m1" and old.node == "n1"


@pytest.mark.parametrize(
    "payload, needle",
    [
        (b"not json at all", "not JSON"),
        (b'{"type": "NoSuchEvent.v1"}', "NoSuchEvent"),
        (b'{"type": "JobSubmitted.v1", "job": {"job_id": "j", "tenant": "t", "gpuz": 1}}', "gpuz"),
        (b'{"type": "JobSubmitted.v1", "job": {"job_id": 5, "tenant": "t"}}', "job_id"),
    ],
)
def test_undecodable_payloads_raise_a_typed_error_with_the_reason(payload, needle):
    with pytest.raises(e.UndecodableEvent) as info:
        e.decode(payload)
    assert needle in str(info.value)


def test_event_ids_are_deterministic_and_distinct_per_kind_and_key():
    a = e.derive_event_id("GangPlaced", "j1#1")
    assert a == e.derive_event_id("GangPlaced", "j1#1")
    assert a != e.derive_event_id("GangPlaced", "j1#2")
    assert a != e.derive_event_id("GangCompleted", "j1#1")


@pytest.mark.parametrize("bad", ["a.b", "a*", "a>", "has space", "", "x" * 200])
def test_ids_that_would_break_a_subject_are_refused(bad):
    with pytest.raises(e.InvalidId):
        e.validate_token("job id", bad)


def test_subjects_name_the_producer_role_and_carry_tenant_and_job():
    job = e.JobSpec(job_id="j1", tenant="org/team-a")
    assert e.subject_for(e.JobSubmitted(job=job)) == "gl.submit.org/team-a.j1"
    assert (
        e.subject_for(e.GangPlaced(job_id="j1", allocation_id="j1#1", tenant="t", members=()))
        == "gl.sched.j1.GangPlaced"
    )
    assert (
        e.subject_for(e.MemberStarted(job_id="j1", allocation_id="j1#1", rank=0, node="n1"))
        == "gl.node.n1.MemberStarted"
    )
    with pytest.raises(e.InvalidId):
        e.subject_for(e.JobSubmitted(job=e.JobSpec(job_id="j.1", tenant="t")))


def test_client_schema_covers_submission_cancel_and_configuration():
    schema = json.dumps(client_schema())
    for name in (
        "JobSubmitted",
        "JobCancelled",
        "TenantConfigured",
        "PriorityClassConfigured",
        "PolicyConfigured",
    ):
        assert name in schema
    assert "GangPlaced" not in schema


def test_a_job_with_a_node_selector_keeps_its_published_form():
    """`JobSpec.node_selector` (added after v1 without a new tag): the golden payload with it
    decodes to the selector and encodes back to the same JSON."""
    raw = (GOLDEN / "JobSubmitted.v1+node_selector.json").read_bytes()
    event = e.decode(raw)
    assert event.job.node_selector == {"partition": "a100", "zone": "eu"}
    assert json.loads(e.encode(event)) == json.loads(raw)


def test_the_package_re_exports_every_event_type_by_a_literal_all():
    """`events.catalog.__all__` is written out (type checkers read it); it must name every
    event type, so `from gpuledger.events import <Type>` works for each of them."""
    from gpuledger import events
    from gpuledger.events import catalog

    missing = {c.__name__ for c in catalog.ALL_EVENTS} - set(catalog.__all__)
    assert missing == set()
    assert all(hasattr(events, name) for name in catalog.__all__)


def test_tenant_limits_and_partial_preemptions_keep_their_published_form():
    """`TenantConfigured.borrowing_limit_gpu_milli` / `lending_limit_gpu_milli` and
    `PreemptionRequested.ranks` (added after v1 without a new tag, left out of the JSON when
    unset): the golden payloads with them decode to them and encode back to the same JSON;
    the payloads without them still encode without them."""
    raw = (GOLDEN / "TenantConfigured.v1+limits.json").read_bytes()
    t = e.decode(raw)
    assert (t.borrowing_limit_gpu_milli, t.lending_limit_gpu_milli) == (2000, 1000)
    assert json.loads(e.encode(t)) == json.loads(raw)
    raw = (GOLDEN / "PreemptionRequested.v1+ranks.json").read_bytes()
    p = e.decode(raw)
    assert p.ranks == (4, 5)
    assert json.loads(e.encode(p)) == json.loads(raw)
    for name in ("TenantConfigured.v1.json", "PreemptionRequested.v1.json"):
        raw = (GOLDEN / name).read_bytes()
        assert json.loads(e.encode(e.decode(raw))) == json.loads(raw), name


def test_a_job_with_a_user_keeps_its_published_form_and_old_jobs_have_the_default_user():
    """`JobSpec.user` (added after v1 without a new tag, left out of the JSON when unset):
    the golden payload with it decodes to the user and encodes back to the same JSON; a
    payload without one (every log written before users) still encodes without it, and its
    job's user is the documented default `-`."""
    raw = (GOLDEN / "JobSubmitted.v1+user.json").read_bytes()
    event = e.decode(raw)
    assert (event.job.user, event.job.submitter) == ("alice", "alice")
    assert json.loads(e.encode(event)) == json.loads(raw)
    old_raw = (GOLDEN / "JobSubmitted.v1.json").read_bytes()
    old = e.decode(old_raw)
    assert old.job.submitter == "-"
    assert json.loads(e.encode(old)) == json.loads(old_raw)


@pytest.mark.parametrize("user", ["a.b", "a*", "a>", "a b", "", "x" * 129])
def test_a_payload_with_a_user_that_would_break_a_subject_is_refused(user):
    raw = json.loads((GOLDEN / "JobSubmitted.v1+user.json").read_bytes())
    raw["job"]["user"] = user
    with pytest.raises(e.UndecodableEvent):
        e.decode(json.dumps(raw).encode())


def test_tenant_user_limits_keep_their_published_form():
    """`TenantConfigured.user_limits` (added after v1 without a new tag, left out of the JSON
    when unset): the golden payload decodes to the limits, an override falls back to the
    default field by field, and it encodes back to the same JSON."""
    raw = (GOLDEN / "TenantConfigured.v1+user_limits.json").read_bytes()
    t = e.decode(raw)
    assert (t.user_limits.of("bob").running_jobs, t.user_limits.of("bob").gpu_milli) == (2, 4000)
    assert (t.user_limits.of("alice").running_jobs, t.user_limits.of("alice").gpu_milli) == (
        2,
        8000,
    )
    assert json.loads(e.encode(t)) == json.loads(raw)
    bad = json.loads(raw)
    bad["user_limits"]["default"]["gpu_milli"] = -1
    with pytest.raises(e.UndecodableEvent):
        e.decode(json.dumps(bad).encode())
