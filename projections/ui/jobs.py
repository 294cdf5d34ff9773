"""The dashboard's Jobs page: every job of the projection (the tenant's only, in a tenant
view), filtered by tenant, class and state, sorted by any column, each linking to its page.

Rendered by a Jinja2 template (`templates/jobs.html`) with autoescaping on for every value, so
nothing here builds HTML by hand; the page extends the shared layout (`templates/base.html`)
and follows the projector live like the others. Reads only (one read-only connection).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from gpuledger.events.reasons import JobState
from gpuledger.projections.queries import gpus_label, records
from gpuledger.projections.ui.data import tenant_clause

SORTS: dict[str, str] = {
    "job": "j.job_id",
    "tenant": "j.tenant",
    "class": "j.priority_class",
    "state": "j.state",
    "gpus": "j.gpu_milli",
    "age": "j.submitted_at_ms",
    "reason": "j.reason",
}
"""Sortable columns (the `sort` query parameter) and their SQL; every order ends in the job id."""
LIMIT = 1000
"""Rows shown at most (the newest first by default); the count says how many matched."""


class BadFilter(ValueError):
    """A query parameter the page cannot use (unknown sort column, state or direction)."""


@dataclass(frozen=True)
class JobsQuery:
    """What the page shows: filters, sort column and direction (from the query string)."""

    tenant: str | None = None
    klass: str | None = None
    state: str | None = None
    sort: str = "age"
    desc: bool = True

    @classmethod
    def parse(cls, params: Any) -> JobsQuery:
        """From a request's query parameters; BadFilter names what is wrong."""
        sort = params.get("sort") or "age"
        if sort not in SORTS:
            raise BadFilter(f"sort: expected one of {', '.join(SORTS)}, got {sort[:50]!r}")
        direction = params.get("dir") or "desc"
        if direction not in ("asc", "desc"):
            raise BadFilter(f"dir: expected asc or desc, got {direction[:50]!r}")
        state = params.get("state") or None
        if state is not None and state not in {s.value for s in JobState}:
            raise BadFilter(
                f"state: expected one of {', '.join(s.value for s in JobState)}, got {state[:50]!r}"
            )
        return cls(
            tenant=params.get("tenant") or None,
            klass=params.get("class") or None,
            state=state,
            sort=sort,
            desc=direction == "desc",
        )

    def link(self, **changes: Any) -> str:
        """`/jobs?...` with these filters, `changes` applied (None drops a parameter)."""
        values = {
            "tenant": self.tenant,
            "class": self.klass,
            "state": self.state,
            "sort": self.sort,
            "dir": "desc" if self.desc else "asc",
        }
        values.update(changes)
        return "/jobs?" + urlencode({k: v for k, v in values.items() if v is not None})

    def sort_link(self, column: str) -> str:
        """The header link of `column`: sort by it, or flip the direction if it is the sort."""
        if column == self.sort:
            return self.link(dir="asc" if self.desc else "desc")
        return self.link(sort=column, dir="desc" if column == "age" else "asc")


def jobs(con, who: str | None, q: JobsQuery) -> dict[str, Any]:
    """The rows `q` selects within `who`'s view, the filter choices, the clock."""
    scope, args = tenant_clause("j.tenant", who)
    where, fargs = [scope], list(args)
    if q.tenant:
        clause, a = tenant_clause("j.tenant", q.tenant)
        where.append(clause)
        fargs += a
    if q.klass:
        where.append("j.priority_class = ?")
        fargs.append(q.klass)
    if q.state:
        where.append("j.state = ?")
        fargs.append(q.state)
    direction = "DESC" if q.desc else "ASC"
    order = f"{SORTS[q.sort]} {direction} NULLS LAST, j.job_id {direction}"
    cond = " AND ".join(where)
    (matched,) = con.execute(f"SELECT count(*) FROM jobs j WHERE {cond}", fargs).fetchone()
    rows = records(
        con.execute(
            "SELECT j.job_id, j.tenant, j.priority_class, j.state, j.reason, j.message,"
            " j.submitted_at_ms, j.gpu_milli, j.replicas, j.member_gpus, j.member_gpu_milli,"
            " j.member_mig_profile, c.now_ms"
            f" FROM jobs j CROSS JOIN clock c WHERE {cond} ORDER BY {order} LIMIT {LIMIT}",
            fargs,
        )
    )
    for r in rows:
        r["gpus"] = gpus_label(
            r["replicas"], r["member_gpus"], r["member_gpu_milli"], r["member_mig_profile"]
        )
        r["age_ms"] = (
            None if r["submitted_at_ms"] is None else max(0, r["now_ms"] - r["submitted_at_ms"])
        )
    tenants = [
        t
        for (t,) in con.execute(
            f"SELECT DISTINCT tenant FROM jobs j WHERE {scope} ORDER BY 1", args
        ).fetchall()
        if t
    ]
    classes = [
        c
        for (c,) in con.execute(
            f"SELECT DISTINCT priority_class FROM jobs j WHERE {scope} ORDER BY 1", args
        ).fetchall()
        if c
    ]
    return {
        "rows": rows,
        "matched": matched,
        "limit": LIMIT,
        "tenants": tenants,
        "classes": classes,
        "states": [s.value for s in JobState],
    }


def jobs_page(d: dict[str, Any], q: JobsQuery, **layout: Any) -> str:
    """The whole page (`layout`: views.render_page's seq and tenant)."""
    from gpuledger.projections.ui.views import render_page

    columns = [
        ("job", "job"),
        ("tenant", "tenant"),
        ("class", "class"),
        ("state", "state"),
        ("gpus", "GPUs"),
        ("age", "age"),
        ("reason", "reason"),
    ]
    return render_page(
        "jobs.html",
        title="Jobs",
        active="jobs",
        d=d,
        q=q,
        who=layout.get("tenant"),
        columns=columns,
        **layout,
    )
