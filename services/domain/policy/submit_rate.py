"""Submit rate: how many submissions a second the intake stores for one tenant (issue 44:
no tenant keeps the control plane busy by submitting fast).

A token bucket per tenant: `submit_rate` submissions a second (its `limits:`, else
`DEFAULT_SUBMIT_RATE`; None: no bound), with a burst of as many (one second's worth). A
submission past it is refused with `SubmitLimit` and one line naming the bound; an array is
one submission (its tasks are bounded by `array_size`). Integer units: thousandths of a
submission, milliseconds.

Pure: the shell (the intake, services/runtime/intake.py) supplies `now_ms` from a monotonic
clock and the tenant's configuration from its fold. The buckets are the intake's own state,
one set per admission instance, and never folded: the log holds only what was stored, and
admission, the judge of record, does not re-judge a rate.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec

from gpuledger.events.catalog import TenantConfigured
from gpuledger.events.specs import DEFAULT_SUBMIT_RATE, SubmitLimit
from gpuledger.services.domain.policy.submit_limits import Refusal

MILLI = 1000
"""One submission, in the buckets' unit."""


def rate_of(tenant: TenantConfigured) -> int | None:
    """The tenant's submissions a second in force (None: no bound)."""
    t = tenant.submit_limits if isinstance(tenant.submit_limits, SubmitLimit) else SubmitLimit()
    return DEFAULT_SUBMIT_RATE if isinstance(t.submit_rate, msgspec.UnsetType) else t.submit_rate


@dataclass
class Bucket:
    milli: int
    """Submissions it may take now, in thousandths."""
    at_ms: int
    """When `milli` was last brought up to date."""


@dataclass
class SubmitRate:
    """The intake's buckets, one per tenant."""

    buckets: dict[str, Bucket] = field(default_factory=dict)

    def take(self, tenant: TenantConfigured, now_ms: int) -> Refusal | None:
        """Take one submission of `tenant` at `now_ms`: None when its bucket holds one (then
        it is taken), else the refusal (nothing is taken)."""
        rate = rate_of(tenant)
        if rate is None:
            return None
        full = rate * MILLI
        b = self.buckets.get(tenant.tenant)
        if b is None:
            b = self.buckets[tenant.tenant] = Bucket(full, now_ms)
        b.milli = min(full, b.milli + max(0, now_ms - b.at_ms) * rate)  # rate/s = rate milli/ms
        b.at_ms = max(b.at_ms, now_ms)
        if b.milli >= MILLI:
            b.milli -= MILLI
            return None
        scope = f"tenant {tenant.tenant}"
        if rate == 0:
            return Refusal(
                f"{scope} may submit no jobs (submit_rate 0)",
                {"limit": "submit_rate", "scope": scope, "submit_rate": 0},
            )
        wait_ms = -(-(MILLI - b.milli) // rate)
        return Refusal(
            f"{scope} may submit at most {rate} jobs a second (submit_rate); retry in {wait_ms} ms",
            {"limit": "submit_rate", "scope": scope, "submit_rate": rate, "retry_ms": wait_ms},
        )
