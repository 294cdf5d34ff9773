"""Stage `model_guarantee`: non-preemptible work may only use its tenant's per-GPU-model
guarantee (`guaranteed_by_model`): a model whose guarantee the job would exceed is closed to
it. When only that keeps the job out, `NonPreemptibleOverQuota` (a quota code) names each
model, its non-preemptible use and its guarantee. Every non-preemptible bind adds to its
tenant's non-preemptible use per model; an elastic gang (and a grow) gets members only as
far as no other model's guarantee would be passed."""

from __future__ import annotations

from gpuledger.events.reasons import PendingReason
from gpuledger.services.domain.fold.ledger import JobRecord
from gpuledger.services.domain.tooling.reads import ADMITTED_JOBS, NODE_SET, of
from gpuledger.services.scheduler.round import (
    Limits,
    Round,
    Why,
    add_by_model,
    nodes_with_models,
)
from gpuledger.services.scheduler.stage import Stage


def over_guarantee(rnd: Round, job: JobRecord, need: int) -> list[tuple[str, int, int]]:
    """GPU models whose per-model guarantee of the job's tenant the job would exceed:
    (model, non-preemptible use, guarantee), in model order."""
    conf = rnd.state.config.tenants.get(job.tenant)
    if conf is None or not conf.guaranteed_by_model:
        return []
    out = []
    for model in sorted(conf.guaranteed_by_model):
        used = rnd.fixed_model.get((job.tenant, model), 0)
        if used + need > conf.guaranteed_by_model[model]:
            out.append((model, used, conf.guaranteed_by_model[model]))
    return out


def exclude(rnd: Round, job: JobRecord, lim: Limits) -> frozenset[str]:
    """The nodes of the models over guarantee (non-preemptible jobs only)."""
    if job.preemptible:
        return frozenset()
    lim.over_models = over_guarantee(rnd, job, lim.need)
    if not lim.over_models:
        return frozenset()
    return nodes_with_models(rnd.state, {m for m, _, _ in lim.over_models})


def cap(rnd: Round, job: JobRecord, lim: Limits, k: int) -> bool:
    """Whether `k` members take no model past its guarantee beyond those already closed."""
    if job.preemptible:
        return True
    need = k * job.spec.resources.gpu_milli_total()
    closed = {m for m, _, _ in lim.over_models}
    return not {m for m, _, _ in over_guarantee(rnd, job, need)} - closed


def explain(rnd: Round, job: JobRecord, lim: Limits, why: Why) -> None:
    """`NonPreemptibleOverQuota` when only per-model guarantees keep the job out."""
    if not lim.over_models or not rnd.binds(job, lim, why, STAGE.name):
        return
    need = lim.need
    why.reason = PendingReason.NonPreemptibleOverQuota
    why.message = "; ".join(
        f"non-preemptible work on {model} may only use tenant {job.tenant}'s "
        f"guarantee for that model: it runs {used / 1000:g} non-preemptible of "
        f"{guaranteed / 1000:g} guaranteed {model} GPUs, job needs {need / 1000:g}"
        for model, used, guaranteed in lim.over_models
    )
    why.details["models_over_guarantee"] = [
        {"model": m, "non_preemptible_gpus": u / 1000, "guaranteed_gpus": g / 1000}
        for m, u, g in lim.over_models
    ]


def book(rnd: Round, job: JobRecord, members: tuple) -> None:
    """Non-preemptible members bound count towards their model's guarantee."""
    if not job.preemptible:
        add_by_model(rnd.state, rnd.fixed_model, job, members)


STAGE = Stage(
    "model_guarantee",
    __doc__ or "",
    gives=(PendingReason.NonPreemptibleOverQuota,),
    exclude=exclude,
    cap=cap,
    explain=explain,
    book=book,
    binds_grow=True,
    reads=of(ADMITTED_JOBS, "allocations", NODE_SET, "tenants"),
)
