"""Quota: computes every tenant's fair share from guarantees, weights, limits and demand, and
publishes it when the shares change (allocation changes alone do not republish)."""

from __future__ import annotations

from events import Event, FairShareUpdated
from services.domain.deciding import LedgerService
from services.domain.ledger import Ledger
from services.domain.quota import fair_shares


def demand_by_tenant(state: Ledger) -> dict[str, int]:
    """Own demand per tenant: what it holds plus what it waits for."""
    demand = dict(state.tenant_gpu_milli)
    for job_id in state.pending:
        job = state.jobs[job_id]
        demand[job.tenant] = demand.get(job.tenant, 0) + job.gpu_milli()
    return demand


class Quota(LedgerService):
    name = "quota"

    def decide(self, state: Ledger, now_ms: int) -> list[Event]:
        if not state.config.tenants:
            return []
        shares = fair_shares(
            state.config.tenants,
            state.fleet.capacity_gpus() * 1000,
            state.tenant_gpu_milli,
            demand_by_tenant(state),
        )
        current = {t: (s.guaranteed_gpu_milli, s.fair_share_gpu_milli) for t, s in shares.items()}
        last = {t: (s.guaranteed_gpu_milli, s.fair_share_gpu_milli) for t, s in state.fair_shares.items()}
        if current == last:
            return []
        digest = ",".join(f"{t}={g}/{f}" for t, (g, f) in sorted(current.items()))
        return [
            self.emit(
                state, now_ms, FairShareUpdated, key=f"{state.last_seq}:{digest}",
                correlation_id="quota", shares=tuple(shares[t] for t in sorted(shares)),
            )
        ]
