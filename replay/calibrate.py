"""Calibration: fit a few documented policy knobs to what a history observed, on one window of
it, and validate on the other.

The simulator decides at every event instant and starts a member when it is placed; it has no
start latency to fit, and a scheduling cycle only under the `slurm` profile (Slurm's backfill
cycle, `slurm.backfill_interval_s`, fitted only there). What it exposes, and what sites set
differently from gpuledger's defaults, are the policy's timing knobs (`KNOBS`, each with its
Slurm counterpart and a small documented grid). Calibration is a deterministic coordinate search: from the
recorded value of every knob, each knob in `KNOBS` order is set to the grid value that
minimises the fitting window's per-job wait error (ties keep the earlier candidate, the
recorded value first), twice over. Every candidate replays the whole history (jobs of both
windows share the cluster); the error of a window is taken over its jobs only: the jobs of the
observed history, sorted by (submit time, id), split at `split`.

The objective, compared in this order: jobs started in only one of the two runs (fewer is
better), then the mean, then the median of |replayed wait - observed wait| over the jobs
started in both (`fidelity.wait_error`).

What it cannot do: close a structural gap (outcomes the replay does not reproduce, a policy the
import did not map, inputs it lost). Those show in the fidelity table before and after; a
knob fitted around them fits noise, which the validation window shows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec

from gpuledger import events as ev
from gpuledger.events.slurm_policy import SlurmPolicy
from gpuledger.replay.compare import Summary, summarize
from gpuledger.replay.compare import human_duration as hd
from gpuledger.replay.fidelity import WaitError, fidelity, wait_error

if TYPE_CHECKING:
    from gpuledger.replay.whatif import Inputs


class CalibrationError(ValueError):
    """A knob or grid that cannot be fitted (one line, names the knob)."""


KNOBS: dict[str, tuple[tuple[int, ...], str]] = {
    "min_runtime_s": ((0, 60, 120, 300, 600), "Slurm PreemptExemptTime"),
    "default_grace_s": ((0, 10, 30, 60, 120), "Slurm GraceTime / KillWait"),
    "reservation_after_s": ((0, 60, 300, 1800), "backfill: the wait after which a gang reserves"),
    "aging_after_wait_s": ((0, 600, 1800, 3600), "Slurm PriorityWeightAge / PriorityMaxAge"),
    "slurm.backfill_interval_s": (
        (0, 1, 2, 5, 10, 30, 60),
        "Slurm SchedulerParameters bf_interval (fitted under the slurm profile only)",
    ),
}
"""The knobs (`policy.<name>`), their default grid and what they correspond to. Slurm's
`sched_interval` is none: the main scheduler it times runs on every event in a replay."""

PASSES = 2


def parse_knobs(items: list[str]) -> dict[str, tuple[int, ...]]:
    """`--knob NAME` or `--knob NAME=V1,V2`: the knobs to fit and their grids (all by default)."""
    if not items:
        return {k: grid for k, (grid, _) in KNOBS.items()}
    out: dict[str, tuple[int, ...]] = {}
    for item in items:
        name, sep, values = item.partition("=")
        name = name.strip().removeprefix("policy.")
        if name not in KNOBS:
            known = ", ".join(KNOBS)
            raise CalibrationError(f"--knob {item}: unknown knob {name!r} (known: {known})")
        if not sep:
            out[name] = KNOBS[name][0]
            continue
        try:
            grid = tuple(int(v) for v in values.split(",") if v.strip())
        except ValueError:
            raise CalibrationError(
                f"--knob {item}: values must be whole seconds, comma-separated"
            ) from None
        if not grid or min(grid) < 0:
            raise CalibrationError(f"--knob {item}: give at least one value, none negative")
        out[name] = grid
    return out


@dataclass
class Result:
    recorded: dict[str, int]
    fitted: dict[str, int]
    windows: tuple[int, int]
    """Jobs in the fitting and in the validation window."""
    before: tuple[WaitError, WaitError]
    after: tuple[WaitError, WaitError]
    tried: list[tuple[dict[str, int], WaitError]] = field(default_factory=list)
    outside: tuple[list[str], list[str]] = ([], [])
    """Fidelity metrics outside tolerance over the whole history, before and after."""
    judged: int = 0

    def sets(self) -> list[str]:
        return [f"policy.{k}={v}" for k, v in self.fitted.items() if v != self.recorded[k]]

    def as_dict(self) -> dict[str, Any]:
        return {
            "knobs": {
                k: {"recorded": self.recorded[k], "fitted": self.fitted[k]} for k in self.fitted
            },
            "set": self.sets(),
            "windows": {"fit_jobs": self.windows[0], "validate_jobs": self.windows[1]},
            "wait_error": {
                "fit": {"before": self.before[0].as_dict(), "after": self.after[0].as_dict()},
                "validate": {
                    "before": self.before[1].as_dict(),
                    "after": self.after[1].as_dict(),
                },
            },
            "candidates": [{"knobs": k, "fit": e.as_dict()} for k, e in self.tried],
            "outside_tolerance": {"before": self.outside[0], "after": self.outside[1]},
        }

    def lines(self) -> list[str]:
        def err(e: WaitError) -> str:
            return (
                f"median {hd(e.median_s)}, mean {hd(e.mean_s)} over {e.jobs} jobs "
                f"({e.only_baseline + e.only_observed} started in one run only)"
            )

        out = [
            f"calibrated {len(self.fitted)} knobs on {self.windows[0]} jobs, validated on "
            f"{self.windows[1]} ({len(self.tried)} replays)"
        ]
        for k, v in self.fitted.items():
            moved = "" if v == self.recorded[k] else f" (recorded {self.recorded[k]})"
            out.append(f"  policy.{k} = {v}{moved}  [{KNOBS[k][1]}]")
        for i, name in enumerate(("fit", "validation")):
            out.append(f"  {name} window, per-job wait error before: {err(self.before[i])}")
            out.append(f"  {name} window, per-job wait error after:  {err(self.after[i])}")
        left = ", ".join(self.outside[1][:6]) + (", ..." if len(self.outside[1]) > 6 else "")
        out.append(
            f"  whole history, fidelity metrics outside tolerance: before {len(self.outside[0])} "
            f"of {self.judged}, after {len(self.outside[1])}"
            + (f" (still: {left}; calibration does not close structural gaps)" if left else "")
        )
        sets = self.sets()
        out.append(
            "  use: " + " ".join(f"--set {s}" for s in sets)
            if sets
            else "  the recorded values fit best: nothing to change"
        )
        return out


def _recorded(inputs: Inputs) -> dict[str, Any]:
    policy = ev.Policy()
    for e in inputs.config:
        if isinstance(e, ev.PolicyConfigured):
            policy = e.policy
    out: dict[str, Any] = {}
    for k in KNOBS:
        head, _, sub = k.partition(".")
        if not sub:
            out[k] = getattr(policy, k)
            continue
        site = getattr(policy, head)
        out[k] = getattr(site if site is not msgspec.UNSET else SlurmPolicy(), sub)
    return out


def _profile(inputs: Inputs) -> str:
    policy = ev.Policy()
    for e in inputs.config:
        if isinstance(e, ev.PolicyConfigured):
            policy = e.policy
    return policy.profile


def windows(inputs: Inputs, observed: Summary, split: float) -> tuple[set[str], set[str]]:
    """The observed jobs sorted by (submit time, id), split at `split`: (fit, validate)."""
    submit: dict[str, int] = {}
    for t, e in inputs.timeline:
        if isinstance(e, ev.JobSubmitted):
            submit.setdefault(e.job.job_id, t)
    jobs = sorted(
        observed.jobs.groups,
        key=lambda j: (submit.get(j, submit.get(j.split("@", 1)[0], 0)), j),
    )
    cut = round(len(jobs) * split)
    return set(jobs[:cut]), set(jobs[cut:])


def _objective(e: WaitError) -> tuple[int, float, float]:
    big = float("inf")
    return (
        e.only_baseline + e.only_observed,
        big if e.mean_s is None else e.mean_s,
        big if e.median_s is None else e.median_s,
    )


def calibrate(
    inputs: Inputs, observed: Summary, grid: dict[str, tuple[int, ...]], split: float
) -> Result:
    """Fit `grid`'s knobs on the first window of `observed`'s jobs, validate on the second."""
    from gpuledger.replay.overlay import OverlayError, apply_overlays
    from gpuledger.replay.whatif import replay

    fit_jobs, val_jobs = windows(inputs, observed, split)
    if not fit_jobs or not val_jobs:
        raise CalibrationError(
            f"{len(observed.jobs.groups)} observed jobs cannot be split into two windows"
        )
    recorded = _recorded(inputs)
    if _profile(inputs) != "slurm":  # its knobs change nothing under another profile
        grid = {k: v for k, v in grid.items() if not k.startswith("slurm.")}
    cache: dict[tuple[tuple[str, int], ...], Summary] = {}

    def run(knobs: dict[str, int]) -> Summary:
        key = tuple(sorted(knobs.items()))
        if key not in cache:
            sets = [f"policy.{k}={v}" for k, v in knobs.items() if v != recorded[k]]
            try:
                trial, _ = apply_overlays(inputs, sets)
            except OverlayError as exc:
                raise CalibrationError(str(exc)) from None
            cache[key] = summarize(replay(trial).log, groups=observed.jobs.groups)
        return cache[key]

    tried: list[tuple[dict[str, int], WaitError]] = []

    def fit_error(knobs: dict[str, int]) -> WaitError:
        e = wait_error(observed, run(knobs), fit_jobs)
        if not any(k == knobs for k, _ in tried):
            tried.append((dict(knobs), e))
        return e

    start = {k: recorded[k] for k in grid}
    current = dict(start)
    best = _objective(fit_error(current))
    for _ in range(PASSES):
        moved = False
        for name, values in grid.items():
            for v in values:
                if v == current[name]:
                    continue
                trial = {**current, name: v}
                score = _objective(fit_error(trial))
                if score < best:
                    best, current, moved = score, trial, True
        if not moved:
            break
    base, fitted = run(start), run(current)
    f0, f1 = fidelity(observed, base), fidelity(observed, fitted)
    return Result(
        recorded=start,
        fitted=current,
        windows=(len(fit_jobs), len(val_jobs)),
        before=(wait_error(observed, base, fit_jobs), wait_error(observed, base, val_jobs)),
        after=(wait_error(observed, fitted, fit_jobs), wait_error(observed, fitted, val_jobs)),
        tried=tried,
        outside=([g.label for g in f0.outside], [g.label for g in f1.outside]),
        judged=sum(1 for g in f0.gaps if g.within is not None),
    )
