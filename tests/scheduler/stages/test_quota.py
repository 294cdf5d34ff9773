"""Stage `quota`: given a tenant at its limit, when a job of it is gated, then it waits with
`ExceedsLimit` and the quantitative message; an elastic gang's cap stops at the quota; a bind
adds to the tenant's usage."""

from gpuledger.events.reasons import PendingReason
from gpuledger.services.scheduler.round import Limits
from gpuledger.services.scheduler.stages import quota
from tests.scheduler.stages.helpers import round_at
from tests.services.test_pending import N8, fleet, scheduled, why

TENANTS = [{"name": "a", "guaranteed": 4, "limit": 6}]


def test_a_job_beyond_its_tenants_limit_is_kept_out():
    ledger, out = scheduled(
        fleet(N8, tenants=TENANTS),
        [{"id": "x", "tenant": "a", "gpus": 4}],
        [{"id": "j", "tenant": "a", "gpus": 4}],
    )
    e = why(out, "j")
    assert e.reason == PendingReason.ExceedsLimit
    assert e.message == "tenant a uses 4 of its 6-GPU limit, job needs 4"
    rnd = round_at(ledger, 5)
    job = ledger.jobs["j"]
    assert quota.cap(rnd, job, Limits(need=4000), 1) is False
    assert quota.gate(rnd, job, Limits(need=4000)) == []  # same reason: nothing new


def test_a_bind_adds_to_the_tenants_usage():
    ledger, _ = scheduled(fleet(N8, tenants=TENANTS), [{"id": "x", "tenant": "a", "gpus": 4}])
    rnd = round_at(ledger, 5)
    quota.book(rnd, ledger.jobs["x"], (None, None))  # two more members of 4 GPUs
    assert rnd.usage["a"] == 4000 + 8000
