"""The `simulate --json` report: per-job outcome (from the folded ledger) and run-level
metrics (`replay.metrics`, the same numbers `compare` prints for the log). Keys are a contract
read by tools and CI (add, never rename)."""

from __future__ import annotations

from typing import Any

from gpuledger.events import Event
from gpuledger.replay.metrics import measure
from gpuledger.services.domain.fold.ledger import Ledger

_STATE = {"submitted": "pending", "evicted": "pending", "preempting": "running"}


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
                            {
                                "node": m.node,
                                "gpus": list(m.gpus),
                                "gpu_milli": m.gpu_milli,
                                "mig_profile": m.mig_profile,
                            }
                            for m in members
                        ],
                    }
                    for at, members in job.placements
                ],
                "preemptions": [
                    {
                        "at_s": p.at_ms / 1000,
                        "by": p.by,
                        "reason": p.reason,
                        "checkpointed": p.checkpointed,
                        "lost_gpu_s": p.lost_gpu_ms / 1000,
                    }
                    for p in job.preemptions
                ],
                "completed_at_s": job.finished_ms / 1000 if job.state == "completed" else None,
                **({"tasks": job.spec.array.count} if job.spec.array else {}),
                **(
                    {"tasks_unrecorded": {"pending": w.unreleased, "cancelled": w.dropped}}
                    if (w := job.window) is not None
                    else {}
                ),
            }
        )
    return rows


def jobs_text(rows: list[dict[str, Any]]) -> str:
    """`N jobs (M arrays) {state: count}` of `job_rows`: an array's tasks are jobs, the array
    itself is not counted once more (as `sacct` lists them, and as the run metrics count)."""
    states: dict[str, int] = {}
    arrays = 0
    parents = {str(j["id"]).split("@", 1)[0] for j in rows if "@" in str(j["id"])}
    for j in rows:
        n = 1
        if "tasks" in j:
            arrays += 1
            for state, k in (j.get("tasks_unrecorded") or {}).items():  # no row each
                if k:
                    states[state] = states.get(state, 0) + k
            if j["id"] in parents:
                continue
            n = j["tasks"]  # never had tasks (rejected): its tasks, as `metrics.job_counts`
        states[str(j["state"])] = states.get(str(j["state"]), 0) + n
    jobs = sum(states.values())
    return f"{jobs} jobs" + (f" ({arrays} arrays)" if arrays else "") + f" {states}"


def metrics(log: list[tuple[int, str, Event]]) -> dict[str, Any]:
    """The run metrics of the log (definitions in `replay.metrics`, shared with `compare`)."""
    return measure(log).metrics


def report(
    ledger: Ledger,
    log: list[tuple[int, str, Event]],
    final_ms: int,
    measured: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The report; `measured`: the log's metrics when the caller already computed them
    (`replay` measures once, with the observed history's groups)."""
    return {
        "final_time_s": final_ms / 1000,
        "events": len(log),
        "jobs": job_rows(ledger),
        "metrics": metrics(log) if measured is None else measured,
    }
