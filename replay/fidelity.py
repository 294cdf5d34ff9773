"""Fidelity: how far the baseline (gpuledger replaying a history under its recorded
configuration) is from what the history observed, and whether a variant's effect is larger
than that distance.

A what-if is a difference, variant - baseline; it means something only where the baseline
reproduces what happened. This module compares the observed column (`replay.observed`,
measured by `metrics.measure_observed`) with the baseline replay (`metrics.measure`), metric
by metric, against documented tolerances (`TOLERANCES`, docs/whatif.md "Fidelity"):

- final states (jobs completed, failed, of which timeout, cancelled, rejected, unfinished,
  never started): exact;
- preemptions: within 1;
- GPU-hours: within 2 % of the observed value;
- waits p50 / p99, overall, per SLO class, tenant, partition and user: within
  max(30 % of the observed value, 15 s); a group with a value on one side only is outside.

The per-job wait error joins the two runs job by job (same job ids: an array's tasks are jobs)
over the jobs that started in both: |baseline wait - observed wait|, its median and mean.
It is reported, not flagged: it is the noise floor effects are read against.

A variant's effect on a metric is variant - baseline; the baseline's error on that metric is
|its gap| (for a wait, at least the per-job median error). An effect whose size is below that
error is marked: the replay cannot tell it from the baseline's own error.
Pure functions of the summaries; nothing here replays or reads files.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from gpuledger.replay.compare import Summary, human_duration
from gpuledger.replay.metrics import DIMENSIONS, percentile


@dataclass(frozen=True)
class Tolerance:
    """How far the baseline may be from observed: max(`absolute`, `relative` x |observed|)."""

    rule: str
    absolute: float = 0.0
    relative: float = 0.0

    def allowed(self, observed: float) -> float:
        return max(self.absolute, self.relative * abs(observed))


TOLERANCES = {
    "states": Tolerance("exact"),
    "preemptions": Tolerance("±1", absolute=1),
    "gpu_hours": Tolerance("2 %", relative=0.02),
    "waits": Tolerance("max(30 %, 15 s)", absolute=15.0, relative=0.30),
}
"""The tolerance of each kind of metric (documented in docs/whatif.md, "Fidelity")."""

STATES = ("completed", "failed", "timeout", "cancelled", "rejected", "unfinished")


@dataclass(frozen=True)
class Gap:
    """One metric: observed, baseline, their gap (baseline - observed) and the tolerance."""

    label: str
    """The row label, the same as `compare.rows` uses for the same metric."""
    kind: str
    """`count`, `hours` or `seconds` (how values print)."""
    group: str
    """`states`, `preemptions`, `gpu_hours` or `waits` (its tolerance)."""
    observed: float | None
    baseline: float | None

    @property
    def gap(self) -> float | None:
        if self.observed is None or self.baseline is None:
            return None
        return self.baseline - self.observed

    @property
    def allowed(self) -> float | None:
        return None if self.observed is None else TOLERANCES[self.group].allowed(self.observed)

    @property
    def within(self) -> bool | None:
        """True inside the tolerance; False outside or on one side only; None: no value."""
        if self.observed is None and self.baseline is None:
            return None
        gap, allowed = self.gap, self.allowed
        if gap is None or allowed is None:
            return False
        return abs(gap) <= allowed + 1e-9

    def as_dict(self) -> dict[str, Any]:
        return {
            "metric": self.label,
            "observed": self.observed,
            "baseline": self.baseline,
            "gap": self.gap,
            "tolerance": TOLERANCES[self.group].rule,
            "allowed": self.allowed,
            "within": self.within,
        }


@dataclass(frozen=True)
class WaitError:
    """The per-job wait error over the jobs that started in both runs."""

    jobs: int
    median_s: float | None
    mean_s: float | None
    only_baseline: int
    """Jobs that started in the baseline and never did in the observed history."""
    only_observed: int
    """Jobs that started in the observed history and never did in the baseline."""
    examples: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())
    """The first `EXAMPLES` ids (sorted) of each of those two sets, to look them up."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "jobs": self.jobs,
            "median_s": self.median_s,
            "mean_s": self.mean_s,
            "started_only_in_baseline": self.only_baseline,
            "started_only_in_observed": self.only_observed,
            "started_only_in_baseline_first": list(self.examples[0]),
            "started_only_in_observed_first": list(self.examples[1]),
        }

    def text(self) -> str:
        return (
            f"per-job wait error over {self.jobs} jobs started in both: median "
            f"{human_duration(self.median_s)}, mean {human_duration(self.mean_s)}; started only "
            f"in the baseline {self.only_baseline}, only observed {self.only_observed}"
        )


