"""A tenant's submissions a second at the intake (services/domain/policy/submit_rate.py;
issue 44): a token bucket of `submit_rate` a second with a burst of as many, default
`DEFAULT_SUBMIT_RATE`, `null` no bound; past it one line naming the bound, nothing taken."""

from __future__ import annotations

from gpuledger import events as ev
from gpuledger.events.specs import DEFAULT_SUBMIT_RATE, SubmitLimit
from gpuledger.services.domain.policy.requesters import refusal
from gpuledger.services.domain.policy.submit_rate import SubmitRate, rate_of
from tests.services.given import cluster, given, submitted_json


def tenant(name: str = "t", **limits) -> ev.TenantConfigured:
    return ev.TenantConfigured(
        tenant=name, guaranteed_gpu_milli=0, submit_limits=SubmitLimit(**limits)
    )


def test_a_burst_of_the_rate_is_taken_then_one_more_each_1_rate_th_of_a_second():
    rates, t = SubmitRate(), tenant(submit_rate=2)
    # given a fresh bucket: a second's worth (2) at once, the third refused
    assert rates.take(t, 1_000) is None and rates.take(t, 1_000) is None
    over = rates.take(t, 1_000)
    assert over is not None and over.reason == "SubmitLimit"
    assert over.message == (
        "tenant t may submit at most 2 jobs a second (submit_rate); retry in 500 ms"
    )
    assert over.details == {
        "limit": "submit_rate",
        "scope": "tenant t",
        "submit_rate": 2,
        "retry_ms": 500,
    }
    # a refusal takes nothing: 499 ms later still one short, at 500 ms one more
    assert rates.take(t, 1_499) is not None
    assert rates.take(t, 1_500) is None and rates.take(t, 1_500) is not None
    # a long pause refills to the burst, never past it
    assert [rates.take(t, 60_000) is None for _ in range(3)] == [True, True, False]


def test_tenants_have_their_own_buckets_and_the_bounds_come_from_the_configuration():
    rates = SubmitRate()
    a, b = tenant("a", submit_rate=1), tenant("b", submit_rate=1)
    assert rates.take(a, 0) is None and rates.take(a, 0) is not None
    assert rates.take(b, 0) is None  # b untouched by a's burst
    assert rate_of(tenant()) == DEFAULT_SUBMIT_RATE  # unset: the default
    assert rate_of(tenant(submit_rate=None)) is None  # null: no bound
    unbounded = tenant(submit_rate=None)
    assert all(rates.take(unbounded, 0) is None for _ in range(10 * DEFAULT_SUBMIT_RATE))
    zero = rates.take(tenant("z", submit_rate=0), 0)
    assert zero is not None and zero.message == "tenant z may submit no jobs (submit_rate 0)"


def test_the_intake_takes_a_submission_only_once_every_other_rule_passed():
    # given tenant t: 1 submission a second, arrays of at most 8 tasks
    ledger = given(
        *cluster({"name": "n1", "gpus": 1, "model": "H100-80GB"}),
        tenant(submit_rate=1, array_size=8),
    )
    rates = SubmitRate()

    def job(job_id: str, **spec) -> ev.JobSubmitted:
        return submitted_json(job_id=job_id, tenant="t", resources={"gpus": 1}, **spec)

    # when an array over array_size comes first, then it is refused for that, taking nothing
    big = refusal(ledger, job("big", array={"count": 9}), None, rates, 0)
    assert big is not None and "(array_size)" in big.message
    # and a cancel is no submission
    assert refusal(ledger, ev.JobCancelled(job_id="x", tenant="t"), None, rates, 0) is None
    # so the next submission is taken, and the one after it is refused by the rate
    assert refusal(ledger, job("a"), None, rates, 0) is None
    late = refusal(ledger, job("b"), None, rates, 0)
    assert late is not None and late.reason == "SubmitLimit"
    assert late.message.startswith("tenant t may submit at most 1 jobs a second (submit_rate)")


def test_the_configuration_carries_the_rate_and_a_bad_one_is_an_error():
    import pytest

    from gpuledger.services.domain.inputs.configfile import ConfigFileError, config_events

    (e,) = config_events({"tenants": [{"name": "t", "limits": {"submit_rate": 5}}]})
    assert rate_of(e) == 5
    (e,) = config_events({"tenants": [{"name": "t", "limits": {"submit_jobs": 9}}]})
    assert rate_of(e) == DEFAULT_SUBMIT_RATE and b"submit_rate" not in ev.encode(e)
    for bad in (-1, "fast", 1.5):
        with pytest.raises(ConfigFileError):
            config_events({"tenants": [{"name": "t", "limits": {"submit_rate": bad}}]})
