"""Issue 30: the UI and `gpuledger jobs --tenant` filter tenants by equality or an exact
prefix, never SQL `LIKE`: a `_` or `%` in a tenant name is a character, not a wildcard.

Given jobs of tenants `team_a`, `team_a/sub`, `teamXa`, `teamXa/sub`, `team-a`, `team_a_x`, `team_ab/sub`, when filtering
by `team_a`, then exactly `team_a` and its child `team_a/sub` are shown."""

from __future__ import annotations

from gpuledger import events as ev
from gpuledger.projections.queries import jobs_rows
from gpuledger.projections.store import Projector, connect_readonly
from gpuledger.projections.ui.data import in_tenant, tenant_clause

TENANTS = ["team_a", "team_a/sub", "teamXa", "teamXa/sub", "team-a", "team_a_x", "team_ab/sub"]


def projected(tmp_path):
    db = tmp_path / "p.duckdb"
    pj = Projector(db)
    for seq, tenant in enumerate(TENANTS, 1):
        spec = ev.JobSpec(
            job_id=f"j{seq}", tenant=tenant, resources=ev.Resources(gpus=1), duration_s=60
        )
        event = ev.JobSubmitted(event_id=f"s{seq}", job=spec)
        pj.apply(seq, ev.subject_for(event), event)
    pj.commit()
    pj.close()
    return connect_readonly(db)


def test_a_tenant_filter_matches_the_tenant_and_its_children_only(tmp_path):
    con = projected(tmp_path)
    try:
        shown = sorted(r["tenant"] for r in jobs_rows(con, tenant="team_a"))
        assert shown == ["team_a", "team_a/sub"]
        sql, args = tenant_clause("tenant", "team_a")
        ui = sorted(
            t for (t,) in con.execute(f"SELECT tenant FROM jobs WHERE {sql}", args).fetchall()
        )
        assert ui == ["team_a", "team_a/sub"]
        sql, args = tenant_clause("tenant", "team%")
        assert con.execute(f"SELECT count(*) FROM jobs WHERE {sql}", args).fetchone() == (0,)
    finally:
        con.close()
    assert [t for t in TENANTS if in_tenant(t, "team_a")] == ["team_a", "team_a/sub"]
