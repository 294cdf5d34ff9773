"""Maintenance windows in the projection: given a simulated run with a window on node-1 from
1 h to 2 h, then `maintenance_windows` holds the span the fold derived (a row per node),
`gpuledger nodes` shows node-1 as `maintenance` while the window is in force, and `gpuledger
report` counts the window's idle GPU time as planned down (sreport's PlannedDown)."""

from __future__ import annotations

import json

import duckdb
import pytest
from typer.testing import CliRunner

from gpuledger import events as ev
from gpuledger.projections.queries import nodes_rows
from gpuledger.projections.store import rebuild
from gpuledger.replay.scenario import from_document
from gpuledger.replay.simulator import simulate

H = 3_600_000
DOC = {
    "cluster": {"nodes": [{"name_prefix": "node-", "count": 2, "gpus": 8}]},
    "tenants": [{"name": "ml", "guaranteed": 16}],
    "timeline": [
        {
            "at": "1s",
            "maintenance": {"id": "fw", "nodes": ["node-1"], "start": "1h", "end": "2h"},
            "reason": "firmware",
        },
        # no time limit: never on node-1 while the window is ahead; ends inside the window
        {"at": "1m", "submit": {"id": "open", "tenant": "ml", "gpus": 8, "duration": "80m"}},
        {"at": "2h", "submit": {"id": "after", "tenant": "ml", "gpus": 4, "duration": "1h"}},
    ],
}


@pytest.fixture(scope="module")
def log():
    return simulate(from_document(DOC)).log


def projected(tmp_path, events):
    db = tmp_path / "projection.duckdb"
    rebuild(events, db)
    return db


def test_the_window_is_a_row_per_node_with_the_span_the_fold_derived(tmp_path, log):
    with duckdb.connect(str(projected(tmp_path, log)), read_only=True) as con:
        rows = con.execute(
            "SELECT window_id, node, start_ms, end_ms, until_ms, reason, cancelled_at_ms "
            "FROM maintenance_windows"
        ).fetchall()
    assert rows == [("fw", "node-1", H, 2 * H, 2 * H, "firmware", None)]


def test_nodes_show_the_window_in_force(tmp_path, log):
    # given the log up to open's end at 81 m (inside the window)
    (done,) = [i for i, (_, _, e) in enumerate(log) if isinstance(e, ev.GangCompleted)][:1]
    with duckdb.connect(str(projected(tmp_path, log[: done + 1])), read_only=True) as con:
        rows = {r["node"]: r for r in nodes_rows(con)}
    # then node-1 is planned down now, since the window's start, for its reason; node-2 is ready
    n1, n2 = rows["node-1"], rows["node-2"]
    assert (n1["status"], n1["since_ms"], n1["reason"], n1["maintenance"]) == (
        "maintenance",
        H,
        "firmware",
        "fw (active)",
    )
    assert (n2["status"], n2["since_ms"], n2["maintenance"]) == ("ready", None, None)


def test_the_report_counts_the_window_as_planned_down(tmp_path, log):
    from gpuledger.services.cli.main import app

    db = projected(tmp_path, log)
    r = CliRunner().invoke(app, ["report", "-o", "json", "--db", str(db), "--end", str(2 * H)])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    u = {c: v["gpu_hours"] for c, v in doc["utilisation"].items()}
    # 16 GPUs for the 2 h from the first event: open holds 8 for 80 m, node-1's 8 GPUs are
    # planned down for the window's hour, the rest is idle
    assert doc["reported_gpu_hours"] == pytest.approx(32.0, abs=0.01)
    assert u["planned_down"] == pytest.approx(8.0)
    assert u["allocated"] == pytest.approx(8 * 80 / 60)
    assert sum(u.values()) == pytest.approx(doc["reported_gpu_hours"])
    (model,) = doc["models"]
    assert model["planned_down_gpu_hours"] == pytest.approx(8.0)
