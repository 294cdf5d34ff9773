"""The protocol on a slice of the real trace (tests/fixtures/openb: every 12th node and pod),
and the CLI contract."""

import json

import pytest
from typer.testing import CliRunner

from gpuledger.replay.openb.protocol import CURVE_POINTS, run, run_seed
from gpuledger.replay.openb.trace import load_nodes, load_tasks
from gpuledger.services.cli.bench import bench_app


@pytest.fixture(scope="module")
def sliced(openb_dir):
    nodes = load_nodes(openb_dir / "openb_node_list_gpu_node.csv")
    tasks = load_tasks(openb_dir / "openb_pod_list_default.csv")
    assert (len(nodes), len(tasks)) == (102, 680)
    return nodes, tasks


def test_seed_run_metrics_are_consistent_and_deterministic(sliced):
    nodes, tasks = sliced
    r = run_seed(nodes, tasks, "fgd", 42, 1.3)
    again = run_seed(nodes, tasks, "fgd", 42, 1.3)
    assert (again.unallocated_at_100, again.curve, again.placements) == (
        r.unallocated_at_100,
        r.curve,
        r.placements,
    )
    assert len(r.curve) == CURVE_POINTS
    assert r.curve[0] == pytest.approx(100.0, abs=1.0)  # nothing allocated yet
    assert r.curve[100] == r.unallocated_at_100
    assert 0 < r.unallocated_at_100 < 30
    assert r.placements < r.tasks  # the 130% stream cannot all fit


def test_policies_rank_on_the_slice(sliced):
    nodes, tasks = sliced
    heads = {
        p: run(nodes, tasks, p, [42, 43], 1.3).unallocated_at_100["mean"]
        for p in ("bestfit", "fgd", "default")
    }
    assert heads["fgd"] < heads["bestfit"]
    assert heads["default"] <= heads["fgd"]


def test_cli_openb_writes_the_json_contract(openb_dir, tmp_path, sliced):
    nodes_csv = openb_dir / "openb_node_list_gpu_node.csv"
    pods_csv = openb_dir / "openb_pod_list_default.csv"
    out = tmp_path / "r.json"
    res = CliRunner().invoke(
        bench_app,
        [
            "openb",
            "--pods",
            str(pods_csv),
            "--nodes",
            str(nodes_csv),
            "--policy",
            "fgd",
            "--seeds",
            "42-43",
            "--json",
            str(out),
            "--workers",
            "1",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "fgd" in res.output and "MEAN" in res.output
    report = json.loads(out.read_text())
    assert {
        "policy",
        "pods_file",
        "seeds",
        "unallocated_at_100",
        "curve",
        "placements",
        "wall_s",
        "placements_per_s",
    } <= set(report)
    assert report["seeds"] == [42, 43]
    assert set(report["unallocated_at_100"]) == {"mean", "sd", "median"}
    assert len(report["curve"]) == CURVE_POINTS and report["curve"][130][0] == 130.0
    assert report["placements"] > 0 and report["placements_per_s"] > 0


def test_bench_reads_the_trace_folder_given_by_trace(openb_dir, tmp_path):
    out = tmp_path / "r.json"
    res = CliRunner().invoke(
        bench_app,
        [
            "openb",
            "--trace",
            str(openb_dir),
            "--policy",
            "bestfit",
            "--seeds",
            "42",
            "--json",
            str(out),
            "--workers",
            "1",
        ],
    )
    assert res.exit_code == 0, res.output
    assert json.loads(out.read_text())["pods_file"] == str(openb_dir / "openb_pod_list_default.csv")


@pytest.mark.parametrize(
    "args",
    [[], ["--trace", "{missing}"], ["--pods", "{missing}/p.csv", "--nodes", "{missing}/n.csv"]],
    ids=["nothing", "trace-folder", "files"],
)
def test_bench_without_the_full_trace_says_where_to_get_it(tmp_path, monkeypatch, args):
    monkeypatch.delenv("GPULEDGER_OPENB_DIR", raising=False)
    missing = tmp_path / "no-trace"
    res = CliRunner().invoke(bench_app, ["openb", *(a.format(missing=missing) for a in args)])
    assert res.exit_code == 2
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: openb trace not ")
    assert "github.com/alibaba/clusterdata" in lines[0] and "--trace DIR" in lines[0]
    assert "Traceback" not in res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)  # a clean exit
