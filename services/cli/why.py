"""`gpuledger why JOB`: why a job is pending, or why it was preempted."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated, Any

import typer

from gpuledger.projections.queries import (
    UnknownJob,
    preemption_outlook,
    why_report,
)
from gpuledger.services.cli.common import fail
from gpuledger.services.cli.output import (
    _emit_structured,
    _json_default,
    humanize_ms,
)
from gpuledger.services.cli.reading import (
    DEFAULT_DATA,
    DataOption,
    DbOption,
    _connect,
    _undamaged,
    db_path,
    tenant_key,
)


class WhyOutput(StrEnum):
    text = "text"
    json = "json"
    yaml = "yaml"


# ---------------------------------------------------------------- why


def _fmt_details(d: Any, indent: str = "    ") -> list[str]:
    if not d:
        return []
    if isinstance(d, dict):
        lines = []
        for k, v in d.items():
            if isinstance(v, (dict, list)):
                lines.append(f"{indent}{k}: {json.dumps(v, default=_json_default)}")
            else:
                lines.append(f"{indent}{k}: {v}")
        return lines
    return [f"{indent}{json.dumps(d, default=_json_default)}"]


def refused_lines(refused: list[dict[str, Any]]) -> list[str]:
    """One line per refused request naming the job (conflicting submission, unknown cancel)."""
    return [
        f"Refused:   {x['request']} at seq {x['request_seq']} from {x['tenant']}: "
        f"{x['reason']}: {x['message']}"
        for x in refused
    ]


def refusal_text(x: dict[str, Any]) -> str:
    """One refused event, as `why` shows it."""
    return (
        f"{x['event']} (seq {x['seq']}, from {x['producer'] or '?'}): {x['code']}: "
        f"{x['message']}; the ledger and this projection ignore it"
    )


def _why_header(r: dict[str, Any]) -> list[str]:
    """Job, tenant, user, class, priority, size; state and age; reason and message."""
    lines = [
        f"Job:       {r['job']}  (tenant {r['tenant']}, user {r.get('user') or '-'}, class {r['priority_class'] or '-'}, "
        f"priority {'-' if r['priority'] is None else r['priority']}, {r['gpus']} GPUs)",
        f"State:     {r.get('state_text') or r['state']}"
        + (
            f" for {humanize_ms((r['age_s'] or 0) * 1000)} since submission"
            if r.get("age_s") is not None
            else ""
        ),
    ]
    if r["reason"]:
        lines.append(f"Reason:    {r['reason']}")
    if r["message"]:
        lines.append(f"Message:   {r['message']}")
    return lines


def _why_service(s: dict[str, Any] | None) -> list[str]:
    """A service's replicas (running, being preempted, pending) and its disruption budget."""
    if not s:
        return []
    lines = [
        f"Replicas:  {s['running']} running, {s['preempting']} being preempted, {s['pending']} "
        f"pending of {s['replicas']} wanted"
        + (f"; {s['stopping']} stopping" if s["stopping"] else ""),
        f"Budget:    min_available {s['min_available']}: at most {s['disruption_budget']} down "
        f"at once by preemption; {s['evictable_now']} more may be evicted now",
    ]
    for x in s["replica_states"]:
        if x["state"] in ("pending", "preempting"):
            lines.append(
                f"           {x['replica']}: {x['state']}"
                + (f" ({x['reason']})" if x["reason"] else "")
            )
    return lines


def _why_pending(p: dict[str, Any] | None) -> list[str]:
    """How long, where in the queue, whether preemption would help, the node histogram."""
    if not p:
        return []
    lines = [
        f"Waiting:   {humanize_ms(p['waiting_s'] * 1000)}; queue position {p['queue_position']}"
    ]
    lines += preemption_outlook(p)
    if p["node_histogram"]:
        hist = p["node_histogram"]
        if isinstance(hist, dict):
            lines.append("Nodes:     " + ", ".join(f"{v} {k}" for k, v in hist.items()))
        else:
            lines.append(f"Nodes:     {json.dumps(hist)}")
    return lines


def _why_details(r: dict[str, Any]) -> list[str]:
    """The decision's details not already shown by the pending block."""
    shown = (
        {"queue_position", "preemption_would_help", "nodes", "node_histogram"}
        if r.get("pending")
        else set()
    )
    rest = (
        {k: v for k, v in r["details"].items() if k not in shown}
        if isinstance(r["details"], dict)
        else r["details"]
    )
    return ["Details:", *_fmt_details(rest)] if rest else []


_ON_NODE = {
    "cordoned": "it runs on",
    "draining": "it leaves once it may (reason Drain; `gpuledger node drain --wait` names what "
    "holds it)",
    "maintenance": "it leaves (reason Drain)",
}


def _why_allocation(r: dict[str, Any]) -> list[str]:
    """The allocation, and each of its nodes out of service (the `node_status` view)."""
    a = r.get("allocation")
    if not a:
        return []
    lines = [f"Allocation: {a['id']} on {a['nodes']} ({a['gpus']} GPUs)"]
    for n in a.get("nodes_out") or ():
        held = "" if n["for_ms"] is None else f" for {humanize_ms(n['for_ms'])}"
        said = f" ({n['reason']})" if n["reason"] else ""
        what = _ON_NODE.get(n["status"])
        lines.append(
            f"Node:      {n['node']} {n['status']}{held}{said}" + (f": {what}" if what else "")
        )
    return lines


