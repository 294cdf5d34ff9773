"""Stage `mig_layout`: with the policy `mig_regeometry` on, a MIG job that no fixed layout
offers is not `Unschedulable` when some MIG GPU could be given a layout with its profile:
it is `MIGPlacementUnavailable` (a placement code), so the preemption service may
re-partition an idle GPU for it. An explanation only."""

from __future__ import annotations

from gpuledger.events.reasons import PendingReason
from gpuledger.services.domain.fold.config import defrag_settings
from gpuledger.services.domain.fold.ledger import JobRecord
from gpuledger.services.domain.tooling.reads import NODE_SET, of
from gpuledger.services.placement import profile_for
from gpuledger.services.scheduler.round import Limits, Round, Why
from gpuledger.services.scheduler.stage import Stage


def explain(rnd: Round, job: JobRecord, lim: Limits, why: Why) -> None:
    """`MIGPlacementUnavailable` instead of `Unschedulable` when a layout could offer it."""
    state = rnd.state
    profile = job.spec.resources.mig_profile
    if (
        why.reason != PendingReason.Unschedulable
        or profile is None
        or not defrag_settings(state.config.policy).mig_regeometry
    ):
        return
    models = job.spec.resources.gpu_models
    gpus = [
        (name, g.index)
        for name in sorted(state.nodes)
        for g in state.nodes[name].info.gpus
        if g.sharing == "mig"
        and g.mig_layout
        and (not models or g.model in models)
        and profile_for(g.model, profile) is not None
    ]
    if not gpus:
        return
    why.reason = PendingReason.MIGPlacementUnavailable
    why.message = (
        f"MIG {profile}: no GPU's current layout offers it; {len(gpus)} MIG GPUs "
        f"could be re-partitioned for it (policy mig_regeometry); {why.message}"
    )
    why.details["regeometry_candidates"] = len(gpus)


STAGE = Stage(
    "mig_layout",
    __doc__ or "",
    gives=(PendingReason.MIGPlacementUnavailable,),
    explain=explain,
    reads=of(NODE_SET, "mig", "allocations", "tenants"),
)
