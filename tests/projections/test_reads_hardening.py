"""The reads socket is locked down (projections/serving.py `harden`, `REFUSED_FUNCTIONS`,
the byte cap; docs/security.md "The reads socket"): a served read cannot read a file, install
or load an extension, change a setting, checkpoint the database or run SQL given as a string,
and an answer over its byte cap is refused before it is sent, while the projector keeps
writing its own file."""

from __future__ import annotations

import pytest

from gpuledger.projections.served import ServedError, connect_served
from gpuledger.projections.serving import ReadServer


@pytest.fixture
def served(tmp_path, messages):
    """A projector serving reads of its projection, with a 1 MiB byte cap per answer."""
    from gpuledger.projections.store import Projector

    db = tmp_path / "projection.duckdb"
    pj = Projector(db, pipeline=True)
    pj.run(messages[: len(messages) // 2])
    server = ReadServer(pj.store.con, db, timeout_s=5.0, max_bytes=1024 * 1024).start()
    con = connect_served(db)
    assert con is not None
    try:
        yield con, pj, messages[len(messages) // 2 :]
    finally:
        con.close()
        server.close()
        pj.close()


def refusal(con, sql: str) -> ServedError:
    with pytest.raises(ServedError) as err:
        con.execute(sql)
    return err.value


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM read_text('/etc/passwd')",
        "SELECT * FROM read_csv('/etc/passwd')",
        "SELECT * FROM read_blob('/proc/self/environ')",
        "SELECT * FROM glob('/*')",
        "SELECT * FROM parquet_metadata('/etc/passwd')",
    ],
)
def test_a_read_cannot_open_a_file(served, sql):
    con, _, _ = served
    err = refusal(con, sql)
    assert err.status == 400 and err.kind == "PermissionException"
    assert "file system operations are disabled by configuration" in str(err)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM checkpoint()",
        "SELECT * FROM force_checkpoint()",
        "SELECT * FROM (SELECT 1) x, main.checkpoint()",
        "WITH c AS (SELECT * FROM checkpoint()) SELECT * FROM c",
        "SELECT * FROM query('CHECKPOINT')",
        "SELECT nextval('s')",
        "SELECT setseed(0.5)",
        "SELECT * FROM duckdb_secrets()",
        "SELECT * FROM json_execute_serialized_sql('{}')",
    ],
)
def test_a_read_cannot_name_a_function_that_changes_state(served, sql):
    con, _, _ = served
    err = refusal(con, sql)
    assert err.status == 400 and err.kind == "PermissionException"
    assert "changes state or runs other SQL: not served" in str(err)


@pytest.mark.parametrize(
    ("sql", "said"),
    [
        (
            "INSTALL httpfs",
            "read-only: LOAD statements are not served",
        ),  # DuckDB: INSTALL is a LOAD
        ("LOAD httpfs", "read-only: LOAD statements are not served"),
        ("SET enable_external_access = true", "read-only: SET statements are not served"),
        ("SET lock_configuration = false", "read-only: SET statements are not served"),
    ],
)
def test_a_read_cannot_install_an_extension_or_change_a_setting(served, sql, said):
    con, _, _ = served
    assert said in str(refusal(con, sql))


def test_the_lock_holds_under_the_statement_check(served):
    """Given the database the projector serves, when anything on it (its own writer
    included) tries to reopen file access or install an extension, DuckDB itself refuses:
    the statement check is not the only guard."""
    import duckdb

    _, pj, _ = served
    with pytest.raises(duckdb.InvalidInputException, match="configuration has been locked"):
        pj.store.con.execute("SET enable_external_access = true")
    with pytest.raises(duckdb.PermissionException):
        pj.store.con.execute("INSTALL httpfs")
    settings = dict(
        pj.store.con.execute(
            "SELECT name, value FROM duckdb_settings() WHERE name IN ('enable_external_access',"
            " 'autoinstall_known_extensions', 'autoload_known_extensions', 'lock_configuration')"
        ).fetchall()
    )
    assert settings == {
        "enable_external_access": "false",
        "autoinstall_known_extensions": "false",
        "autoload_known_extensions": "false",
        "lock_configuration": "true",
    }


def test_an_answer_over_the_byte_cap_is_refused_and_a_smaller_one_is_served(served):
    con, _, _ = served
    huge = refusal(con, "SELECT repeat('x', 4 * 1024 * 1024) AS s")
    assert huge.status == 413 and "over 1,048,576 bytes" in str(huge)
    many = refusal(con, "SELECT repeat('x', 1000) FROM range(2000)")
    assert many.status == 413
    arrow = pytest.raises(ServedError, con.arrow_ipc, "SELECT repeat('x', 2000000) AS s")
    assert arrow.value.status == 413
    (row,) = con.execute("SELECT length(repeat('x', 100000))").fetchall()
    assert row == (100000,)


def test_the_projector_keeps_writing_its_file_after_the_refusals(served):
    """Given a served, hardened projection, when the projector folds the rest of the log
    after a refused checkpoint and file read, then a read sees every event folded."""
    con, pj, rest = served
    refusal(con, "SELECT * FROM checkpoint()")
    refusal(con, "SELECT * FROM read_text('/etc/passwd')")
    before = con.execute("SELECT count(*) FROM events").fetchone()[0]
    pj.run(rest)
    after = con.execute("SELECT count(*) FROM events").fetchone()[0]
    assert (
        after > before
        and pj.last_seq == con.execute("SELECT last_seq FROM projector_meta").fetchone()[0]
    )


def test_sql_stopped_at_its_time_limit_prints_one_line_and_exits_4(tmp_path, messages):
    """Given a projector whose reads stop after 1 s, when `gpuledger sql` runs a longer
    query, then it prints one line naming the limit (no traceback) and exits 4; an answer
    over the byte cap is one line and exit 1."""
    from gpuledger.projections.store import Projector
    from tests.integration.cluster import cli

    db = tmp_path / "projection.duckdb"
    with Projector(db) as pj:
        pj.run(messages)
        server = ReadServer(pj.store.con, db, timeout_s=1.0, max_bytes=1024 * 1024).start()
        try:
            slow = cli("sql", "SELECT count(*) FROM range(1000000000000) a", "--db", str(db))
            big = cli("sql", "SELECT repeat('x', 4 * 1024 * 1024)", "--db", str(db))
        finally:
            server.close()
    assert slow.returncode == 4, slow.stderr
    assert slow.stderr.splitlines() == [
        "error: query stopped: the read ran longer than 1s and was stopped;"
        " narrow it (a WHERE, a LIMIT)"
    ]
    assert big.returncode == 1 and len(big.stderr.splitlines()) == 1, big.stderr
    assert big.stderr.startswith("error: query failed: the answer is over 1,048,576 bytes")
