"""What the dashboard shows, read from the projection: plain dicts, no HTML. Every function
takes a read-only connection and the tenant the viewer is confined to (None = all)."""

from __future__ import annotations

import re
from typing import Any

from gpuledger import events as ev
from gpuledger.events import sentences
from gpuledger.projections.queries import ARRAY_TASKS, UnknownJob, records, why_report

IDLE_SM_ACTIVE = 0.25
"""An allocated GPU whose latest SM activity is below this counts as idle-but-allocated."""


def natural_key(name: str) -> list:
    return [(0, int(t)) if t.isdigit() else (1, t) for t in re.split(r"(\d+)", name or "") if t]


def tenant_clause(column: str, tenant: str | None) -> tuple[str, list[Any]]:
    """SQL restricting `column` to `tenant` and its children (TRUE for no tenant): equality or
    an exact prefix (`starts_with`), never `LIKE`, where `_` and `%` in a tenant name would
    match other tenants."""
    if not tenant:
        return "TRUE", []
    return f"({column} = ? OR starts_with({column}, ?))", [tenant, tenant.rstrip("/") + "/"]


def in_tenant(value: str | None, tenant: str | None) -> bool:
    return not tenant or value == tenant or (value or "").startswith(tenant.rstrip("/") + "/")


def clock(con) -> dict[str, Any]:
    now, seq = con.execute("SELECT now_ms, last_seq FROM clock").fetchone()
    return {"now_ms": now, "last_seq": seq}


# ---------------------------------------------------------------- cluster


def cluster(con, tenant: str | None) -> dict[str, Any]:
    """Nodes by leaf switch, each node's GPUs by NVLink clique, each GPU with its parts (the
    allocations on it: whole, MIG slice or share), SM activity, and the counts of the legend."""
    gpus = records(
        con.execute("""
        SELECT g.node, g.gpu_index, g.uuid, g.model, g.clique, g.sharing, g.healthy,
               n.leaf_switch, s.status, s.since_ms, s.reason, s.tenant, n.pool,
               coalesce(w.sm_active, NULL) AS sm_active
        FROM gpus g JOIN nodes n USING (node) JOIN node_status s USING (node)
        LEFT JOIN gpu_now w ON w.node = g.node AND w.gpu_index = g.gpu_index
        ORDER BY nullif(n.leaf_switch, '') NULLS LAST, g.node, g.clique, g.gpu_index""")
    )
    parts: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for a in records(
        con.execute("""
            SELECT node, gpu_index, job_id, tenant, sharing, gpu_milli, mig_profile, mig_start,
                   borrowing
            FROM allocations WHERE ended_at_ms IS NULL AND gpu_index >= 0
            ORDER BY node, gpu_index, mig_start NULLS LAST, job_id""")
    ):
        if not in_tenant(a["tenant"], tenant):
            a["job_id"], a["tenant"] = None, "another tenant"
        parts.setdefault((a["node"], a["gpu_index"]), []).append(a)
    counts = {
        "gpus": 0,
        "allocated": 0,
        "partial": 0,
        "active": 0,
        "idle": 0,
        "unmeasured": 0,
        "free": 0,
        "unavailable": 0,
    }
    leaves: dict[str, dict[str, dict[str, list[dict[str, Any]]]]] = {}
    for g in gpus:
        g["parts"] = parts.get((g["node"], g["gpu_index"]), [])
        held = sum(p["gpu_milli"] or 0 for p in g["parts"])
        g["allocated_milli"] = min(1000, held)
        counts["gpus"] += 1
        # a node that takes no work (node_status): its free GPUs are unavailable; what still
        # runs there (a cordon, a drain's runs left) shows as it is
        takes_work = g["status"] in ("ready", "reserved")
        if g["status"] == "lost" or not g["healthy"] or (held == 0 and not takes_work):
            g["kind"] = "unavailable"
        elif held == 0:
            g["kind"] = "free"
        else:
            counts["allocated" if held >= 1000 else "partial"] += 1
            if g["sm_active"] is None:
                g["kind"] = "unmeasured"
            elif g["sm_active"] < IDLE_SM_ACTIVE:
                g["kind"] = "idle"
            else:
                g["kind"] = "active"
        if g["kind"] in counts:
            counts[g["kind"]] += 1
        leaf = g["leaf_switch"] or "none"
        leaves.setdefault(leaf, {}).setdefault(g["node"], {}).setdefault(
            g["clique"] or "-", []
        ).append(g)
    for nodes in leaves.values():  # natural order: gpu-2 before gpu-10
        ordered = sorted(nodes.items(), key=lambda kv: natural_key(kv[0]))
        nodes.clear()
        nodes.update(ordered)
    frag = records(con.execute("SELECT * FROM fragmentation ORDER BY node = '*', node, clique"))
    return {
        "leaves": leaves,
        "statuses": {
            g["node"]: (g["status"], g["since_ms"], g["reason"], g["tenant"]) for g in gpus
        },
        "now_ms": con.execute("SELECT now_ms FROM clock").fetchone()[0],
        "counts": counts,
        "fragmentation": frag,
        "idle_threshold": IDLE_SM_ACTIVE,
    }


