"""One job state machine (issue 29): a service's state lives in the services' fold (running
while at least one replica is placed, else pending) and every view reads it. One service is
run through waiting, placement, an eviction and a scale-down; at each instant the fold,
`gpuledger jobs`, `gpuledger tenants`, the UI (job and Tenants pages) and SQL agree."""

from __future__ import annotations

import json
import re
import warnings

import duckdb
import pytest
import typer
from typer.testing import CliRunner

from gpuledger.projections.store import rebuild
from gpuledger.projections.ui.app import create_app
from gpuledger.replay.scenario import from_document
from gpuledger.replay.simulator import simulate
from gpuledger.services.cli.audit import register

with warnings.catch_warnings():  # Starlette prefers `httpx2`; httpx (a dev dependency) works
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

M = 60_000
app = typer.Typer()
register(app)
runner = CliRunner()

SCENARIO = {
    "name": "one-service",
    "cluster": {"nodes": [{"name": "gpu-1", "gpus": 8, "model": "H100-80GB"}]},
    "tenants": [{"name": "ml", "guaranteed": 8}],
    "priority_classes": [
        {"name": "serving", "value": 100, "preemptible": True},
        {"name": "urgent", "value": 1000, "preemptible": True},
    ],
    "policy": {"default_grace_s": 30},
    "timeline": [
        # the fleet is busy for 10 minutes: every replica waits
        {"at": 0, "submit": {"id": "big", "tenant": "ml", "class": "urgent", "gpus": 8, "duration": "10m"}},
        {"at": 1, "submit": {"id": "svc", "tenant": "ml", "class": "serving", "kind": "service", "replicas": 4, "min_available": 3, "gpus": 2}},
        # an urgent job evicts one replica (the budget allows one down)
        {"at": "20m", "submit": {"id": "urgent-1", "tenant": "ml", "class": "urgent", "gpus": 2, "duration": "30m"}},
        {"at": "30m", "scale": "svc", "replicas": 2},
    ],
}  # fmt: skip


def views(tmp_path, until_ms):
    """The service as the fold, `jobs`, `tenants`, the UI and SQL show it at `until_ms`."""
    sim = simulate(from_document(SCENARIO), until_ms=until_ms)
    db = tmp_path / f"at{until_ms}" / "projection.duckdb"
    db.parent.mkdir()
    rebuild(sim.log, db)
    data = ["--db", str(db)]
    svc = sim.ledger.jobs["svc"]
    replicas = sim.ledger.replicas_of("svc")
    fold = {
        "state": str(svc.state),
        "up": sum(r.state in ("running", "preempting") for r in replicas),
        "running_jobs": sum(j.state in ("running", "preempting") for j in replicas),
        "pending_jobs": sum(j.state == "pending" for j in replicas),
    }
    r = runner.invoke(app, ["jobs", "--no-headers", *data])
    assert r.exit_code == 0, r.output
    jobs = {line.split()[0]: line.split()[3:5] for line in r.output.splitlines()}
    (tenant,) = json.loads(runner.invoke(app, ["tenants", "-o", "json", *data]).output)
    why = runner.invoke(app, ["why", "svc", *data]).output
    con = duckdb.connect(str(db), read_only=True)
    try:
        (sql_state,) = con.execute("SELECT state FROM jobs WHERE job_id = 'svc'").fetchone()
        (sql_up,) = con.execute(
            "SELECT count(*) FROM jobs WHERE job_id LIKE 'svc~%'"
            " AND state IN ('running', 'preempting')"
        ).fetchone()
        (queued,) = con.execute("SELECT count(*) FROM why_pending WHERE job_id = 'svc'").fetchone()
    finally:
        con.close()
    client = TestClient(create_app(db), base_url="http://127.0.0.1")
    page = client.get("/jobs/svc").text
    badge = re.search(r'id="job-name">svc</span> <span class="badge"[^>]*>([^<]*)<', page)
    tenants_page = client.get("/tenants").text
    cells = re.search(r"<tr><td><b>ml</b></td>((?:<td>[^<]*</td>)+)</tr>", tenants_page)
    ui_cells = re.findall(r"<td>([^<]*)</td>", cells.group(1))
    return {
        "fold": fold,
        "jobs": jobs["svc"],
        "why": re.search(r"State:     (\S+ \S+)", why).group(1),
        "tenants": (tenant["running_jobs"], tenant["pending_jobs"], tenant["allocated_gpus_now"]),
        "ui_badge": badge.group(1),
        "ui_tenants": (int(ui_cells[-2]), int(ui_cells[-1])),
        "sql": (sql_state, sql_up),
        "queued": queued,
        "allocated": sum(
            sim.ledger.allocations[a].gpu_milli // 1000
            for a in sim.ledger.active
            if sim.ledger.allocations[a].tenant == "ml"
        ),
    }


@pytest.mark.parametrize(
    "until_ms, state, up, wanted",
    [
        (5 * M, "pending", 0, 4),  # every replica waits behind `big`
        (15 * M, "running", 4, 4),  # `big` ended: all four placed
        (25 * M, "running", 3, 4),  # one evicted for urgent-1, requeued
        (40 * M, "running", 2, 2),  # scaled to 2
    ],
)
def test_the_fold_jobs_tenants_ui_and_sql_agree_on_a_service(tmp_path, until_ms, state, up, wanted):
    v = views(tmp_path, until_ms)
    text = f"{state} {up}/{wanted}"
    assert (v["fold"]["state"], v["fold"]["up"]) == (state, up)
    assert v["jobs"] == [state, f"{up}/{wanted}"]  # STATE column: `running 3/4`
    assert v["why"] == text
    assert v["ui_badge"] == text
    assert v["sql"] == (state, up)
    # a service counts as its replicas, once each, in the tenant's RUNNING / PENDING
    counts = (v["fold"]["running_jobs"], v["fold"]["pending_jobs"])
    urgent_running = 1 if until_ms in (5 * M, 25 * M, 40 * M) else 0
    assert v["tenants"][:2] == (counts[0] + urgent_running, counts[1])
    assert v["ui_tenants"] == v["tenants"][:2]
    assert v["tenants"][2] == v["allocated"]
    assert v["queued"] == 0, "the queue lists the replicas, not the service"
