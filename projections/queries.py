"""Read-side queries over the DuckDB projection: plain rows and reports for the audit
commands (`why`, `jobs`, `nodes`, `tenants`), usable without the CLI. The connection is the
caller's (read-only); nothing here writes."""

from __future__ import annotations

import json
from typing import Any


def gpus_label(replicas: int | None, gpus: int | None, milli: int | None, mig: str | None) -> str:
    """Human form of a job's GPU request: `8`, `2x8`, `500m`, `3g.40gb`, `0`."""
    if gpus:
        per = str(gpus)
    elif milli:
        per = f"{milli}m"
    elif mig:
        per = mig
    else:
        per = "0"
    return per if not replicas or replicas == 1 else f"{replicas}x{per}"


def gpus_text(milli: int | float | None) -> str:
    """Milli-GPUs as a short count: `8`, `0.5`, `-` when unknown."""
    if milli is None:
        return "-"
    if milli % 1000 == 0:
        return str(int(milli // 1000))
    return f"{milli / 1000:.2f}".rstrip("0").rstrip(".")


def records(cursor) -> list[dict[str, Any]]:
    cols = [d[0] for d in cursor.description]
    return [dict(zip(cols, r, strict=True)) for r in cursor.fetchall()]


def parse_json_fields(rec: dict[str, Any], *fields: str) -> dict[str, Any]:
    for f in fields:
        v = rec.get(f)
        if isinstance(v, str):
            try:
                rec[f] = json.loads(v)
            except ValueError:
                pass
    return rec


def now_ms(con) -> int:
    return con.execute("SELECT now_ms FROM clock").fetchone()[0]


class UnknownJob(LookupError):
    """No job row. `refused` lists the client requests naming the id that admission refused
    (`RequestRefused`); `refusals` the events about it that the acceptance rules refused (a
    submission on another tenant's subject, say): why the job does not exist."""

    def __init__(
        self,
        job_id: str,
        refused: list[dict[str, Any]] | None = None,
        refusals: list[dict[str, Any]] | None = None,
    ) -> None:
        super().__init__(job_id)
        self.refused = refused or []
        self.refusals = refusals or []


def refused_requests(con, job_id: str) -> list[dict[str, Any]]:
    """The client requests naming `job_id` that admission refused (`RequestRefused`), in log
    order: a conflicting or unreadable second submission, a cancel of an unknown job."""
    rows = con.execute(
        "SELECT occurred_at_ms, payload::VARCHAR FROM events WHERE type = 'RequestRefused'"
        " AND correlation_id = ? ORDER BY seq",
        [job_id],
    ).fetchall()
    out = []
    for at, payload in rows:
        p = json.loads(payload)
        out.append(
            {
                "at_ms": at,
                "request": p.get("request"),
                "request_seq": p.get("request_seq"),
                "tenant": p.get("tenant"),
                "reason": p.get("reason"),
                "message": p.get("message"),
            }
        )
    return out


def acceptance_refusals(con, job_id: str, tenant: str | None = None) -> list[dict[str, Any]]:
    """Events about `job_id` the acceptance rules refused (services/domain/fold/acceptance.py).
    With `tenant`, a client message of another tenant (its subject says whose) is left out: a
    raw submission naming this job's key is about its sender, not this job."""
    from gpuledger.events.subjects import client_target

    out = []
    for seq, at, t, subject, prod, code, msg in con.execute(
        "SELECT seq, at_ms, type, subject, producer, code, message FROM refusals"
        " WHERE job_id = ? ORDER BY seq",
        [job_id],
    ).fetchall():
        target = client_target(subject or "")
        if tenant is not None and target is not None and target[1] != tenant:
            continue
        out.append(
            {"seq": seq, "at_ms": at, "event": t, "producer": prod, "code": code, "message": msg}
        )
    return out


def preemption_outlook(pending: dict[str, Any]) -> list[str]:
    """What `gpuledger why` says about preemption for a waiting job (its `pending` block, or
    a `why_pending` row): whether preemption would help where the scheduler said, and the
    latest refusal with its reason and message, which names the excluded victims by reason
    (`Preemption declined: NoVictims: no eligible victims; excluded: 3 WithinGuarantee`). The
    UI's job and Queue pages print these same lines; nothing known is no line."""
    help_ = pending.get("preemption_would_help")
    declined = pending.get("preemption_declined")
    if declined is None and pending.get("declined_reason"):
        declined = {"reason": pending["declined_reason"], "message": pending["declined_message"]}
    lines = []
    if help_ is not None:
        lines.append(f"Preemption would help: {'yes' if help_ else 'no'}")
    if declined:
        lines.append(f"Preemption declined: {declined['reason']}: {declined['message']}")
    return lines


def unrecorded_task(con, job_id: str) -> list[dict[str, Any]]:
    """Task `job_id` (`<array>@<i>`) of an array as one row when it has none of its own (not
    released yet: services/domain/fold/arrays.py; or dropped unreleased when the array was
    cancelled): the array's row, in the task's state, with no reason of its own."""
    array, sep, index = job_id.rpartition("@")
    if not sep or not index.isdigit() or str(int(index)) != index:
        return []
    rows = records(con.execute("SELECT * FROM jobs WHERE job_id = ?", [array]))
    if not rows:
        return []
    row = parse_json_fields(rows[0], "details")
    counts = row["details"].get("array") if isinstance(row["details"], dict) else None
    if not counts or not counts["first"] <= int(index) < counts["first"] + counts["tasks"]:
        return []
    pending = counts["unreleased"] > 0
    if not pending and not row["cancel_requested"]:
        return []
    message = (
        f"not released yet: {array} keeps a window of its tasks queued and releases the"
        f" next in queue order as they start or end ({counts['unreleased']} unreleased)"
        if pending
        else f"cancelled with {array} before it was released"
    )
    return [
        {
            **row,
            "job_id": job_id,
            "state": "pending" if pending else "cancelled",
            "reason": None if pending else row["reason"],
            "message": message,
            "details": {},
            "attempts": 0,
            "allocation_id": None,
        }
    ]


def why_report(con, job_id: str) -> dict[str, Any]:
    """Everything the projection knows about why `job_id` is where it is."""
    cur = con.execute("SELECT * FROM jobs WHERE job_id = ?", [job_id])
    recs = records(cur) or unrecorded_task(con, job_id)
    if not recs:
        raise UnknownJob(job_id, refused_requests(con, job_id), acceptance_refusals(con, job_id))
    from gpuledger.events.specs import DEFAULT_USER  # (lazily: the CLI tree imports this module)

    job = parse_json_fields(recs[0], "details")
    now = now_ms(con)
    out: dict[str, Any] = {
        "job": job_id,
        "tenant": job["tenant"],
        "user": job["user"] or DEFAULT_USER,
        "state": job["state"],
        "priority_class": job["priority_class"],
        "priority": job["priority"],
        "gpus": gpus_text(job["gpu_milli"]),
        "age_s": (now - job["submitted_at_ms"]) / 1000
        if job["submitted_at_ms"] is not None
        else None,
        "reason": job["reason"],
        "message": job["message"],
        "details": job["details"],
        "attempts": job["attempts"],
    }
    if job["state"] in ("submitted", "pending"):
        wp = records(con.execute("SELECT * FROM why_pending WHERE job_id = ?", [job_id]))
        if wp:
            w = parse_json_fields(wp[0], "node_histogram")
            out["pending"] = {
                "waiting_s": w["waiting_s"],
                "queue_position": w["queue_position"],
                "preemption_would_help": w["preemption_would_help"],
                "node_histogram": w["node_histogram"],
                "preemption_declined": (
                    {"reason": w["declined_reason"], "message": w["declined_message"]}
                    if w["declined_reason"]
                    else None
                ),
                "reason_changes": w["reason_changes"],
            }
    if job["allocation_id"]:
        alloc = con.execute(
            "SELECT string_agg(DISTINCT node, ',' ORDER BY node), sum(gpu_milli) FROM allocations"
            " WHERE allocation_id = ? AND ended_at_ms IS NULL",
            [job_id and job["allocation_id"]],
        ).fetchone()
        out["allocation"] = {
            "id": job["allocation_id"],
            "nodes": alloc[0],
            "gpus": gpus_text(alloc[1]),
            # its nodes the operator took out of service (node_status: a cordon, a drain, a
            # window in force), with since when and why
            "nodes_out": records(
                con.execute(
                    "SELECT s.node, s.status, s.since_ms, c.now_ms - s.since_ms AS for_ms,"
                    " s.reason, s.window_id FROM node_status s CROSS JOIN clock c"
                    " WHERE s.status NOT IN ('ready', 'reserved') AND s.node IN (SELECT node"
                    " FROM allocations WHERE allocation_id = ? AND ended_at_ms IS NULL)"
                    " ORDER BY s.node",
                    [job["allocation_id"]],
                )
            ),
        }
    pre = records(
        con.execute("SELECT * FROM who_preempted WHERE victim = ? ORDER BY request_seq", [job_id])
    )
    out["preempted"] = [
        {
            "by": p["preemptor"],
            "by_tenant": p["preemptor_tenant"],
            "by_priority": p["preemptor_priority"],
            "reason": p["reason"],
            "message": p["message"],
            "allocation": p["allocation_id"],
            "requested_at_ms": p["requested_at_ms"],
            "outcome": p["outcome"],
            "checkpointed": p["checkpointed"],
            "lost_gpu_seconds": p["lost_gpu_seconds"],
            "saved_progress_s": p["saved_progress_s"],
            "alternatives": parse_json_fields(p, "alternatives")["alternatives"],
            "details": parse_json_fields(p, "details")["details"],
        }
        for p in pre
    ]
    out["preempted_others"] = [
        {"victim": v, "reason": r, "lost_gpu_seconds": lost}
        for v, r, lost in con.execute(
            "SELECT victim, reason, lost_gpu_seconds FROM who_preempted WHERE preemptor = ?"
            " ORDER BY request_seq",
            [job_id],
        ).fetchall()
    ]
    out["defrag"] = [
        {"at_ms": at, "type": t, "message": m}
        for at, t, m in con.execute(
            "SELECT at_ms, type, message FROM decisions WHERE job_id = ? AND type IN"
            " ('ConsolidationPlanned', 'MigReconfigurationRequested') ORDER BY seq",
            [job_id],
        ).fetchall()
    ]
    service = service_report(con, job_id, job)
    if service is not None:
        out["service"] = service
    up = service["running"] + service["preempting"] if service is not None else None
    out["state_text"] = job_state_text({**job, "replicas_up": up})
    # a request of another tenant is never filed under this job (admission files it under
    # its own tenant's key; a log written before may still name this job)
    out["refused"] = [
        r for r in refused_requests(con, job_id) if r["tenant"] in (None, job.get("tenant"))
    ]
    out["refusals"] = acceptance_refusals(con, job_id, job.get("tenant"))
    out["transitions"] = [
        {"at_ms": at, "from": f, "to": t, "event": e, "reason": r}
        for at, f, t, e, r in con.execute(
            "SELECT at_ms, from_state, to_state, event_type, reason FROM job_transitions"
            " WHERE job_id = ? ORDER BY seq",
            [job_id],
        ).fetchall()
    ]
    return out


def service_report(con, job_id: str, job: dict[str, Any]) -> dict[str, Any] | None:
    """For a service (`kind: service`): its replicas by state and its disruption budget;
    None for any other job."""
    row = con.execute(
        "SELECT payload FROM events WHERE type = 'JobSubmitted'"
        " AND json_extract_string(payload, '$.job.job_id') = ? ORDER BY seq LIMIT 1",
        [job_id],
    ).fetchone()
    spec = json.loads(row[0]).get("job", {}) if row else {}
    if spec.get("kind") != "service":
        return None
    prefix = job_id + "~"
    replicas = [
        (int(rid[len(prefix) :]), state, reason)
        for rid, state, reason in con.execute(
            "SELECT job_id, state, reason FROM jobs WHERE starts_with(job_id, ?)", [prefix]
        ).fetchall()
        if rid[len(prefix) :].isdigit()
    ]
    replicas.sort()
    wanted = job["replicas"] or 0
    count = {
        s: sum(1 for _, st, _ in replicas if st == s) for s in ("running", "preempting", "pending")
    }
    keep = int(spec.get("min_available") or 0)
    up = count["running"] + count["preempting"]
    return {
        "replicas": wanted,
        "running": count["running"],
        "preempting": count["preempting"],
        "pending": sum(1 for i, st, _ in replicas if st == "pending" and i < wanted),
        "stopping": sum(
            1 for i, st, _ in replicas if i >= wanted and st in ("running", "preempting")
        ),
        "min_available": keep,
        "disruption_budget": max(0, up - keep),
        "evictable_now": max(0, count["running"] - keep),
        "replica_states": [
            {"replica": f"{prefix}{i}", "state": st, "reason": r} for i, st, r in replicas
        ],
    }


REPLICAS_UP = """services AS (
    SELECT regexp_extract(job_id, '^(.+)~[0-9]+$', 1) AS job_id,
           count(*) FILTER (WHERE state IN ('running', 'preempting')) AS replicas_up
    FROM jobs WHERE contains(job_id, '~') AND regexp_matches(job_id, '~[0-9]+$') GROUP BY 1)"""
"""A CTE `services`: per service (`kind: service`, whose replicas are `<service>~<i>`; user
job ids may not hold `~`), its replicas placed now. The service's own `state` is the fold's:
`running` while this is at least 1, else `pending`."""


ARRAY_TASKS = """arrays AS (
    SELECT job_id, CAST(details->>'$.array.tasks' AS BIGINT) AS tasks,
           CAST(details->>'$.array.running' AS BIGINT) AS tasks_running,
           coalesce(CAST(details->>'$.array.ended.completed' AS BIGINT), 0) AS tasks_completed,
           coalesce(CAST(details->>'$.array.ended.failed' AS BIGINT), 0)
             + coalesce(CAST(details->>'$.array.ended.timeout' AS BIGINT), 0) AS tasks_failed,
           coalesce(CAST(details->>'$.array.ended.cancelled' AS BIGINT), 0) AS tasks_cancelled,
           CAST(details->>'$.array.unreleased' AS BIGINT) AS tasks_unreleased
    FROM jobs WHERE NOT contains(job_id, '@') AND details->>'$.array.tasks' IS NOT NULL)"""
"""A CTE `arrays`: per admitted array job (whose tasks are `<array>@<i>`; user job ids may
not hold `@`), its tasks counted by state as the fold counts them (the array row's
`details.array`, projections/mappers/jobs.py): tasks not released yet
(services/domain/fold/arrays.py) have no row but are counted, pending (`tasks_unreleased`)
or, the array cancelled, cancelled."""


def job_state_text(row: dict[str, Any]) -> str:
    """A job's STATE as tables show it; a live service adds its replicas placed of those
    wanted (`running 2/3`, `pending 0/3`), from `jobs_rows`' `replicas_up`; an array job its
    tasks (`running 3/10 done 4`: 3 of its 10 tasks running, 4 ended)."""
    if row.get("tasks"):
        done = (
            (row.get("tasks_completed") or 0)
            + (row.get("tasks_failed") or 0)
            + (row.get("tasks_cancelled") or 0)
        )
        return f"{row['state']} {row.get('tasks_running') or 0}/{row['tasks']} done {done}"
    state, up = row["state"], row.get("replicas_up")
    if up is None or state in (
        "submitted",
        "completed",
        "failed",
        "rejected",
        "cancelled",
        "timeout",
    ):
        return state
    return f"{state} {up}/{row.get('replicas') or 0}"


def _jobs_where(
    state: str | None, tenant: str | None, tasks: bool, prefix: str = "", user: str | None = None
) -> tuple[str, list[Any]]:
    """The WHERE clause (with its arguments) of `jobs_rows` and `jobs_count`."""
    where, args = [], []
    if user:
        where.append(f"{prefix}user = ?")
        args.append(user)
    if not tasks:
        # `contains` first: it is much cheaper than the regular expression on every id
        where.append(
            f"NOT (contains({prefix}job_id, '@') AND regexp_matches({prefix}job_id, '@[0-9]+$'))"
        )
    if state:
        where.append(f"{prefix}state = ?")
        args.append(state)
    if tenant:
        # no LIKE: `_` is literal
        where.append(f"({prefix}tenant = ? OR starts_with({prefix}tenant, ?))")
        args += [tenant, tenant.rstrip("/") + "/"]
    return (" WHERE " + " AND ".join(where) if where else ""), args


def jobs_rows(
    con,
    *,
    state: str | None = None,
    tenant: str | None = None,
    tasks: bool = False,
    limit: int | None = None,
    user: str | None = None,
) -> list[dict[str, Any]]:
    """Rows of `jobs` (an array job once, its tasks counted, unless `tasks`), oldest
    submission first; with `limit`, only the `limit` most recently submitted (same order: a
    job not submitted yet counts as the newest); with `user`, only that user's."""
    where, args = _jobs_where(state, tenant, tasks, "j.", user)
    chosen = "jobs"
    if limit is not None:
        chosen = (
            f"(SELECT * FROM jobs j{where} ORDER BY j.submitted_at_ms DESC NULLS FIRST,"
            f" j.job_id DESC LIMIT {int(limit)})"
        )
        args = args * 2
    # members placed now, per allocation: only live allocations are aggregated (a join, not
    # a subquery per job: the allocations table holds every allocation ever made)
    q = (
        f"WITH {REPLICAS_UP}, {ARRAY_TASKS}, live AS (SELECT allocation_id,"
        " string_agg(DISTINCT node, ',' ORDER BY node) AS nodes,"
        " count(DISTINCT rank) AS members_up FROM allocations WHERE ended_at_ms IS NULL"
        " GROUP BY allocation_id) "
        "SELECT j.*, c.now_ms, l.nodes, coalesce(l.members_up, 0) AS members_up,"
        " s.replicas_up, r.tasks, r.tasks_running, r.tasks_completed, r.tasks_failed,"
        f" r.tasks_cancelled FROM {chosen} j CROSS JOIN clock c LEFT JOIN services s"
        " USING (job_id) LEFT JOIN arrays r USING (job_id)"
        f" LEFT JOIN live l ON l.allocation_id = j.allocation_id{where}"
        " ORDER BY j.submitted_at_ms NULLS LAST, j.job_id"
    )
    return [parse_json_fields(r, "details") for r in records(con.execute(q, args))]


def jobs_count(
    con,
    *,
    state: str | None = None,
    tenant: str | None = None,
    tasks: bool = False,
    user: str | None = None,
) -> int:
    """How many rows `jobs_rows` lists without a limit."""
    where, args = _jobs_where(state, tenant, tasks, "", user)
    return con.execute(f"SELECT count(*) FROM jobs{where}", args).fetchone()[0]


def nodes_rows(con) -> list[dict[str, Any]]:
    """Every node with its GPUs and use; `status`, `since_ms` and `reason` are the
    `node_status` view's (the fold's node state, or `maintenance` while a window of it is
    active), and `maintenance` lists its windows not yet over."""
    q = """
        SELECT n.* REPLACE (s.status AS status), s.since_ms, s.reason, c.now_ms,
               (SELECT string_agg(m.window_id || ' (' || m.phase || ')', ','
                                  ORDER BY m.start_ms, m.window_id)
                  FROM node_maintenance m
                 WHERE m.node = n.node AND m.phase IN ('scheduled', 'active')) AS maintenance,
               (SELECT count(*) FROM gpus g WHERE g.node = n.node) AS gpus,
               (SELECT string_agg(DISTINCT g.model, ',' ORDER BY g.model) FROM gpus g
                 WHERE g.node = n.node) AS models,
               (SELECT count(DISTINCT g.clique) FROM gpus g WHERE g.node = n.node) AS cliques,
               (SELECT coalesce(sum(f.free_milli), 0) FROM gpu_free f WHERE f.node = n.node)
                   AS free_milli,
               (SELECT coalesce(sum(a.gpu_milli), 0) FROM allocations a
                 WHERE a.node = n.node AND a.ended_at_ms IS NULL) AS allocated_milli
        FROM nodes n JOIN node_status s USING (node) CROSS JOIN clock c ORDER BY n.node"""
    return [parse_json_fields(r, "labels") for r in records(con.execute(q))]


def tenants_rows(con) -> list[dict[str, Any]]:
    # jobs as they hold or wait for GPUs: a service counts as its replicas, not once more
    q = f"""
        WITH {REPLICAS_UP}
        SELECT u.*, t.demand_gpu_milli / 1000.0 AS demand_gpus, t.over_quota_weight,
               t.borrowing_limit_by_model, t.lending_limit_by_model,
               (SELECT count(*) FROM jobs j WHERE j.tenant = u.tenant
                 AND j.state IN ('running', 'preempting')
                 AND j.job_id NOT IN (SELECT job_id FROM services)) AS running_jobs,
               (SELECT count(*) FROM jobs j WHERE j.tenant = u.tenant
                 AND j.state IN ('submitted', 'pending')
                 AND j.job_id NOT IN (SELECT job_id FROM services)) AS pending_jobs
        FROM tenant_usage u LEFT JOIN tenants t USING (tenant) ORDER BY u.tenant"""
    out = []
    for r in records(con.execute(q)):
        for key in ("borrowing_limit_by_model", "lending_limit_by_model"):
            milli = parse_json_fields(r, key).pop(key, None)
            r[f"{key}_gpus"] = {m: v / 1000 for m, v in milli.items()} if milli else None
        out.append(r)
    return out


def acct_rows(
    con,
    *,
    start_ms: int | None = None,
    end_ms: int | None = None,
    tenant: str | None = None,
    state: str | None = None,
) -> list[dict[str, Any]]:
    """`job_accounting` rows of the jobs that existed at some moment of [start, end] (like
    sacct: submitted before the end, not finished before the start), in submission order."""
    where, args = ["TRUE"], []
    if start_ms is not None:
        where.append("(ended_at_ms IS NULL OR ended_at_ms >= ?)")
        args.append(start_ms)
    if end_ms is not None:
        where.append("submitted_at_ms <= ?")
        args.append(end_ms)
    if tenant:
        where.append("(tenant = ? OR starts_with(tenant, ?))")  # no LIKE: `_` is literal
        args += [tenant, tenant.rstrip("/") + "/"]
    if state:
        where.append("state = ?")
        args.append(state)
    q = (
        "SELECT * FROM job_accounting WHERE "
        + " AND ".join(where)
        + " ORDER BY submitted_at_ms NULLS LAST, job_id"
    )
    return records(con.execute(q, args))
