"""Quota: computes every tenant's fair share from guarantees, weights, limits and demand, and
publishes it when the shares change (allocation changes alone do not republish)."""

from __future__ import annotations

import msgspec

from gpuledger.events import Event, FairShareUpdated
from gpuledger.services.domain.deciding import LedgerService
from gpuledger.services.domain.ledger import Ledger
from gpuledger.services.domain.quota import fair_shares


def demand_by_tenant(state: Ledger) -> dict[str, int]:
    """Own demand per tenant: what it holds plus what it waits for."""
    demand = dict(state.tenant_gpu_milli)
    for tenant, waiting in state.pending_gpu_milli.items():
        demand[tenant] = demand.get(tenant, 0) + waiting
    return demand


class Quota(LedgerService):
    name = "quota"

    def __init__(self, instance: str = "0", leader_epoch: int = 0) -> None:
        super().__init__(instance, leader_epoch)
        self._capacity = (-1, 0)  # memo: (nodes_version, capacity in milli-GPUs)
        # memo: (capacity, config digest, demand) -> shares (demands recur as jobs come and go)
        self._shares: dict[tuple, dict] = {}
        # memo of a quiet answer: (key, the `fair_shares` mapping it was compared with); the
        # ledger replaces that mapping on every FairShareUpdated, never mutates it
        self._quiet: tuple = (None, None)

    def cache_defaults(self) -> dict:
        return {"_capacity": (-1, 0), "_shares": {}, "_quiet": (None, None)}

    def decide(self, state: Ledger, now_ms: int) -> list[Event]:
        if not state.config.tenants:
            return []
        if self._capacity[0] != state.nodes_version:
            self._capacity = (state.nodes_version, state.fleet.capacity_gpus() * 1000)
        demand = demand_by_tenant(state)
        key = (self._capacity[1], state.config.digest, tuple(sorted(demand.items())))
        if self._quiet[1] is state.fair_shares and self._quiet[0] == key:
            return []
        shares = self._shares.get(key)
        if shares is None:  # fair shares depend on these alone
            if len(self._shares) >= 4096:
                self._shares.clear()
            shares = self._shares[key] = fair_shares(state.config.tenants, self._capacity[1], {}, demand)
        current = {t: (s.guaranteed_gpu_milli, s.fair_share_gpu_milli) for t, s in shares.items()}
        last = {t: (s.guaranteed_gpu_milli, s.fair_share_gpu_milli) for t, s in state.fair_shares.items()}
        if current == last:
            self._quiet = (key, state.fair_shares)
            return []
        digest = ",".join(f"{t}={g}/{f}" for t, (g, f) in sorted(current.items()))
        allocated = state.tenant_gpu_milli
        return [
            self.emit(
                state, now_ms, FairShareUpdated, key=f"{state.last_seq}:{digest}",
                correlation_id="quota",
                shares=tuple(
                    msgspec.structs.replace(shares[t], allocated_gpu_milli=allocated.get(t, 0))
                    for t in sorted(shares)
                ),
            )
        ]
