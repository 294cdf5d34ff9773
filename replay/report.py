"""The `simulate --json` report: per-job outcome and run-level metrics, from a folded ledger
and its log. Keys are a contract read by tools and CI (add, never rename)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from events import (
    Event,
    GangCompleted,
    GangEvicted,
    GangFailed,
    GangPlaced,
    NodeRegistered,
    PreemptionDeclined,
)
from services.domain.ledger import Ledger

_STATE = {"submitted": "pending", "evicted": "pending", "preempting": "running"}


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    k = min(len(values) - 1, max(0, round(q * (len(values) - 1))))
    return values[k]


def job_rows(ledger: Ledger) -> list[dict[str, Any]]:
    rows = []
    for job_id in sorted(ledger.jobs):
        job = ledger.jobs[job_id]
        rows.append(
            {
                "id": job_id,
                "tenant": job.tenant,
                "priority_class": job.spec.priority_class,
                "state": _STATE.get(job.state, job.state),
                "reason": job.reason if job.state not in ("running", "completed") else None,
                "submitted_at_s": job.submitted_ms / 1000,
                "placements": [
                    {
                        "at_s": at / 1000,
                        "members": [
                            {"node": m.node, "gpus": list(m.gpus), "gpu_milli": m.gpu_milli,
                             "mig_profile": m.mig_profile}
                            for m in members
                        ],
                    }
                    for at, members in job.placements
                ],
                "preemptions": [
                    {"at_s": p.at_ms / 1000, "by": p.by, "reason": p.reason,
                     "checkpointed": p.checkpointed, "lost_gpu_s": p.lost_gpu_ms / 1000}
                    for p in job.preemptions
                ],
                "completed_at_s": job.finished_ms / 1000 if job.state == "completed" else None,
            }
        )
    return rows


def metrics(ledger: Ledger, log: list[tuple[int, str, Event]], end_ms: int) -> dict[str, Any]:
    waits: dict[str, list[float]] = defaultdict(list)
    for job in ledger.jobs.values():
        if job.admitted_ms is not None and job.placements:
            waits[job.slo_class or job.spec.priority_class].append((job.placements[0][0] - job.submitted_ms) / 1000)
    # time-weighted allocation: integrate allocated GPU milli over time
    capacity = 0
    allocated = 0
    area = 0
    cap_area = 0
    last_t = 0
    gang_milli: dict[str, int] = {}
    preemptions = 0
    lost_ms = 0
    by_reason: dict[str, int] = defaultdict(int)
    declined: dict[str, int] = defaultdict(int)
    for _, _, e in log:
        t = e.occurred_at_ms
        area += allocated * (t - last_t)
        cap_area += capacity * (t - last_t)
        last_t = t
        if isinstance(e, NodeRegistered):
            capacity += 1000 * len(e.node.gpus)
        elif isinstance(e, GangPlaced):
            rec = ledger.allocations.get(e.allocation_id)
            gang_milli[e.allocation_id] = rec.gpu_milli if rec else 0
            allocated += gang_milli[e.allocation_id]
        elif isinstance(e, (GangCompleted, GangFailed, GangEvicted)):
            allocated -= gang_milli.pop(e.allocation_id, 0)
            if isinstance(e, GangEvicted) and e.reason in ("Priority", "Reclaim", "Backfill", "Defragment"):
                preemptions += 1
                lost_ms += e.lost_gpu_ms
                by_reason[e.reason] += 1
        elif isinstance(e, PreemptionDeclined):
            declined[e.reason] += 1
    area += allocated * max(0, end_ms - last_t)
    cap_area += capacity * max(0, end_ms - last_t)
    return {
        "preemptions": preemptions,
        "lost_gpu_hours": lost_ms / 3_600_000,
        "wait_s_p50_by_class": {k: _pct(v, 0.5) for k, v in sorted(waits.items())},
        "wait_s_p99_by_class": {k: _pct(v, 0.99) for k, v in sorted(waits.items())},
        "gpu_allocation_pct": 100 * area / cap_area if cap_area else 0.0,
        "preemptions_by_reason": dict(sorted(by_reason.items())),
        "preemptions_declined_by_reason": dict(sorted(declined.items())),
    }


def report(ledger: Ledger, log: list[tuple[int, str, Event]], final_ms: int) -> dict[str, Any]:
    return {
        "final_time_s": final_ms / 1000,
        "events": len(log),
        "jobs": job_rows(ledger),
        "metrics": metrics(ledger, log, final_ms),
    }
