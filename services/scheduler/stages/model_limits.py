"""Stage `model_limits`: per-GPU-model lending and borrowing limits
(`lending_limit_by_model`, `borrowing_limit_by_model`) close the models the job may not
use now. When only they keep the job out (it would fit on the models they close), the job
gets the first blocked model's reason (`ExceedsLimit` / `LendingLimit`, quota codes) and
every blocked model's message. An elastic gang gets members above `min_members` only as far
as every model still open to it allows; a grow obeys them too. Every bind adds to its
tenant's use per model (while some tenant sets per-model limits)."""

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


def exclude(rnd: Round, job: JobRecord, lim: Limits) -> frozenset[str]:
    """The nodes of the GPU models the limits close to the job."""
    lim.model_blocks = rnd.model_blocks(job, lim.need)
    if not lim.model_blocks:
        return frozenset()
    return nodes_with_models(rnd.state, set(lim.model_blocks))


def cap(rnd: Round, job: JobRecord, lim: Limits, k: int) -> bool:
    """Whether `k` members close no model beyond those already closed to the smallest gang."""
    need = k * job.spec.resources.gpu_milli_total()
    return not set(rnd.model_blocks(job, need)) - set(lim.model_blocks)


def explain(rnd: Round, job: JobRecord, lim: Limits, why: Why) -> None:
    """The blocked models' reason when only they keep the job out."""
    if not lim.model_blocks or not rnd.binds(job, lim, why, STAGE.name):
        return
    first = next(iter(lim.model_blocks.values()))
    why.reason = first[0]
    why.message = "; ".join(b[1] for b in lim.model_blocks.values())
    why.details["model_limits"] = [{"reason": b[0], **b[2]} for b in lim.model_blocks.values()]


def book(rnd: Round, job: JobRecord, members: tuple) -> None:
    """The members bound count towards their models' use."""
    if rnd.model_capacity is not None:
        add_by_model(rnd.state, rnd.used_model, job, members)


STAGE = Stage(
    "model_limits",
    __doc__ or "",
    gives=(PendingReason.ExceedsLimit, PendingReason.LendingLimit),
    exclude=exclude,
    cap=cap,
    explain=explain,
    book=book,
    binds_grow=True,
    reads=of(ADMITTED_JOBS, "allocations", NODE_SET, "tenants"),
)
