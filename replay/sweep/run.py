"""Running a sweep: every variant an independent task on one executor.

The inputs (the log's external inputs, `replay.whatif.external_inputs`) are computed once
here and shared with the executor (once per worker); each task overlays its variant and
replays (`task.run_variant`). Every variant comes back exactly once, as a result or as a
failure naming its error; results are in the sweep's order whatever order they finished in.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from gpuledger.replay.sweep.executors import Executor, Outcome
from gpuledger.replay.sweep.spec import VariantSpec
from gpuledger.replay.sweep.task import VariantResult, run_variant


@dataclass
class SweepResult:
    results: list[VariantResult]
    """The variants that ran, in the sweep's order."""
    failed: list[tuple[str, str]] = field(default_factory=list)
    """(label, error) of every variant whose every attempt failed."""
    executor: str = ""
    workers: int = 1
    seconds: float = 0.0


def check(inputs, variants: list[VariantSpec]) -> None:
    """Apply every variant's overlays here first, so a bad key is one error before any task
    starts (raises `replay.overlay.OverlayError`, its problems prefixed with the label)."""
    from gpuledger.replay.overlay import OverlayError, apply_overlays

    for v in variants:
        try:
            apply_overlays(inputs, list(v.sets), list(v.policies))
        except OverlayError as exc:
            raise OverlayError([f"variant {v.label!r}: {p}" for p in exc.problems]) from None


def run_sweep(
    inputs,
    variants: list[VariantSpec],
    executor: Executor,
    keep_logs: bool = False,
    on_done: Callable[[Outcome], None] | None = None,
    task: Callable[..., VariantResult] = run_variant,
) -> SweepResult:
    """Run every variant on `executor`; `on_done` is called as each task finishes."""
    started = time.perf_counter()
    shared = executor.share(inputs)
    for v in variants:
        executor.submit(v.label, task, shared, v, keep_logs)
    done: dict[str, VariantResult] = {}
    errors: dict[str, str] = {}
    for outcome in executor.as_completed():
        if outcome.error is None:
            done[outcome.key] = outcome.value
        else:
            errors[outcome.key] = outcome.error
        if on_done is not None:
            on_done(outcome)
    missing = [v.label for v in variants if v.label not in done and v.label not in errors]
    for label in missing:  # an executor that lost a task: reported, never dropped
        errors[label] = "lost: the executor returned no outcome"
    return SweepResult(
        results=[done[v.label] for v in variants if v.label in done],
        failed=[(v.label, errors[v.label]) for v in variants if v.label in errors],
        executor=executor.name,
        workers=executor.workers,
        seconds=time.perf_counter() - started,
    )
