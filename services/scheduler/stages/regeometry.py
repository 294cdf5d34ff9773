"""Stage `regeometry`: while an idle MIG GPU's layout is changed for the job (policy
`mig_regeometry`), it is `WaitingForMigReconfiguration` (node, GPU, the layout asked for);
while every idle GPU's node is at its re-geometry rate limit, its message says when that
lapses. An explanation only."""

from __future__ import annotations

from gpuledger.events.reasons import PendingReason
from gpuledger.services.domain.fold.config import defrag_settings
from gpuledger.services.domain.fold.ledger import JobRecord
from gpuledger.services.domain.policy.regeometry import rate_limit_lapses_ms, regeometry_for
from gpuledger.services.domain.tooling.reads import NODE_SET, of
from gpuledger.services.domain.tooling.timefmt import instant
from gpuledger.services.scheduler.round import Limits, Round, Why
from gpuledger.services.scheduler.stage import Stage


def explain(rnd: Round, job: JobRecord, lim: Limits, why: Why) -> None:
    """The re-partitioning under way for the job, or when the rate limit lapses."""
    state, now_ms = rnd.state, rnd.now_ms
    if (
        why.reason == PendingReason.MIGPlacementUnavailable
        and job.job_id not in {r.job_id for r in state.mig.mig_requests.values()}
        and defrag_settings(state.config.policy).mig_regeometry
    ):
        regeo = regeometry_for(state, job, now_ms, frozenset(), state.fleet)
        lapses = rate_limit_lapses_ms(state, regeo.rate_limited, now_ms)
        if not regeo.node and lapses is not None:
            s = defrag_settings(state.config.policy)
            why.message += (
                f"; an idle GPU on {', '.join(regeo.rate_limited)} could be re-partitioned, "
                f"but the node's re-geometries are limited to {s.per_window} per "
                f"{s.window_ms // 1000}s: next at {instant(lapses)}"
            )
            why.details["regeometry_rate_limited"] = list(regeo.rate_limited)
    for node in sorted(state.mig.mig_requests):
        r = state.mig.mig_requests[node]
        if r.job_id != job.job_id:
            continue
        why.reason = PendingReason.WaitingForMigReconfiguration
        why.message = (
            f"waiting for GPU {r.gpu_index} of {node} to be re-partitioned for "
            f"{job.spec.resources.mig_profile}: [{', '.join(r.previous_layout)}] -> "
            f"[{', '.join(r.layout)}] (requested {instant(r.occurred_at_ms)}); "
            f"{why.result.message}"
        )
        why.details["mig_reconfiguration"] = {
            "node": node,
            "gpu_index": r.gpu_index,
            "layout": list(r.layout),
        }
        return


STAGE = Stage(
    "regeometry",
    __doc__ or "",
    reasons=(PendingReason.WaitingForMigReconfiguration,),
    explain=explain,
    reads=of(NODE_SET, "mig", "allocations", "tenants"),
)
