"""Readers and the single writer share one DuckDB file: a reader holding it delays the
projector's commits but never loses what it folded; a busy file is a clear error for readers."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gpuledger.projections.store import ProjectionBusy, Projector, connect_readonly
from tests.integration.cluster import cli
from tests.projections.conftest import dump

HOLD = "import duckdb, sys; c = duckdb.connect(sys.argv[1], read_only=sys.argv[2] == 'ro'); print('held', flush=True); sys.stdin.read()"


def hold(db, mode: str) -> subprocess.Popen:
    """Another process holding `db` (read-only or for writing) until its stdin closes."""
    p = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(db), mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert p.stdout.readline().strip() == "held"
    return p


def release(p: subprocess.Popen) -> None:
    p.stdin.close()
    p.wait(10)


def test_a_reader_holding_the_file_delays_commits_and_loses_nothing(tmp_path, messages):
    clean_db = tmp_path / "clean.duckdb"
    with Projector(clean_db) as pj:
        pj.run(messages)
    db = tmp_path / "live.duckdb"
    with Projector(db, batch_size=7, pipeline=True) as pj:
        pj.run(messages[:10])
        pj.release()  # idle: the projector lets readers in
        reader = hold(db, "ro")
        try:
            for m in messages[10:]:
                pj.apply(*m)  # full batches cannot be written meanwhile: they wait, folded
            with pytest.raises(ProjectionBusy) as busy:
                pj.commit()
            assert busy.value.holder == f"PID {reader.pid}"
        finally:
            release(reader)
        assert pj.commit() == len(messages)
    con = connect_readonly(db)
    got = dump(con)
    con.close()
    con = connect_readonly(clean_db)
    assert got == dump(con)
    con.close()


def test_a_cli_read_of_a_file_another_writer_keeps_busy_fails_with_exit_4(tmp_path, messages):
    db = tmp_path / "p.duckdb"
    with Projector(db) as pj:
        pj.run(messages[:5])
    writer = hold(db, "rw")
    try:
        out = cli("jobs", "--db", str(db), timeout=60)
    finally:
        release(writer)
    assert out.returncode == 4
    assert out.stderr.startswith(
        f"error: projection busy: {db} is held by another process (PID {writer.pid})"
    )
    assert cli("jobs", "--db", str(db)).returncode == 0
