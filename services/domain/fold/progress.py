"""Work accounting of an ended allocation: what was saved, what was lost.

A checkpoint acknowledged by every member after the preemption request means nothing was
lost. Otherwise the saved progress is the newest of: the progress the allocation started
from, the newest checkpoint every member acknowledged, and the job's own periodic checkpoint
(`interval_s` of run time). Lost work is the run time since then, times the allocation's
GPUs, in whole-GPU milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpuledger.events.specs import CheckpointPolicy

if TYPE_CHECKING:  # the ledger imports this module
    from gpuledger.services.domain.fold.ledger import AllocationRecord


@dataclass(frozen=True)
class WorkOutcome:
    checkpointed: bool
    progress_ms: int
    lost_gpu_ms: int
    resume_step: int | None


def work_outcome(rec: AllocationRecord, policy: CheckpointPolicy) -> WorkOutcome:
    """`rec` is an AllocationRecord whose members have all exited."""
    exit_ms = max((t for _, t in rec.exited.values()), default=rec.placed_ms)
    start_ms = min(rec.started.values(), default=exit_ms)
    ran_ms = max(0, exit_ms - start_ms)
    run_progress = rec.start_progress_ms + ran_ms

    def saved_by(ckpt: tuple[int, int, int]) -> int:
        step, progress_ms, at_ms = ckpt
        return progress_ms if progress_ms > 0 else rec.start_progress_ms + max(0, at_ms - start_ms)

    ranks = [m.rank for m in rec.members]
    all_ckpt = bool(ranks) and all(r in rec.checkpoints for r in ranks)
    stop = rec.preemption if rec.preemption is not None else getattr(rec, "time_limit", None)
    requested_at = stop.occurred_at_ms if stop is not None else None
    if (
        all_ckpt
        and requested_at is not None
        and all(rec.checkpoints[r][2] >= requested_at for r in ranks)
    ):
        progress = min(saved_by(rec.checkpoints[r]) for r in ranks)
        first = min(rec.checkpoints[r][0] for r in ranks)
        return WorkOutcome(True, progress, 0, first)
    saved, step = rec.start_progress_ms, None
    if all_ckpt:
        ck = min(saved_by(rec.checkpoints[r]) for r in ranks)
        if ck > saved:
            saved, step = ck, min(rec.checkpoints[r][0] for r in ranks)
    if policy.interval_s > 0:
        interval = policy.interval_s * 1000
        periodic = rec.start_progress_ms + (ran_ms // interval) * interval
        if periodic > saved:
            saved, step = periodic, periodic // 1000
    lost = (run_progress - saved) * rec.gpu_milli // 1000
    return WorkOutcome(False, saved, max(0, lost), step)
