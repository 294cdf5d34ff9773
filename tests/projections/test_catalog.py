"""The projection's catalog: a comment on every table and column, TIMESTAMP views beside the
`_ms` times, the audit views' answers, and docs/projections.md generated from the schema."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from gpuledger.projections import catalog
from gpuledger.projections.store import Projector, Store

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def con(messages):
    pj = Projector(":memory:")
    pj.run(messages)
    yield pj.store.con
    pj.close()


def test_every_table_and_column_and_view_has_a_comment(con):
    tables = con.execute(
        "SELECT table_name, comment FROM duckdb_tables() WHERE NOT internal"
    ).fetchall()
    assert {t for t, c in tables if not c} == set()
    assert {"jobs", "allocations", "events", "refusals"} <= {t for t, _ in tables}
    missing = con.execute(
        "SELECT c.table_name || '.' || c.column_name FROM duckdb_columns() c"
        " JOIN duckdb_tables() t USING (table_name) WHERE NOT t.internal AND c.comment IS NULL"
    ).fetchall()
    assert missing == []
    views = con.execute(
        "SELECT view_name, comment FROM duckdb_views() WHERE NOT internal"
    ).fetchall()
    assert {v for v, c in views if not c} == set()
    missing = con.execute(
        "SELECT c.table_name || '.' || c.column_name FROM duckdb_columns() c"
        " JOIN duckdb_views() v ON v.view_name = c.table_name AND v.schema_name = c.schema_name"
        " WHERE NOT v.internal AND c.comment IS NULL"
    ).fetchall()
    assert missing == []  # every view's columns too (the `_ts` ones included)


def test_every_ms_column_is_a_time_with_a_timestamp_beside_it_or_a_declared_duration(con):
    for t in catalog.base_tables(con):
        for name, _typ, _ in catalog.columns(con, t):
            if not name.endswith("_ms"):
                continue
            if name in catalog.DURATION_MS:
                continue
            ts = dict((c, typ) for c, typ, _ in catalog.columns(con, f"{t}_ts"))
            assert ts.get(name[:-3]) == "TIMESTAMP", f"{t}.{name}"
    row = con.execute(
        "SELECT submitted_at_ms, submitted_at FROM jobs_ts WHERE job_id = 'train-b'"
    ).fetchone()
    assert row == (1000, dt.datetime(1970, 1, 1, 0, 0, 1))


def test_total_wait_counts_the_wait_after_a_requeue(con):
    rows = {
        r[0]: r[1:]
        for r in con.execute(
            "SELECT job_id, total_wait_s, first_wait_s, requeued_wait_s, waits, waiting_now"
            " FROM job_wait_total"
        ).fetchall()
    }
    # train-b: 1 s to its first placement, reclaimed at 600 s, pending again from 606 s to now (1260 s)
    assert rows["train-b"] == (655.0, 1.0, 654.0, 2, True)
    assert rows["big-b"] == (650.0, None, None, 1, True)
    assert "bad-a" not in rows  # rejected: never waited in the queue
    top = con.execute("SELECT rank, job_id FROM longest_waiters ORDER BY rank LIMIT 2").fetchall()
    assert top == [(1, "train-b"), (2, "big-b")]


def test_daily_views_use_dates(con):
    assert con.execute(
        "SELECT tenant, day, round(gpu_hours, 3), round(borrowing_gpu_hours, 3), jobs"
        " FROM gpu_hours_daily ORDER BY tenant"
    ).fetchall() == [
        ("org/a", dt.date(1970, 1, 1), 1.591, 0.0, 3),
        ("org/b", dt.date(1970, 1, 1), 1.342, 1.342, 1),
    ]
    assert con.execute(
        "SELECT tenant, day, preemptions, reclaim, round(lost_gpu_hours, 4) FROM preemptions_daily"
    ).fetchall() == [("org/b", dt.date(1970, 1, 1), 1, 1, 0.0111)]


def test_gpu_hours_are_split_at_midnight():
    s = Store(":memory:")
    c = s.con
    # one whole GPU held from 23:00 on day 0 to 01:00 on day 1
    c.execute(
        "INSERT INTO allocations (allocation_id, job_id, tenant, rank, node, gpu_index, gpu_milli,"
        " placed_at_ms, ended_at_ms) VALUES ('j#1', 'j', 't', 0, 'n', 0, 1000, ?, ?)",
        [23 * 3600_000, 25 * 3600_000],
    )
    c.execute("UPDATE projector_meta SET updated_at_ms = ?", [26 * 3600_000])
    assert c.execute("SELECT day, gpu_hours FROM gpu_hours_daily ORDER BY day").fetchall() == [
        (dt.date(1970, 1, 1), 1.0),
        (dt.date(1970, 1, 2), 1.0),
    ]
    s.close()


def test_reopening_a_file_keeps_the_catalog_without_rewriting_it(tmp_path):
    db = tmp_path / "p.duckdb"
    Store(db).close()
    wal = db.with_name(db.name + ".wal")
    s = Store(db)
    assert catalog.is_current(s.con, catalog_base())
    assert not wal.exists() or wal.stat().st_size == 0  # nothing written by a reopen
    s.close()


def catalog_base() -> str:
    from gpuledger.projections.store import schema_sql, views_sql

    return schema_sql() + views_sql()


def test_the_column_list_in_docs_is_generated_from_the_schema():
    text = (ROOT / "docs" / "projections.md").read_text()
    start, end = text.index(catalog.BEGIN), text.index(catalog.END) + len(catalog.END)
    assert text[start:end] == catalog.catalog_markdown(), (
        "docs/projections.md is out of date: run `gpuledger schema --projection --update docs/projections.md`"
    )


def test_the_generated_list_is_the_catalog_the_projector_creates():
    s = Store(":memory:")
    try:
        assert catalog.markdown(s.con) == catalog.catalog_markdown()
    finally:
        s.close()
