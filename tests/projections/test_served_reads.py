"""Reads through the projector (projections/serving.py, projections/served.py): the answers
are those of the file, only reads run, a read that runs too long is stopped, and a reader
falls back to the file when no projector serves it."""

from __future__ import annotations

import json
import socket

import pytest

from gpuledger.projections.queries import jobs_rows, why_report
from gpuledger.projections.served import ServedError, connect_served, descriptor_path
from gpuledger.projections.serving import ReadServer
from gpuledger.projections.store import Projector, connect_readonly
from tests.integration.cluster import cli
from tests.projections.conftest import dump


@pytest.fixture
def served(tmp_path, messages):
    """A projector holding a projected file and serving reads of it."""
    db = tmp_path / "projection.duckdb"
    pj = Projector(db, pipeline=True)
    pj.run(messages)
    server = ReadServer(pj.store.con, db, timeout_s=1.0).start()
    try:
        yield db, pj
    finally:
        server.close()
        pj.close()


def test_served_answers_are_the_files(served, tmp_path, messages):
    db, _ = served
    con = connect_served(db)
    assert con is not None
    try:
        jobs = jobs_rows(con)
        why = {r["job_id"]: why_report(con, r["job_id"]) for r in jobs}
        tables = dump(con)
        types = con.execute(
            "SELECT TIMESTAMP '2026-11-27 09:03:57.12' t, 1.50::DECIMAL(4,2) d,"
            " DATE '2026-11-27' dd, [1, 2] l, {'a': 1} s, NULL n"
        ).fetchone()
    finally:
        con.close()
    copy = tmp_path / "copy.duckdb"
    with Projector(copy) as pj:
        pj.run(messages)
    direct = connect_readonly(copy, served=False)
    try:
        assert jobs == jobs_rows(direct) and len(jobs) > 0
        assert why == {j: why_report(direct, j) for j in why}
        assert tables == dump(direct)
        assert (
            types
            == direct.execute(
                "SELECT TIMESTAMP '2026-11-27 09:03:57.12' t, 1.50::DECIMAL(4,2) d,"
                " DATE '2026-11-27' dd, [1, 2] l, {'a': 1} s, NULL n"
            ).fetchone()
        )
    finally:
        direct.close()


WRITES = [
    "INSERT INTO jobs (job_id) VALUES ('x')",
    "UPDATE jobs SET state = 'failed'",
    "DELETE FROM jobs",
    "CREATE TABLE t (a INT)",
    "DROP TABLE jobs",
    "ATTACH ':memory:' AS other",
    "DETACH other",
    "COPY jobs TO '/dev/null'",
    "EXPORT DATABASE '/tmp/gpuledger-never'",
    "INSTALL httpfs",
    "LOAD httpfs",
    "SET threads = 8",
    "PRAGMA threads = 8",
    "CALL pragma_version()",
    "CHECKPOINT",
    "BEGIN TRANSACTION",
    "VACUUM",
    "EXPLAIN ANALYZE DELETE FROM jobs",
    "SELECT 1; DELETE FROM jobs",
    "UPDATE projector_meta SET last_seq = 0",
]


def test_only_reads_are_served_and_the_file_is_unchanged(served):
    db, _ = served
    con = connect_served(db)
    assert con is not None
    try:
        before = dump(con)
        for sql in WRITES:
            with pytest.raises(ServedError) as refused:
                con.execute(sql)
            assert refused.value.status == 400, sql
            assert "read-only" in str(refused.value) or "Parser" in str(refused.value), sql
        assert dump(con) == before
        assert con.execute("PRAGMA table_info('jobs')").fetchall()
        assert con.execute("DESCRIBE jobs").fetchall()
        assert con.execute("EXPLAIN SELECT * FROM jobs").fetchall()
    finally:
        con.close()


def test_a_failed_query_says_why_and_a_long_read_is_stopped(served):
    db, _ = served
    con = connect_served(db)
    assert con is not None
    try:
        with pytest.raises(ServedError) as bad:
            con.execute("SELECT * FROM no_such_table")
        assert bad.value.status == 400 and bad.value.kind == "CatalogException"
        with pytest.raises(ServedError) as slow:
            con.execute("SELECT count(*) FROM range(1000000000000) a")
        assert slow.value.status == 504
        # the cursor is usable again afterwards
        assert con.execute("SELECT 41 + 1").fetchone() == (42,)
    finally:
        con.close()


def test_the_cli_reads_through_the_projector(served):
    db, pj = served
    out = cli("jobs", "--db", str(db), "-o", "json")
    assert out.returncode == 0, out.stderr
    assert {r["job_id"] for r in json.loads(out.stdout)} == {
        r["job_id"] for r in jobs_rows(connect_served(db))
    }
    q = cli("sql", "SELECT count(*) AS n FROM jobs", "--db", str(db), "-o", "json")
    assert q.returncode == 0, q.stderr
    bad = cli("sql", "DELETE FROM jobs", "--db", str(db))
    assert bad.returncode == 1 and "read-only" in bad.stderr
    assert pj.store is not None  # the projector kept its file all along


def test_without_a_projector_readers_open_the_file(tmp_path, messages):
    db = tmp_path / "projection.duckdb"
    with Projector(db) as pj:
        pj.run(messages)
    assert connect_served(db) is None  # no descriptor
    # a crashed projector's descriptor: its socket file exists, nobody listens on it
    sock_path = str(tmp_path / "projection.duckdb.sock")
    s = socket.socket(socket.AF_UNIX)
    s.bind(sock_path)
    s.close()
    descriptor_path(db).write_text(json.dumps({"socket": sock_path, "db": str(db.resolve())}))
    assert connect_served(db) is None
    out = cli("jobs", "--db", str(db), "-o", "json")
    assert out.returncode == 0, out.stderr
    assert len(json.loads(out.stdout)) > 0


def test_closing_removes_the_descriptor_and_socket(tmp_path, messages):
    db = tmp_path / "projection.duckdb"
    with Projector(db) as pj:
        pj.run(messages)
        server = ReadServer(pj.store.con, db).start()
        desc = json.loads(descriptor_path(db).read_text())
        assert oct(socket_mode(desc["socket"])) == oct(0o600)
        server.close()
        server.close()
    assert not descriptor_path(db).exists()
    assert connect_served(db) is None


def socket_mode(path: str) -> int:
    import os
    import stat

    return stat.S_IMODE(os.stat(path).st_mode)