def _alternative_lines(alts: Any) -> list[str]:
    """The victim sets the preemption service considered and why it rejected each."""
    if not alts:
        return []
    lines = ["    alternatives considered and rejected:"]
    for alt in alts if isinstance(alts, list) else [alts]:
        if isinstance(alt, dict):
            victims = alt.get("victims", alt.get("victim", "?"))
            why = alt.get("rejected", alt.get("reason", alt.get("why", "")))
            lines.append(f"      - {json.dumps(victims)}: {why}")
        else:
            lines.append(f"      - {json.dumps(alt)}")
    return lines


def _preemption_lines(i: int, x: dict[str, Any]) -> list[str]:
    """One preemption the job suffered: by whom, why, the lost work, the alternatives."""
    from gpuledger.events.reasons import PreemptionReason

    lost = x["lost_gpu_seconds"]
    resized = (x.get("details") or {}).get("resized") if x["outcome"] == "shrunk" else None
    what = (
        f"Migrated #{i}: for {x['by']}"
        if x["reason"] == PreemptionReason.Consolidate
        else f"Preempted #{i}: shrunk from {resized['from']} to {resized['to']} members by {x['by']}"
        if resized
        else f"Preempted #{i}: by {x['by']}"
        if x["by"]
        else f"Evicted #{i}: by the operator"  # a drain (docs/operators-day.md)
    )
    by = f" (tenant {x['by_tenant']}, priority {x['by_priority']})," if x["by"] else ","
    lines = [
        f"{what}{by} reason {x['reason']}, allocation {x['allocation']}, outcome {x['outcome']}"
    ]
    if x["message"]:
        lines.append(f"    why:          {x['message']}")
    lines.append(
        f"    lost work:    {lost:.0f} GPU-seconds ({lost / 3600:.2f} GPU-hours); "
        f"checkpointed: {'yes' if x['checkpointed'] else 'no'}"
        + (
            f"; resumes from {x['saved_progress_s']:.0f}s of progress"
            if x["saved_progress_s"]
            else ""
        )
    )
    return lines + _alternative_lines(x["alternatives"])


def _why_preemptions(r: dict[str, Any]) -> list[str]:
    """Preemptions the job suffered, then the ones it caused."""
    from gpuledger.events.reasons import PreemptionReason

    lines: list[str] = []
    for i, x in enumerate(r["preempted"], 1):
        lines += _preemption_lines(i, x)
    for x in r["preempted_others"]:
        consolidated = x["reason"] == PreemptionReason.Consolidate
        verb = "Migrated" if consolidated else "Preempted"  # prose, not a code
        lines.append(
            f"{verb} {x['victim']} ({x['reason']}, lost {x['lost_gpu_seconds']:.0f} GPU-seconds)"
        )
    return lines


def _why_defrag(r: dict[str, Any]) -> list[str]:
    """Consolidations and MIG re-geometries decided for the job (issue 16)."""
    return [f"Defrag:    {x['message']}" for x in r.get("defrag") or ()]


def _why_history(r: dict[str, Any]) -> list[str]:
    if not r["transitions"]:
        return []
    return [
        "History:   "
        + " -> ".join(
            t["to"] + (f"({t['reason']})" if t["reason"] else "") for t in r["transitions"]
        )
    ]


def render_why(r: dict[str, Any]) -> str:
    """The `why` report as text: header, pending block, details, allocation, preemptions,
    refused requests, history (each a named step; a missing part prints nothing)."""
    lines = [
        *_why_header(r),
        *_why_service(r.get("service")),
        *_why_pending(r.get("pending")),
        *_why_details(r),
        *_why_allocation(r),
        *_why_preemptions(r),
        *_why_defrag(r),
        *refused_lines(r.get("refused") or []),
        *(f"Refused:   {refusal_text(x)}" for x in r.get("refusals") or ()),
        *_why_history(r),
    ]
    return "\n".join(lines)


def why_command(
    job: Annotated[str, typer.Argument(help="Job id.")],
    output: Annotated[
        WhyOutput, typer.Option("-o", "--output", help="text, json or yaml.")
    ] = WhyOutput.text,
    db: DbOption = None,
    data: DataOption = DEFAULT_DATA,
    tenant: Annotated[
        str | None,
        typer.Option(
            "--tenant",
            help="The job's tenant: JOB is then the id that tenant submitted (job ids are per "
            "tenant; `jobs` shows a later tenant's job of a taken id under its key, ID~~DIGEST).",
        ),
    ] = None,
) -> None:
    """Why is JOB pending (reason, message, node histogram, queue position, whether
    preemption would help) or why was it preempted (by whom, why, lost work, alternatives)?"""
    path = db_path(db, data)
    con = _connect(path)
    try:
        with _undamaged(path):
            key = job if tenant is None else tenant_key(con, tenant, job)
            if key is None:
                fail(f"no job {job!r} of tenant {tenant!r} in the projection at {path}", 1)
            report = why_report(con, key)
    except UnknownJob as unknown:
        typer.echo(f"error: no job {job!r} in the projection at {path}", err=True)
        for line in refused_lines(unknown.refused):  # e.g. a refused cancel of this id
            typer.echo(line, err=True)
        for x in unknown.refusals:  # e.g. a submission on another tenant's subject
            typer.echo(f"Refused:   {refusal_text(x)}", err=True)
        raise typer.Exit(1) from None
    finally:
        con.close()
    if output == WhyOutput.text:
        typer.echo(render_why(report))
    else:
        _emit_structured(report, output.value)
