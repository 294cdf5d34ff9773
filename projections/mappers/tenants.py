"""Event -> row handlers of configuration and quota: tenants, priority classes, fair shares."""

from __future__ import annotations

from gpuledger import events as ev
from gpuledger.projections.mappers.rows import (
    PriorityClassRow,
    TenantRow,
    _dumps,
)
from gpuledger.projections.mappers.state import ProjectionState
from gpuledger.projections.queries import gpus_label  # noqa: F401 - its home is the read side
from gpuledger.services.domain.policy.quota import (
    borrowing_limit,
    borrowing_limits_by_model,
    lending_limit,
    lending_limits_by_model,
)
from gpuledger.services.domain.policy.submit_limits import tenant_submit_limits


class TenantMappers(ProjectionState):
    """The `tenants`, `priority_classes` and `quota_usage` rows."""

    # -------------------------------------------------------------- handlers: config, quota

    def _tenant(self, seq: int, e: ev.TenantConfigured) -> None:
        t = self.tenants.get(e.tenant) or TenantRow(tenant=e.tenant)
        t.parent = e.tenant.rpartition("/")[0] or None
        t.guaranteed_gpu_milli = e.guaranteed_gpu_milli
        t.limit_gpu_milli = e.limit_gpu_milli
        t.over_quota_weight = e.over_quota_weight
        t.borrowing_limit_gpu_milli = borrowing_limit(e)
        t.lending_limit_gpu_milli = lending_limit(e)
        t.borrowing_limit_by_model = _dumps(dict(borrowing_limits_by_model(e)) or None)
        t.lending_limit_by_model = _dumps(dict(lending_limits_by_model(e)) or None)
        t.submit_limits = _dumps(tenant_submit_limits(e))
        t.user_limits = _dumps(
            ev.to_builtins(e.user_limits) if isinstance(e.user_limits, ev.UserLimits) else None
        )
        t.configured_at_ms = e.occurred_at_ms
        t.updated_at_ms = e.occurred_at_ms
        self.tenants[e.tenant] = t
        self.batch.upsert(t)

    def _priority_class(self, seq: int, e: ev.PriorityClassConfigured) -> None:
        self.batch.upsert(
            PriorityClassRow(
                name=e.name,
                value=e.value,
                preemptible=e.preemptible,
                slo_class=e.slo_class,
                description=e.description,
                grace_s=e.grace_s,
                allow_timeslice=e.allow_timeslice,
                configured_at_ms=e.occurred_at_ms,
            )
        )

    def _fair_share(self, seq: int, e: ev.FairShareUpdated) -> None:
        add = self._add_quota
        at = e.occurred_at_ms
        for s in e.shares:
            add(
                seq,
                at,
                s.tenant,
                s.guaranteed_gpu_milli,
                s.fair_share_gpu_milli,
                s.allocated_gpu_milli,
                s.demand_gpu_milli,
                max(0, s.allocated_gpu_milli - s.guaranteed_gpu_milli),
            )
            t = self.tenants.get(s.tenant)
            if t is None:
                t = TenantRow(
                    tenant=s.tenant,
                    parent=s.tenant.rpartition("/")[0] or None,
                    guaranteed_gpu_milli=s.guaranteed_gpu_milli,
                )
                self.tenants[s.tenant] = t
            t.fair_share_gpu_milli = s.fair_share_gpu_milli
            t.allocated_gpu_milli = s.allocated_gpu_milli
            t.demand_gpu_milli = s.demand_gpu_milli
            t.updated_at_ms = at
            self.batch.upsert(t)