# ---------------------------------------------------------------- queue


def queue(
    con, tenant: str | None, *, tenant_filter: str | None = None, class_filter: str | None = None
) -> dict[str, Any]:
    where, args = tenant_clause("w.tenant", tenant)
    w2, a2 = tenant_clause("w.tenant", tenant_filter)
    sql = f"""
        SELECT w.*, (SELECT arg_max(p.beneficiary, p.request_seq) FROM preemptions p
                     WHERE p.victim_job_id = w.job_id) AS last_preemptor,
               (SELECT arg_max(b.tenant, p.request_seq) FROM preemptions p
                  LEFT JOIN jobs b ON b.job_id = p.beneficiary
                 WHERE p.victim_job_id = w.job_id) AS last_preemptor_tenant,
               j.gpu_milli, j.replicas, j.member_gpus, j.member_gpu_milli, j.member_mig_profile
        FROM why_pending w JOIN jobs j USING (job_id)
        WHERE {where} AND {w2} {"AND w.priority_class = ?" if class_filter else ""}
        ORDER BY w.queue_position, w.job_id"""
    rows = records(con.execute(sql, args + a2 + ([class_filter] if class_filter else [])))
    for r in rows:
        if r["last_preemptor"] and not in_tenant(r["last_preemptor_tenant"], tenant):
            r["last_preemptor"] = None
    unreleased = dict(
        con.execute(
            f"WITH {ARRAY_TASKS} SELECT job_id, tasks_unreleased FROM arrays"
            " WHERE tasks_unreleased > 0"
        ).fetchall()
    )
    rows = _arrays_as_one_line(rows, unreleased)
    scope, sargs = tenant_clause("tenant", tenant)
    tenants = [
        t
        for (t,) in con.execute(
            f"SELECT DISTINCT tenant FROM jobs WHERE {scope} AND tenant IS NOT NULL ORDER BY 1",
            sargs,
        ).fetchall()
    ]
    classes = [
        c
        for (c,) in con.execute(
            f"SELECT DISTINCT priority_class FROM jobs WHERE {scope} AND priority_class IS NOT NULL"
            " ORDER BY 1",
            sargs,
        ).fetchall()
    ]
    return {"rows": rows, "tenants": tenants, "classes": classes}


def _arrays_as_one_line(
    rows: list[dict[str, Any]], unreleased: dict[str, int] | None = None
) -> list[dict[str, Any]]:
    """Waiting tasks of one array job (`<array>@<i>`) as one line, at the place of its first
    task in the queue: the array's id, and the first task's reason with the count waiting
    (its tasks not released yet, which have no row, included: `unreleased`)."""
    out: list[dict[str, Any]] = []
    lines: dict[str, dict[str, Any]] = {}
    for r in rows:
        array, sep, index = str(r["job_id"]).rpartition("@")
        if not sep or not index.isdigit():
            out.append(r)
            continue
        line = lines.get(array)
        if line is None:
            line = lines[array] = {**r, "job_id": array, "tasks_waiting": 0, "first": r}
            out.append(line)
        line["tasks_waiting"] += 1
    for array, line in lines.items():
        line["tasks_waiting"] += (unreleased or {}).get(array, 0)
        first = line.pop("first")
        line["message"] = (
            f"{line['tasks_waiting']} tasks waiting; {first['job_id']}: {first['message'] or ''}"
        )
    return out


