"""`gpuledger export --format parquet DIR`: the log as a Hive-partitioned Parquet history,
appended to exactly once per event, read back as a log, queried like the projection."""

from __future__ import annotations

from pathlib import Path

import pyarrow.dataset as ds
import pytest
from typer.testing import CliRunner

from gpuledger.projections.store import rebuild
from gpuledger.replay import parquet
from gpuledger.replay.logio import encode_lines, read_log, write_log
from gpuledger.replay.scenario import load
from gpuledger.replay.simulator import simulate
from gpuledger.services.cli.main import app

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def demo_log(tmp_path_factory) -> Path:
    log = tmp_path_factory.mktemp("demo") / "demo.jsonl"
    write_log(log, simulate(load(EXAMPLES / "demo.yaml")).log)
    return log


def gl(*args: str):
    return CliRunner().invoke(app, [str(a) for a in args])


def test_a_log_exported_to_parquet_reads_back_as_the_same_log(demo_log, tmp_path):
    out = tmp_path / "history"
    done = parquet.export_events(out, read_log(demo_log))
    assert done["appended"] == 48 and done["last_seq"] == 48
    back = b"".join(encode_lines(parquet.read_history(out)))
    assert back == demo_log.read_bytes()


def test_the_layout_is_hive_partitioned_by_day_with_typed_columns(demo_log, tmp_path):
    out = tmp_path / "history"
    parquet.export_events(out, read_log(demo_log))
    table = ds.dataset(out / "events", format="parquet", partitioning="hive").to_table()
    assert table.num_rows == 48
    assert set(table.column("date").to_pylist()) == {"1970-01-01"}  # the demo's virtual clock
    rows = table.sort_by("seq").to_pylist()
    submitted = [r for r in rows if r["type"] == "JobSubmitted"]
    assert {r["tenant"] for r in submitted} == {"research", "product", "nobody"}
    assert all(r["job"] and r["body"].startswith("{") for r in submitted)
    placed = next(r for r in rows if r["type"] == "GangPlaced")
    assert placed["input_seq"] is not None and placed["leader_epoch"] is not None


def test_a_rerun_appends_only_the_new_events(demo_log, tmp_path):
    out = tmp_path / "history"
    entries = list(read_log(demo_log))
    first = parquet.export_events(out, entries[:30])
    again = parquet.export_events(out, entries[:30])
    rest = parquet.export_events(out, entries)
    assert (first["appended"], again["appended"], rest["appended"]) == (30, 0, 18)
    seqs = ds.dataset(out / "events", partitioning="hive").to_table().column("seq").to_pylist()
    assert sorted(seqs) == list(range(1, 49))
    assert parquet.read_manifest(out)["last_seq"] == 48


def test_an_interrupted_export_is_written_exactly_once_by_the_next(demo_log, tmp_path, monkeypatch):
    out = tmp_path / "history"
    entries = list(read_log(demo_log))
    parquet.export_events(out, entries[:20])

    def crash(path, data):
        raise OSError("killed before the manifest was renamed")

    with monkeypatch.context() as m:
        m.setattr(parquet, "_write_atomic", crash)
        with pytest.raises(OSError):
            parquet.export_events(out, entries[:35])  # its part file is on disk, unlisted
    assert len(list((out / "events").glob("date=*/*.parquet"))) == 2
    assert [s for s, _, _ in parquet.read_history(out)] == list(range(1, 21))
    done = parquet.export_events(out, entries)
    assert done["appended"] == 28
    seqs = ds.dataset(out / "events", partitioning="hive").to_table().column("seq").to_pylist()
    assert sorted(seqs) == list(range(1, 49))


def test_export_cli_appends_and_writes_the_projection_tables(demo_log, tmp_path):
    out = tmp_path / "history"
    r = gl("export", "--format", "parquet", out, "--from", demo_log)
    assert r.exit_code == 0, r.output
    assert "appended 48 events" in r.output and "tables" in r.output
    assert (out / "tables" / "jobs.parquet").exists()
    r = gl("export", "--format", "parquet", "--out", out, "--from", demo_log)
    assert "appended 0 events" in r.output and "48 rows in all" in r.output


@pytest.mark.parametrize(
    "query",
    [
        "SELECT state, count(*) AS n FROM jobs GROUP BY state ORDER BY state",
        "SELECT type, count(*) AS n, max(seq) AS last FROM events GROUP BY type ORDER BY type",
        "SELECT j.priority_class, sum(a.gpu_milli) FROM allocations a JOIN jobs j USING (job_id) GROUP BY 1 ORDER BY 1",
    ],
)
def test_a_query_over_the_parquet_equals_the_same_over_the_projection(demo_log, tmp_path, query):
    out, db = tmp_path / "history", tmp_path / "p.duckdb"
    assert gl("export", "--format", "parquet", out, "--from", demo_log).exit_code == 0
    rebuild(demo_log, db)
    over_parquet = gl("sql", "--parquet", out, "-o", "json", query)
    over_projection = gl("sql", "--db", db, "-o", "json", query)
    assert over_parquet.exit_code == 0, over_parquet.output
    assert over_parquet.output == over_projection.output
    assert over_parquet.output.count("{") >= 2


def test_verify_and_replay_read_a_parquet_history_as_a_log(demo_log, tmp_path):
    out = tmp_path / "history"
    gl("export", "--format", "parquet", out, "--from", demo_log, "--no-tables")
    r = gl("verify", out)
    assert r.exit_code == 0 and "48 events, 24 decisions re-decided, 0 mismatches" in r.output
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    assert gl("replay", out, "--out", a).exit_code == 0
    assert gl("replay", demo_log, "--out", b).exit_code == 0
    assert a.read_bytes() == b.read_bytes()


def test_bad_targets_are_one_line_errors(demo_log, tmp_path):
    r = gl("sql", "--parquet", tmp_path, "SELECT 1")
    assert r.exit_code == 2
    assert (
        r.output.strip()
        == f"error: {tmp_path}: no _gpuledger_manifest.json (not a gpuledger Parquet export)"
    )
    r = gl("export", "--format", "parquet", demo_log, "--from", demo_log)
    assert r.exit_code == 2 and "writes a directory" in r.output
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / parquet.MANIFEST).write_text("{not json")
    r = gl("verify", bad)
    assert r.exit_code == 2 and "not a gpuledger Parquet manifest" in r.output


def test_a_long_log_is_written_in_bounded_batches_and_reads_back_whole(
    demo_log, tmp_path, monkeypatch
):
    monkeypatch.setattr(parquet, "BATCH_ROWS", 10)
    out = tmp_path / "history"
    done = parquet.export_events(out, read_log(demo_log))
    assert len(done["files"]) == 5  # 48 rows in batches of 10
    assert b"".join(encode_lines(parquet.read_history(out))) == demo_log.read_bytes()