def wait_error(
    observed: Summary, baseline: Summary, jobs: Iterable[str] | None = None
) -> WaitError:
    """|baseline wait - observed wait| per job started in both (restricted to `jobs`)."""
    ow, bw = observed.jobs.wait_s, baseline.jobs.wait_s
    keep = set(ow) | set(bw) if jobs is None else set(jobs)
    both = sorted(j for j in keep if j in ow and j in bw)
    errs = [abs(bw[j] - ow[j]) for j in both]
    known = set(observed.jobs.groups) - observed.jobs.unmeasured  # recorded, wait measurable
    only_b = sorted(j for j in keep if j in bw and j not in ow and j in known)
    only_o = sorted(j for j in keep if j in ow and j not in bw)
    return WaitError(
        jobs=len(both),
        median_s=percentile(errs, 0.5),
        mean_s=sum(errs) / len(errs) if errs else None,
        only_baseline=len(only_b),
        only_observed=len(only_o),
        examples=(tuple(only_b[:EXAMPLES]), tuple(only_o[:EXAMPLES])),
    )


EXAMPLES = 20
"""How many ids of the jobs started in one run only `--json` lists, per side."""


def _values(m: dict[str, Any]) -> list[tuple[str, str, str, float | None]]:
    """(label, kind, group, value) of every fidelity metric one metrics dict has."""
    out: list[tuple[str, str, str, float | None]] = [
        ("jobs submitted", "count", "states", m["jobs"]["submitted"])
    ]
    for s in STATES:
        value = m.get("jobs_timeout") if s == "timeout" else m["jobs"].get(s)
        out.append((f"jobs {s}", "count", "states", value))
    out.append(("jobs never started", "count", "states", sum(m["never_placed_by_class"].values())))
    out.append(("preemptions", "count", "preemptions", m["preemptions"]))
    out.append(("GPU-hours", "hours", "gpu_hours", m.get("gpu_hours")))
    return out


def _waits(m: dict[str, Any]) -> dict[str, float | None]:
    """Wait rows of one metrics dict: label -> value (labels as `compare.rows` prints them)."""
    out: dict[str, float | None] = {}
    for q in ("p50", "p99"):
        out[f"wait {q} (all jobs)"] = m.get(f"wait_s_{q}")
    for c in sorted(m["wait_s_p50_by_class"]):
        for q in ("p50", "p99"):
            out[f"wait {q} {c}"] = m[f"wait_s_{q}_by_class"].get(c)
    for dim in DIMENSIONS:
        for g in sorted(m.get(f"wait_s_p50_by_{dim}", {})):
            for q in ("p50", "p99"):
                out[f"wait {q} {dim} {g}"] = m[f"wait_s_{q}_by_{dim}"].get(g)
    return out


def gaps(observed: dict[str, Any], baseline: dict[str, Any]) -> list[Gap]:
    """Every fidelity metric of two metrics dicts, in reading order."""
    rows = [
        Gap(label, kind, group, o, b)
        for (label, kind, group, o), (_, _, _, b) in zip(
            _values(observed), _values(baseline), strict=True
        )
    ]
    ow, bw = _waits(observed), _waits(baseline)
    labels = list(ow) + [k for k in bw if k not in ow]
    order = {k: i for i, k in enumerate(sorted(labels, key=_wait_order))}
    for label in sorted(labels, key=order.__getitem__):
        rows.append(Gap(label, "seconds", "waits", ow.get(label), bw.get(label)))
    return rows


def _wait_order(label: str) -> tuple[int, str, str]:
    """All jobs, then classes, tenants, partitions, users; p50 before p99 of each group."""
    words = label.split(" ", 2)
    rest = words[2]
    rank = 0 if rest == "(all jobs)" else 1
    dim = rest.split(" ", 1)[0] if rank else ""
    if dim in DIMENSIONS:
        rank = 2 + DIMENSIONS.index(dim)
        rest = rest.split(" ", 1)[1]
    return (rank, rest, words[1])


@dataclass(frozen=True)
class Fidelity:
    """The baseline's gap to observed, metric by metric, and its per-job wait error."""

    gaps: list[Gap]
    error: WaitError

    @property
    def outside(self) -> list[Gap]:
        return [g for g in self.gaps if g.within is False]

    def error_of(self, label: str) -> float | None:
        """The baseline's error on the metric of `label` (None: not known)."""
        for g in self.gaps:
            if g.label == label:
                gap = g.gap
                if g.group == "waits":
                    floor = self.error.median_s
                    if gap is None:
                        return floor
                    return max(abs(gap), floor or 0.0)
                return None if gap is None else abs(gap)
        return None

    def as_dict(self) -> dict[str, Any]:
        return {
            "tolerances": {k: t.rule for k, t in TOLERANCES.items()},
            "metrics": [g.as_dict() for g in self.gaps],
            "outside_tolerance": [g.label for g in self.outside],
            "wait_error": self.error.as_dict(),
        }


def fidelity(observed: Summary, baseline: Summary) -> Fidelity:
    return Fidelity(gaps(observed.metrics, baseline.metrics), wait_error(observed, baseline))


def metric_values(m: dict[str, Any]) -> dict[str, tuple[str, float | None]]:
    """Label -> (kind, value) of every fidelity metric of one metrics dict."""
    out = {label: (kind, v) for label, kind, _, v in _values(m)}
    out.update({label: ("seconds", v) for label, v in _waits(m).items()})
    return out


ERROR_MARK = " (< error)"
"""How a table marks an effect smaller than the baseline's error on its metric (`below_error`)."""


