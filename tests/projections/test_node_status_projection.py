"""A node's status in the projection: given a simulated run where the operator cordons one node
and drains another, then the `node_status` view (what `gpuledger nodes` shows) holds each
node's state, since when and why as the fold derives them (`nodes.node_status`): the cordon
since its event, the drain `draining` while a run is left and `drained` since that run left."""

from __future__ import annotations

import warnings

import duckdb
from typer.testing import CliRunner

from gpuledger.projections.store import rebuild
from gpuledger.projections.ui.app import create_app
from gpuledger.replay.scenario import from_document
from gpuledger.replay.simulator import simulate
from gpuledger.services.domain.fold.nodes import node_status

DOC = {
    "cluster": {"nodes": [{"name_prefix": "node-", "count": 3, "gpus": 8}]},
    "tenants": [{"name": "ml", "guaranteed": 24}],
    "timeline": [
        {"at": 0, "submit": {"id": "a", "tenant": "ml", "gpus": 8, "duration": "30m"}},
        {"at": "1m", "drain": "node-1", "reason": "firmware update"},
        {"at": "2m", "cordon": "node-3", "reason": "cables"},
    ],
}


def status(db):
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute(
            "SELECT node, status, since_ms, reason FROM node_status ORDER BY node"
        ).fetchall()
    return rows


def test_node_status_is_the_folds_state_since_when_and_why(tmp_path):
    # given a runs on node-1 and is drained off at its minimum runtime (300 s, checkpoint 5 s)
    sim = simulate(from_document(DOC), until_ms=400_000)
    db = tmp_path / "projection.duckdb"
    rebuild(sim.log, db)
    # then node-1 is drained since a left it, node-3 cordoned since 2 m, node-2 ready
    assert status(db) == [
        ("node-1", "drained", 305_000, "firmware update"),
        ("node-2", "ready", None, None),
        ("node-3", "cordoned", 120_000, "cables"),
    ]
    # the same as the fold's
    assert [tuple(node_status(sim.ledger, n)) for n in ("node-1", "node-3")] == [
        ("drained", 305_000, "firmware update"),
        ("cordoned", 120_000, "cables"),
    ]
    # and gpuledger nodes shows the state and how long it has held
    from gpuledger.services.cli.main import app

    r = CliRunner().invoke(app, ["nodes", "--db", str(db)])
    assert r.exit_code == 0, r.output
    lines = [line.split()[:3] for line in r.output.splitlines()]
    assert lines[0] == ["NAME", "STATUS", "SINCE"]
    assert lines[1] == ["node-1", "drained", "0s"] and lines[3] == ["node-3", "cordoned", "3m"]


def test_a_drain_with_a_run_left_is_draining_since_the_drain_and_why_says_so(tmp_path):
    # given a runs on node-1, drained at 1 m, node-3 cordoned at 2 m (the log's last event)
    sim = simulate(from_document(DOC), until_ms=200_000)
    db = tmp_path / "projection.duckdb"
    rebuild(sim.log, db)
    assert status(db)[0] == ("node-1", "draining", 60_000, "firmware update")
    # then `why a` names its node's drain, since when and why
    from gpuledger.services.cli.main import app

    r = CliRunner().invoke(app, ["why", "a", "--db", str(db)])
    assert r.exit_code == 0, r.output
    assert (
        "Node:      node-1 draining for 60s (firmware update): it leaves once it may (reason "
        "Drain; `gpuledger node drain --wait` names what holds it)"
    ) in r.output.splitlines()
    # and so does its page on the dashboard
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from starlette.testclient import TestClient
    page = TestClient(create_app(db), base_url="http://127.0.0.1").get("/jobs/a").text
    assert '<p class="nodestatus">Node node-1 draining (firmware update)</p>' in page


def test_the_dashboards_cluster_page_shows_each_nodes_status_and_its_free_gpus_unavailable(
    tmp_path,
):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from starlette.testclient import TestClient
    sim = simulate(from_document(DOC), until_ms=400_000)
    db = tmp_path / "projection.duckdb"
    rebuild(sim.log, db)
    page = TestClient(create_app(db), base_url="http://127.0.0.1").get("/cluster").text
    names = [line for line in page.splitlines() if 'class="nodename"' in line]
    assert 'node-1 <span class="nodestatus">· drained for 0s: firmware update</span>' in names[0]
    assert 'node-3 <span class="nodestatus">· cordoned for 3m5s: cables</span>' in names[2]
    assert "nodestatus" not in names[1]  # node-2 is ready
    # node-1's and node-3's 16 free GPUs take no work; node-2 runs a
    assert page.count('data-kind="unavailable"') == 16