# ---------------------------------------------------------------- job


def life_entry(at: int | None, type_name: str, payload: str, job_id: str) -> dict[str, Any]:
    """One event of the job's life as the shared sentence renderer words it, seen from the job's
    page: `parts` are text and `JobRef`s (links, or "this job"), `kind` styles the line."""
    try:
        s = sentences.describe(ev.decode(payload))
    except ev.UndecodableEvent:
        s = sentences.generic(type_name)
    parts = list(s.about(job_id))
    kind = s.kind
    if kind == "preempted" and s.parts and s.parts[0] != sentences.JobRef(job_id):
        kind = "preemptor"  # this job asked another to make room
    return {"at_ms": at, "kind": kind, "parts": parts}


def life_text(parts: list[Any], job_id: str) -> str:
    """A life item's words as plain text (tooltips, tests): other jobs by id, this one as
    "this job", a hidden one as "another tenant's job"."""
    out = []
    for p in parts:
        if isinstance(p, sentences.JobRef):
            out.append("this job" if p.job_id == job_id else p.job_id)
        elif p is None:
            out.append("another tenant's job")
        else:
            out.append(p)
    return "".join(out)


def job(con, job_id: str, tenant: str | None) -> dict[str, Any]:
    """`why`'s report plus the job's life (events in log order) and its state intervals.
    Raises UnknownJob for a job outside `tenant`."""
    report = why_report(con, job_id)  # raises UnknownJob
    if not in_tenant(report["tenant"], tenant):
        raise UnknownJob(job_id)
    rows = con.execute(
        """
        SELECT seq, occurred_at_ms, type, payload FROM events
        WHERE type <> 'Undecodable'
          AND (correlation_id = ?  -- the envelope names the job: no JSON read for other jobs
               OR (type = 'PreemptionRequested' AND payload ->> 'beneficiary' = ?)
               OR (coalesce(correlation_id, '') = ''
                   AND (payload ->> 'job_id' = ? OR json_extract_string(payload, '$.job.job_id') = ?)))
        ORDER BY seq LIMIT 2000""",
        [job_id, job_id, job_id, job_id],
    ).fetchall()
    life = [life_entry(at, t, payload, job_id) for _seq, at, t, payload in rows]
    if tenant:  # a tenant view names no job of another tenant: not as a link, not in a message
        _hide_other_tenants(con, report, life, tenant)
    c = clock(con)
    start = next((it["at_ms"] for it in life if it["at_ms"] is not None), c["now_ms"])
    spans = []
    trans = report["transitions"]
    for i, t in enumerate(trans):
        end = trans[i + 1]["at_ms"] if i + 1 < len(trans) else None
        if end is None and t["to"] in ("completed", "failed", "rejected", "cancelled", "timeout"):
            continue
        spans.append(
            {
                "state": t["to"],
                "from_ms": t["at_ms"],
                "to_ms": end if end is not None else c["now_ms"],
            }
        )
    return {
        "job_id": job_id,
        "report": report,
        "life": life,
        "spans": spans,
        "start_ms": start,
        "end_ms": max([c["now_ms"]] + [s["to_ms"] for s in spans if s["to_ms"] is not None]),
        **c,
    }