def below_error(f: Fidelity | None, label: str, effect: float | None) -> bool | None:
    """Whether a non-zero effect on `label` is smaller than the baseline's error there
    (None: no error known, or no effect)."""
    if f is None or effect is None or effect == 0:
        return None
    error = f.error_of(label)
    return None if error is None else abs(effect) < error


def effects(
    variant: dict[str, Any],
    baseline: dict[str, Any] | None,
    observed: dict[str, Any] | None,
    f: Fidelity | None,
) -> dict[str, dict[str, Any]]:
    """Per fidelity metric of a variant: its value, variant - baseline, variant - observed,
    and whether the first is below the baseline's error (`below_error`)."""
    vv = metric_values(variant)
    bv = metric_values(baseline) if baseline is not None else {}
    ov = metric_values(observed) if observed is not None else {}
    out: dict[str, dict[str, Any]] = {}
    for label, (_, value) in vv.items():
        b = bv.get(label, ("", None))[1]
        o = ov.get(label, ("", None))[1]
        vs_b = None if value is None or b is None else value - b
        vs_o = None if value is None or o is None else value - o
        out[label] = {
            "value": value,
            "vs_baseline": vs_b,
            "vs_observed": vs_o,
            "below_baseline_error": below_error(f, label, vs_b),
        }
    return out


# ---------------------------------------------------------------------------- text


def value_text(kind: str, value: float | None) -> str:
    if value is None:
        return "n/a"
    if kind == "seconds":
        return human_duration(value)
    if kind == "hours":
        return f"{value:.2f}" if abs(value) >= 1 or value == 0 else f"{value:.4f}"
    return f"{value:g}"


def delta_text(kind: str, value: float | None) -> str:
    if value is None:
        return "n/a"
    text = value_text(kind, value)
    return text if value < 0 or text.startswith("-") else f"+{text}"


def status_text(g: Gap) -> str:
    if g.within is None:
        return ""
    if g.within:
        return "ok"
    if g.observed is None or g.baseline is None:
        return "OUTSIDE (one side only)"
    return "OUTSIDE"


def tolerance_text(g: Gap) -> str:
    allowed = g.allowed
    rule = TOLERANCES[g.group].rule
    if allowed is None or g.group in ("states", "preemptions"):
        return rule
    return f"{rule} = {value_text(g.kind, allowed)}"


def table_rows(f: Fidelity, limit: int | None = None) -> list[list[str]]:
    """METRIC, OBSERVED, BASELINE, GAP, TOLERANCE, STATUS rows. With `limit`, a dimension
    (tenant, partition, user) with more groups than that shows only its rows outside the
    tolerance, and one line says how many were left out (all are in `--json` and the report)."""
    counts = groups_by_dimension(g.label for g in f.gaps)
    out: list[list[str]] = []
    hidden: dict[str, int] = {}
    for g in f.gaps:
        dim = dimension_of(g.label)
        if limit is not None and dim and len(counts[dim]) > limit and g.within is not False:
            hidden[dim] = hidden.get(dim, 0) + 1
            continue
        out.append(
            [
                g.label,
                value_text(g.kind, g.observed),
                value_text(g.kind, g.baseline),
                delta_text(g.kind, g.gap),
                tolerance_text(g),
                status_text(g),
            ]
        )
    for dim, n in hidden.items():
        out.append([f"({n} wait rows by {dim} within tolerance not shown)", "", "", "", "", ""])
    return out


FIDELITY_HEADER = ["metric", "observed", "baseline", "gap", "tolerance", "status"]


def dimension_of(label: str) -> str | None:
    """`tenant` for `wait p50 tenant physics` (a wait row of a dimension), else None."""
    words = label.split(" ", 3)
    if len(words) == 4 and words[0] == "wait" and words[2] in DIMENSIONS:
        return words[2]
    return None


def groups_by_dimension(labels: Iterable[str]) -> dict[str, set[str]]:
    """Dimension -> the groups its wait rows name, over row labels."""
    out: dict[str, set[str]] = {}
    for label in labels:
        dim = dimension_of(label)
        if dim:
            out.setdefault(dim, set()).add(label.split(" ", 3)[3])
    return out


def trim_groups(rows: list[list[str]], limit: int) -> list[list[str]]:
    """Table rows (label first) without the wait rows of a dimension that has more than
    `limit` groups, and one line per dimension saying how many were left out."""
    groups = groups_by_dimension(r[0] for r in rows)
    wide = {d for d, g in groups.items() if len(g) > limit}
    out = [r for r in rows if dimension_of(r[0]) not in wide]
    for d in sorted(wide):
        note = f"({len(groups[d])} {d}s: their wait rows are in --json and the report)"
        out.append([note, *([""] * (len(rows[0]) - 1))])
    return out


def summary_line(f: Fidelity) -> str:
    """One line: how many metrics are outside their tolerance, and the per-job error."""
    judged = [g for g in f.gaps if g.within is not None]
    return (
        f"fidelity: {len(f.outside)} of {len(judged)} metrics outside tolerance; " + f.error.text()
    )
