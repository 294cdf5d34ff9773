"""A window held for a tenant in the projection: given a simulated run where node-1 is held
for tenant ml from 1 h to 3 h (cv's run there is drained off at the start, ml's job starts
there at 70 m), then the window is a `maintenance_windows` row naming ml, `gpuledger nodes`
shows node-1 `reserved` while it is in force, and `gpuledger report`, the `report_*` views and
the exporter count the GPU time it held idle for ml as reserved (sreport's Reserved), not idle
and not planned down."""

from __future__ import annotations

import json

import duckdb
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from gpuledger.projections.exporter import ProjectionCollector
from gpuledger.projections.queries import nodes_rows
from gpuledger.projections.store import rebuild
from gpuledger.replay.scenario import from_document
from gpuledger.replay.simulator import simulate
from gpuledger.services.runtime.metrics import new_registry
from tests.replay.test_tenant_window_scenarios import DOC  # the tenant window's scenario

H = 3_600_000
# node-1's 8 GPUs are held for ml from 1 h; cv-run leaves them at 1 h + 5 s (its checkpoint),
# ml-big takes them at 70 m: 8 x 595 s idle for ml
RESERVED_GPU_S = 8 * 595


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    path = tmp_path_factory.mktemp("reserved") / "projection.duckdb"
    rebuild(simulate(from_document(DOC), until_ms=80 * 60_000).log, path)
    return path


def test_the_window_is_a_row_naming_its_tenant_and_its_node_is_reserved(db):
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute("SELECT window_id, node, tenant FROM maintenance_windows").fetchall()
        nodes = {r["node"]: r for r in nodes_rows(con)}
    assert rows == [("ml-day", "node-1", "ml")]
    n1 = nodes["node-1"]
    assert (n1["status"], n1["since_ms"], n1["reason"]) == ("reserved", H, "launch")
    assert nodes["node-2"]["status"] == "ready"


def test_the_report_counts_the_held_idle_time_as_reserved_for_the_tenant(db):
    from gpuledger.services.cli.main import app

    r = CliRunner().invoke(app, ["report", "-o", "json", "--db", str(db)])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    u = {c: v["gpu_hours"] for c, v in doc["utilisation"].items()}
    assert u["reserved"] == pytest.approx(RESERVED_GPU_S / 3600)
    assert u["planned_down"] == 0
    assert sum(u.values()) == pytest.approx(doc["reported_gpu_hours"])
    tenants = {t["tenant"]: t for t in doc["tenants"]}
    assert tenants["ml"]["reserved_gpu_hours"] == pytest.approx(RESERVED_GPU_S / 3600)
    assert tenants["cv"]["reserved_gpu_hours"] == 0
    (model,) = doc["models"]
    assert model["reserved_gpu_hours"] == pytest.approx(RESERVED_GPU_S / 3600)
    # the table names it per tenant, the CSV as a reserved row of the tenant
    table = CliRunner().invoke(app, ["report", "--db", str(db)]).output
    assert "TENANT   JOBS   GPU-HOURS   PERCENT   RESERVED" in table
    csv = CliRunner().invoke(app, ["report", "-o", "csv", "--db", str(db)]).output
    assert "tenant,ml,,,reserved,,1.3222" in csv


def test_the_exporter_counts_the_tenants_reserved_gpu_seconds_and_nodes_by_status(db):
    text = generate_latest(new_registry(ProjectionCollector(db))).decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }
    assert samples[
        ("gpuledger_tenant_reserved_gpu_seconds_total", (("tenant", "ml"),))
    ] == pytest.approx(RESERVED_GPU_S)
    assert samples[("gpuledger_nodes", (("status", "reserved"),))] == 1