def _hide_other_tenants(
    con, report: dict[str, Any], life: list[dict[str, Any]], tenant: str
) -> None:
    """Every job of another tenant out of `report` and `life`: a link becomes None (shown as
    "another tenant's job"), an id in a message is replaced by those words."""
    hidden: set[str] = set()
    for it in life:
        for i, part in enumerate(it["parts"]):
            if isinstance(part, sentences.JobRef) and not in_tenant(
                _tenant_of(con, part.job_id), tenant
            ):
                it["parts"][i] = None
                hidden.add(part.job_id)
    for p in report["preempted"]:
        if not in_tenant(p["by_tenant"], tenant):
            hidden.add(p["by"])
            p["by"] = None
        for alt in p["alternatives"] if isinstance(p["alternatives"], list) else []:
            if isinstance(alt, dict):
                alt["victims"] = [
                    v if in_tenant(_tenant_of(con, v), tenant) else "another tenant's job"
                    for v in alt.get("victims") or []
                ]
    report["preempted_others"] = [
        x for x in report["preempted_others"] if in_tenant(_tenant_of(con, x["victim"]), tenant)
    ]
    hidden.discard(None)
    for it in life:
        it["parts"] = [redact(p, hidden) if isinstance(p, str) else p for p in it["parts"]]
    for p in report["preempted"]:
        p["message"] = redact(p["message"], hidden)
    report["message"] = redact(report["message"], hidden)


def redact(text: str | None, job_ids: set[str]) -> str | None:
    """`text` with each of `job_ids` (as a whole word) replaced by "another tenant's job"."""
    if not text or not job_ids:
        return text
    pattern = (
        r"(?<![\w.-])("
        + "|".join(re.escape(j) for j in sorted(job_ids, key=len, reverse=True))
        + r")(?![\w.-])"
    )
    return re.sub(pattern, "another tenant's job", text)


def _tenant_of(con, job_id: str | None) -> str | None:
    row = con.execute("SELECT tenant FROM jobs WHERE job_id = ?", [job_id]).fetchone()
    return row[0] if row else None


# ---------------------------------------------------------------- tenants


def tenants(con, tenant: str | None) -> dict[str, Any]:
    from gpuledger.projections.queries import tenants_rows

    rows = [r for r in tenants_rows(con) if in_tenant(r["tenant"], tenant)]
    where, args = tenant_clause("tenant", tenant)
    series: dict[str, list[dict[str, Any]]] = {}
    for r in records(
        con.execute(
            f"""
            SELECT tenant, at_ms, guaranteed_gpu_milli, fair_share_gpu_milli, allocated_gpu_milli,
                   demand_gpu_milli, borrowed_gpu_milli
            FROM quota_usage WHERE {where} ORDER BY tenant, seq""",
            args,
        )
    ):
        series.setdefault(r["tenant"], []).append(r)
    limits = {r["tenant"]: r["limit_gpus"] for r in rows}
    daily = records(
        con.execute(
            f"SELECT tenant, day, gpu_hours, borrowing_gpu_hours, jobs FROM gpu_hours_daily"
            f" WHERE {where} ORDER BY day, tenant",
            args,
        )
    )
    pre = records(
        con.execute(
            f"SELECT tenant, day, preemptions, lost_gpu_hours FROM preemptions_daily WHERE {where}"
            " ORDER BY day, tenant",
            args,
        )
    )
    return {
        "rows": rows,
        "series": series,
        "limits": limits,
        "daily": daily,
        "preemptions": pre,
        "report": usage_report(con, tenant),
        **clock(con),
    }


def usage_report(con, tenant: str | None) -> dict[str, Any]:
    """`gpuledger report`'s numbers over the whole log (projections/report.py, the same
    SQL): utilisation by category, every tenant's and user's allocated GPU-hours, every GPU
    model. Confined to `tenant`, only its subtree's tenants and users, and no cluster-wide
    split (it would show what other tenants hold)."""
    from gpuledger.projections.report import report, window

    start, end = window(con, None, None)
    r = report(con, start, end, top=1_000_000)
    if tenant:
        r["utilisation"], r["models"] = {}, []
        r["tenants"] = [x for x in r["tenants"] if in_tenant(x["tenant"], tenant)]
        r["users"] = [x for x in r["users"] if in_tenant(x["tenant"], tenant)]
    return r
