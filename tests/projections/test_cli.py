"""The audit commands (typer) over a projected scenario."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from gpuledger.replay.logio import write_log
from gpuledger.services.cli.audit import register
from gpuledger.services.cli.output import humanize_ms
from gpuledger.services.cli.sql import iso_ms
from tests.projections.givens import TENANTS_WITH_LIMITS, config_log

app = typer.Typer()
register(app)
runner = CliRunner()


@pytest.fixture(scope="module")
def data(tmp_path_factory, messages):
    d = tmp_path_factory.mktemp("cli")
    write_log(d / "log.jsonl", messages)
    r = runner.invoke(
        app,
        [
            "project",
            "--rebuild",
            "--log",
            str(d / "log.jsonl"),
            "--data",
            str(d / "data"),
            "--json",
        ],
    )
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["last_seq"] == len(messages)
    return d


def run(*args, data=None):
    return runner.invoke(app, [*args, "--data", str(data / "data")])


def test_project_again_skips_everything(data, messages):
    r = run("project", "--log", str(data / "log.jsonl"), "--json", data=data)
    assert r.exit_code == 0 and json.loads(r.output)["skipped"] == len(messages)


def test_jobs_table_and_formats(data):
    r = run("jobs", data=data)
    assert r.exit_code == 0
    lines = r.output.splitlines()
    assert lines[0].split() == ["NAME", "TENANT", "PRIORITY", "STATE", "GPUS", "AGE", "REASON"]
    big = next(line for line in lines if line.startswith("big-b"))
    assert big.split() == ["big-b", "org/b", "train", "pending", "2x8", "10m", "Resources"]
    r = run("jobs", "--no-headers", "--state", "running", data=data)
    assert sorted(line.split()[0] for line in r.output.splitlines()) == ["infer-a", "mig-a"]
    r = run("jobs", "-o", "json", "--tenant", "org/b", data=data)
    assert {j["job_id"] for j in json.loads(r.output)} == {"train-b", "big-b"}
    r = run("jobs", "-o", "yaml", data=data)
    assert "job_id: train-b" in r.output
    r = run("jobs", "-o", "wide", data=data)
    assert "MESSAGE" in r.output.splitlines()[0]


def test_jobs_limit_keeps_the_newest_in_order_and_says_how_many_were_left_out(data):
    every = json.loads(run("jobs", "-o", "json", "--limit", "0", data=data).output)
    newest = sorted(every, key=lambda j: (j["submitted_at_ms"], j["job_id"]))[-2:]
    r = runner.invoke(app, ["jobs", "-o", "json", "--limit", "2", "--data", str(data / "data")])
    assert r.exit_code == 0
    shown = json.loads(r.stdout)
    assert [j["job_id"] for j in shown] == [j["job_id"] for j in newest]
    assert f"the 2 most recently submitted of {len(every)} jobs" in r.stderr
    r = runner.invoke(app, ["jobs", "--limit", str(len(every)), "--data", str(data / "data")])
    assert r.exit_code == 0 and "most recently submitted" not in r.stderr


def test_nodes_and_tenants(data):
    r = run("nodes", data=data)
    assert r.output.splitlines()[0].split()[:5] == ["NAME", "STATUS", "SINCE", "GPUS", "ALLOCATED"]
    assert run("nodes", "-o", "wide", data=data).exit_code == 0
    r = run("tenants", "-o", "json", data=data)
    b = next(t for t in json.loads(r.output) if t["tenant"] == "org/b")
    assert b["borrowed_gpu_hours"] == pytest.approx(4 * 605 / 3600)
    assert "BORROWED-H" in run("tenants", "-o", "wide", data=data).output


def test_why_preempted_and_pending(data):
    r = run("why", "train-b", data=data)
    assert r.exit_code == 0
    out = r.output
    assert "Preempted #1: by infer-a (tenant org/a, priority 125), reason Reclaim" in out
    assert "lost work:    40 GPU-seconds" in out and "checkpointed: yes" in out
    assert '["small-a"]: frees 0.5 GPU, needs 8' in out
    r = run("why", "big-b", "-o", "json", data=data)
    rep = json.loads(r.output)
    assert rep["reason"] == "Resources" and rep["pending"]["queue_position"] == 2
    assert rep["pending"]["preemption_declined"]["reason"] == "NoVictims"
    assert rep["pending"]["node_histogram"]["wrong model"] == 1


def test_why_unknown_job_fails(data):
    r = run("why", "nope", data=data)
    assert r.exit_code == 1 and "no job 'nope'" in r.output


def test_sql_formats(data):
    r = run("sql", "SELECT victim, preemptor FROM who_preempted", "--format", "json", data=data)
    assert json.loads(r.output) == [{"victim": "train-b", "preemptor": "infer-a"}]
    r = run("sql", "SELECT count(*) AS n FROM events", "--format", "csv", data=data)
    assert r.output.splitlines()[:2] == ["n", "77"]
    r = run("sql", "SELECT job_id FROM jobs ORDER BY job_id LIMIT 1", data=data)
    assert r.output.splitlines()[0] == "job_id" and "bad-a" in r.output
    r = run("sql", "SELECT * FROM nope", data=data)
    assert r.exit_code == 1 and "query failed" in r.output


def test_missing_projection_is_a_clear_error(tmp_path):
    r = runner.invoke(app, ["jobs", "--data", str(tmp_path)])
    assert r.exit_code == 1 and "no projection at" in r.output


def test_gap_in_log_exits_nonzero(tmp_path, messages):
    write_log(tmp_path / "gap.jsonl", messages[:5] + messages[6:])
    r = runner.invoke(
        app, ["project", "--log", str(tmp_path / "gap.jsonl"), "--db", str(tmp_path / "p.duckdb")]
    )
    assert r.exit_code == 3 and "sequence gap" in r.output


def test_humanize():
    assert [humanize_ms(x) for x in (5_000, 150_000, 3 * 3600_000, 5 * 86400_000, None)] == [
        "5s",
        "2m",
        "3h",
        "5d",
        "<unknown>",
    ]


def test_sql_prints_points_in_time_in_iso_and_the_row_count_on_stdout(data):
    # issue 32: `*_ms` points in time as ISO 8601 UTC; the count after the table, on stdout
    q = "SELECT job_id, submitted_at_ms, first_placed_at_ms FROM jobs ORDER BY job_id LIMIT 2"
    r = run("sql", q, data=data)
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["job_id", "submitted_at_ms", "first_placed_at_ms"]
    assert lines[-1] == "(2 rows)" and r.stderr == ""
    stamps = [w for ln in lines[1:-1] for w in ln.split() if w[:4].isdigit()]
    assert stamps and all(len(w) == 24 and w.endswith("Z") and w[10] == "T" for w in stamps), lines
    raw = run("sql", q, "-o", "json", "--epoch-ms", data=data)
    iso = run("sql", q, "-o", "json", data=data)
    for a, b in zip(json.loads(raw.stdout), json.loads(iso.stdout), strict=True):
        assert iso_ms(a["submitted_at_ms"]) == b["submitted_at_ms"]
    assert "rows)" not in iso.stdout  # machine formats carry the rows only


def test_iso_ms_is_utc_with_milliseconds():
    assert iso_ms(0) == "1970-01-01T00:00:00.000Z"
    assert iso_ms(1_795_771_441_369) == "2026-11-27T09:24:01.369Z"


def test_sql_writes_typed_parquet_for_scripts(data, tmp_path):
    import duckdb

    out = tmp_path / "jobs.parquet"
    q = "SELECT job_id, submitted_at_ms FROM jobs ORDER BY job_id"
    r = run("sql", q, "-o", "parquet", "--to", str(out), data=data)
    assert r.exit_code == 0, r.output
    rows = duckdb.sql(f"SELECT * FROM '{out}'").fetchall()
    jobs = run("sql", q, "-o", "json", "--epoch-ms", data=data)
    assert rows == [(j["job_id"], j["submitted_at_ms"]) for j in json.loads(jobs.stdout)]
    bad = run("sql", "SELECT * FROM nope", "-o", "parquet", "--to", str(out), data=data)
    assert bad.exit_code == 1 and "query failed" in bad.output
    assert len(bad.output.strip().splitlines()) == 1  # one line, not DuckDB's caret block


def test_tenants_show_borrowing_and_lending_limits(tmp_path):
    # given tenants configured with a borrowing limit, a lending limit, and neither
    write_log(tmp_path / "log.jsonl", config_log(TENANTS_WITH_LIMITS))
    r = run("project", "--rebuild", "--log", str(tmp_path / "log.jsonl"), data=tmp_path)
    assert r.exit_code == 0, r.output
    # when `tenants` lists them, then the table and the JSON carry both limits in GPUs
    lines = run("tenants", data=tmp_path).output.splitlines()
    assert lines[0].split()[:5] == ["NAME", "GUARANTEED", "LIMIT", "BORROW-LIMIT", "LEND-LIMIT"]
    rows = {line.split()[0]: line.split()[1:5] for line in lines[1:]}
    assert rows == {
        "a": ["4", "-", "2", "-"],
        "b": ["8", "-", "-", "1.5"],
        "c": ["1", "-", "-", "-"],
    }
    got = {
        t["tenant"]: (t["borrowing_limit_gpus"], t["lending_limit_gpus"])
        for t in json.loads(run("tenants", "-o", "json", data=tmp_path).output)
    }
    assert got == {"a": (2, None), "b": (None, 1.5), "c": (None, None)}


def test_tenants_show_per_model_limits_in_their_columns(tmp_path):
    # given a tenant with a per-model lending limit and one with both kinds of borrowing limit
    doc = {
        "tenants": [
            {"name": "p", "guaranteed": 8, "guaranteed_by_model": {"H100-80GB": 8},
             "lending_limit_by_model": {"H100-80GB": 2}},
            {"name": "r", "guaranteed": 4, "borrowing_limit": 4,
             "guaranteed_by_model": {"H100-80GB": 2}, "borrowing_limit_by_model": {"H100-80GB": 1}},
        ]
    }  # fmt: skip
    write_log(tmp_path / "log.jsonl", config_log(doc))
    r = run("project", "--rebuild", "--log", str(tmp_path / "log.jsonl"), data=tmp_path)
    assert r.exit_code == 0, r.output
    # then the limit columns name the model, and JSON and SQL carry them
    lines = run("tenants", data=tmp_path).output.splitlines()
    rows = {line.split()[0]: line.split()[3:5] for line in lines[1:]}
    assert rows == {"p": ["-", "H100-80GB=2"], "r": ["4,H100-80GB=1", "-"]}
    got = {
        t["tenant"]: (t["borrowing_limit_by_model_gpus"], t["lending_limit_by_model_gpus"])
        for t in json.loads(run("tenants", "-o", "json", data=tmp_path).output)
    }
    assert got == {"p": (None, {"H100-80GB": 2.0}), "r": ({"H100-80GB": 1.0}, None)}
    sql = run(
        "sql",
        "SELECT tenant, lending_limit_by_model->>'H100-80GB' FROM tenants ORDER BY tenant",
        "-o", "json", data=tmp_path,
    )  # fmt: skip
    assert sql.exit_code == 0, sql.output
    assert "2000" in sql.output
