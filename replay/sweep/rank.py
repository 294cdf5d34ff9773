"""Ranking a sweep's variants by chosen metrics (`--rank wait_p99:latency-critical,gpu_hours`).

Each key names a metric of `replay.metrics` (the definitions live there, once) and, for the
per-class ones, the SLO class after a colon. Variants are ordered by the first key, ties by
the next, then by their order in the sweep; a variant missing a value (a class it never saw)
comes after those that have it. Every metric has a direction (lower is better for waits,
GPU-hours, preemptions; higher for allocation, fairness, completed jobs); a leading `+`
(higher is better) or `-` (lower) overrides it. The references (observed column, recorded
configuration) are shown first and not ranked.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

from gpuledger.services.domain.inputs.schema import InputError

PER_CLASS = {
    "wait_p50": "wait_s_p50_by_class",
    "wait_p99": "wait_s_p99_by_class",
    "never_placed": "never_placed_by_class",
}
SCALAR = {
    "gpu_hours": "gpu_hours",
    "lost_gpu_hours": "lost_gpu_hours",
    "preemptions": "preemptions",
    "gpu_allocation_pct": "gpu_allocation_pct",
    "allocation": "gpu_allocation_pct",
    "fairness": "fairness_jain",
    "fairness_jain": "fairness_jain",
    "jobs_completed": "jobs_completed",
    "jct_mean": "jct_s_mean",
    "jct_p50": "jct_s_p50",
    "jct_p99": "jct_s_p99",
}
HIGHER_IS_BETTER = {"gpu_allocation_pct", "fairness_jain", "jobs_completed"}
DURATIONS = {"wait_s_p50_by_class", "wait_s_p99_by_class", "jct_s_mean", "jct_s_p50", "jct_s_p99"}


class RankError(InputError):
    """A `--rank` key that names no metric."""


@dataclass(frozen=True)
class RankKey:
    text: str
    metric: str
    """The `replay.metrics` key."""
    slo_class: str | None
    higher_is_better: bool

    def value(self, metrics: dict[str, Any]) -> float | None:
        v = metrics.get(self.metric)
        if self.slo_class is not None:
            v = v.get(self.slo_class) if isinstance(v, dict) else None
        return v if isinstance(v, int | float) and not isinstance(v, bool) else None


def parse(text: str) -> list[RankKey]:
    """`wait_p99:latency-critical,-gpu_hours` -> keys (RankError on an unknown metric)."""
    keys = []
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        sign, name = (item[0], item[1:]) if item[0] in "+-" else ("", item)
        base, _, cls = name.partition(":")
        if base in PER_CLASS:
            if not cls:
                raise RankError(f"--rank {item}: {base} is per SLO class: {base}:CLASS")
            metric = PER_CLASS[base]
        elif base in SCALAR and not cls:
            metric = SCALAR[base]
        else:
            known = sorted([*PER_CLASS, *SCALAR])
            close = difflib.get_close_matches(base, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else f" (one of {', '.join(known)})"
            raise RankError(f"--rank {item}: unknown metric{hint}")
        higher = metric in HIGHER_IS_BETTER if not sign else sign == "+"
        keys.append(RankKey(item, metric, cls or None, higher))
    if not keys:
        raise RankError("--rank: give at least one metric, e.g. wait_p99:interactive,gpu_hours")
    return keys


def order(keys: list[RankKey], variants: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """The labels of `variants` (label, metrics), best first."""

    def sort_key(item: tuple[int, tuple[str, dict[str, Any]]]):
        i, (_, metrics) = item
        parts = []
        for k in keys:
            v = k.value(metrics)
            parts.append((v is None, 0.0 if v is None else (-v if k.higher_is_better else v)))
        return (*parts, i)

    return [label for _, (label, _) in sorted(enumerate(variants), key=sort_key)]


def cell(key: RankKey, metrics: dict[str, Any]) -> str:
    from gpuledger.replay.compare import human_duration

    v = key.value(metrics)
    if v is None:
        return "n/a"
    if key.metric in DURATIONS:
        return human_duration(v)
    return f"{v:.3f}" if isinstance(v, float) else str(v)


def table(
    keys: list[RankKey],
    references: list[tuple[str, dict[str, Any]]],
    variants: list[tuple[str, dict[str, Any]]],
) -> tuple[list[str], list[list[str]]]:
    """Header and rows: the references first (rank `-`), then the variants best first."""
    header = ["rank", "variant", *(k.text for k in keys)]
    rows = [["-", label, *(cell(k, m) for k in keys)] for label, m in references]
    by_label = dict(variants)
    for i, label in enumerate(order(keys, variants), 1):
        rows.append([str(i), label, *(cell(k, by_label[label]) for k in keys)])
    return header, rows
