"""`gpuledger bench arrays`: bounded work per tenant (issue 44, item 4). One tenant (`flood`,
its submit limits lifted) submits `arrays` arrays of `tasks` one-GPU tasks at once; another
(`other`) submits jobs within its guarantee throughout. The same timeline runs three times
in one process, through the simulator (every service, one fold): `idle` (no arrays),
`small` (arrays of as many tasks as the cluster holds at once: 32, every one released, the
cluster just as busy) and `flood`.

Per run: the other tenant's submit -> placed in simulated time (p50, p99: the decisions) and
in wall time (p50, p99: the time the services took between its submission and its
placement, in this process), the most job records the fold held (the simulator folds one ledger for all services), the decides' wall time, and
the process's resident memory after the run (peak RSS only grows, so each run's figure is
read as the RSS then). The figures are ratios against `idle` measured in the same run:
absolute times depend on the machine and its load.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

NODES = 4
"""8-GPU nodes of the cluster (32 GPUs): each tenant is guaranteed 16."""


def document(
    arrays: int, tasks: int, others: int, until_s: int, borrow: bool = False
) -> dict[str, Any]:
    """The scenario: `arrays` arrays of `tasks` one-GPU, one-hour tasks from `flood` at 0;
    `others` two-GPU, ten-minute jobs from `other`, one every 3 minutes from 1 minute (at
    most 4 at once: 8 GPUs, half its guarantee). `flood` may use its guarantee only, unless
    `borrow`: then it fills the cluster and the other's jobs reclaim their guarantee (after
    the borrowed tasks' minimum runtime, `policy.min_runtime_s`)."""
    timeline: list[dict[str, Any]] = [
        {
            "at": 0,
            "submit": {
                "id": f"sweep-{a}",
                "tenant": "flood",
                "gpus": 1,
                "duration": "1h",
                "array": {"count": tasks},
            },
        }
        for a in range(arrays)
    ]
    timeline += [
        {
            "at": 60 + 180 * i,
            "submit": {"id": f"job-{i}", "tenant": "other", "gpus": 2, "duration": "10m"},
        }
        for i in range(others)
    ]
    return {
        "name": f"arrays-{arrays}x{tasks}",
        "cluster": {
            "nodes": [{"name": f"gpu-{n}", "gpus": 8, "model": "H100-80GB"} for n in range(NODES)]
        },
        "tenants": [
            {
                "name": "flood",
                "guaranteed": 16,
                **({} if borrow else {"limit": 16}),
                "limits": {"submit_jobs": None, "array_size": None},
            },
            {"name": "other", "guaranteed": 16},
        ],
        "until": until_s,
        "timeline": timeline,
    }


@dataclass
class Run:
    label: str
    tasks_queued: int
    other_placed: int
    other_sim_p50_s: float
    other_sim_p99_s: float
    other_wall_p50_ms: float
    other_wall_p99_ms: float
    wall_s: float
    events: int
    max_job_records: int
    rss_mib: float


@dataclass
class Report:
    arrays: int
    tasks: int
    others: int
    borrow: bool
    runs: list[Run] = field(default_factory=list)
    ratios: dict[str, dict[str, float]] = field(default_factory=dict)
    """Per run: its figures over `idle`'s (p99 sim and wall, RSS, job records)."""
    peak_rss_mib: float = 0.0


def _rss_mib() -> float:
    """Resident memory of this process now (Linux `/proc/self/statm`; else peak RSS)."""
    try:
        import os

        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError):
        return _peak_rss_mib()


def _peak_rss_mib() -> float:
    import resource
    import sys

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def run_one(label: str, doc: dict[str, Any]) -> Run:
    """Simulate `doc` and measure the other tenant's waits, the folds' size and the RSS."""
    from gpuledger import events as ev
    from gpuledger.replay.scenario import from_document
    from gpuledger.replay.simulator import Simulator, standard_services

    scenario = from_document(doc, doc["name"])
    sim = Simulator(standard_services(scenario.nodes))
    ledger = sim.ledger
    submitted: dict[str, tuple[int, float]] = {}
    placed: dict[str, tuple[int, float]] = {}
    most = [0]

    def watch(seq: int, subject: str, event: ev.Event) -> None:
        if isinstance(event, ev.JobSubmitted) and event.job.tenant == "other":
            submitted[event.job.job_id] = (event.occurred_at_ms, time.perf_counter())
        elif isinstance(event, ev.GangPlaced) and event.tenant == "other":
            placed.setdefault(event.job_id, (event.occurred_at_ms, time.perf_counter()))
        if seq % 256 == 0:
            most[0] = max(most[0], len(ledger.jobs))

    sim.on_event = watch
    gc.collect()
    start = time.perf_counter()
    for event in scenario.config:
        sim.publish(event)
    sim.schedule(scenario.inputs)
    sim.run(scenario.until_ms)
    wall = time.perf_counter() - start
    most[0] = max(most[0], len(sim.ledger.jobs))
    sim_waits = [(placed[j][0] - submitted[j][0]) / 1000 for j in placed if j in submitted]
    wall_waits = [(placed[j][1] - submitted[j][1]) * 1000 for j in placed if j in submitted]
    rss = _rss_mib()
    queued = sum(
        s["submit"].get("array", {}).get("count", 0) for s in doc["timeline"] if "submit" in s
    )
    out = Run(
        label=label,
        tasks_queued=queued,
        other_placed=len(sim_waits),
        other_sim_p50_s=_pct(sim_waits, 0.5),
        other_sim_p99_s=_pct(sim_waits, 0.99),
        other_wall_p50_ms=round(_pct(wall_waits, 0.5), 3),
        other_wall_p99_ms=round(_pct(wall_waits, 0.99), 3),
        wall_s=round(wall, 3),
        events=len(sim.log),
        max_job_records=most[0],
        rss_mib=round(rss, 1),
    )
    return out


def run(
    arrays: int = 3,
    tasks: int = 100_000,
    others: int = 20,
    progress: Callable[[Run], None] | None = None,
    borrow: bool = False,
) -> Report:
    """The three runs (`idle`, `small`, `flood`) and their ratios over `idle`."""
    until_s = 60 + 180 * others + 1800
    report = Report(arrays, tasks, others, borrow)
    run_one("warm-up", document(1, 8, 2, 600))  # imports and first-use costs: not measured
    for label, n, size in (
        ("idle", 0, tasks),
        ("small", arrays, min(tasks, NODES * 8)),
        ("flood", arrays, tasks),
    ):
        r = run_one(label, document(n, size, others, until_s, borrow))
        report.runs.append(r)
        if progress is not None:
            progress(r)
    idle = report.runs[0]
    for r in report.runs:
        report.ratios[r.label] = {
            "other_sim_p99": _ratio(r.other_sim_p99_s, idle.other_sim_p99_s),
            "other_wall_p99": _ratio(r.other_wall_p99_ms, idle.other_wall_p99_ms),
            "rss": _ratio(r.rss_mib, idle.rss_mib),
            "job_records": _ratio(r.max_job_records, idle.max_job_records),
        }
    report.peak_rss_mib = round(_peak_rss_mib(), 1)
    return report


def _ratio(a: float, b: float) -> float:
    if b == 0:
        return 1.0 if a == 0 else float("inf")
    return round(a / b, 3)
