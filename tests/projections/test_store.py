"""The single writer: exactly-once under crashes, redelivery, gaps; rebuild is identical."""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest

from gpuledger import events as ev
from gpuledger.projections.mappers import JsonColumn
from gpuledger.projections.store import (
    Projector,
    SequenceGap,
    _json_array,
    catch_up,
    connect_readonly,
    rebuild,
)
from gpuledger.replay.logio import write_log
from tests.projections.conftest import dump
from tests.replay.simlog import rebuilt


class Crash(Exception):
    pass


@pytest.fixture()
def clean(tmp_path, messages):
    db = tmp_path / "clean.duckdb"
    with rebuilt(messages, db) as con:
        yield dump(con)


def _dump(db):
    con = connect_readonly(db)
    try:
        return dump(con)
    finally:
        con.close()


@pytest.mark.parametrize("batch_size", [1, 7, 1000])
def test_incremental_equals_rebuild(tmp_path, messages, clean, batch_size):
    db = tmp_path / "inc.duckdb"
    with Projector(db, batch_size=batch_size) as pj:
        for m in messages[:30]:
            pj.apply(*m)
        pj.commit()
    with Projector(db, batch_size=batch_size) as pj:  # restart: state reloaded from tables
        assert pj.last_seq == 30
        pj.run(messages[30:])
    assert _dump(db) == clean


def test_rebuild_from_jsonl_log(tmp_path, messages, clean):
    log = tmp_path / "log.jsonl"
    write_log(log, messages)
    stats = rebuild(log, tmp_path / "r.duckdb")
    assert stats["events"] == stats["last_seq"] == len(messages)
    assert _dump(tmp_path / "r.duckdb") == clean
    # rebuilding over an existing projection starts from scratch
    rebuild(log, tmp_path / "r.duckdb")
    assert _dump(tmp_path / "r.duckdb") == clean


def test_crash_between_apply_and_commit(tmp_path, messages, clean):
    """Killed inside the transaction: nothing of the batch is visible; the restarted
    projector resumes at the last committed sequence and ends identical to a rebuild."""
    db = tmp_path / "c.duckdb"
    with Projector(db, batch_size=10_000) as pj:
        pj.run(messages[:20])
        for m in messages[20:50]:
            pj.apply(*m)

        def boom():
            raise Crash("killed before COMMIT")

        with pytest.raises(Crash):
            pj.commit(before_commit=boom)
        assert pj.last_seq == 20
        assert pj.projection.last_seq == 20  # in-memory state rolled back too
    assert _dump(db)["events"] == clean["events"][:20]
    with Projector(db) as pj:  # a new process
        assert pj.last_seq == 20
        pj.run(messages[20:])  # the source redelivers everything unacked
    assert _dump(db) == clean


def test_crash_between_commit_and_ack_redelivers_duplicates(tmp_path, messages, clean):
    """Committed but not acked: the source redelivers from an older point; duplicates are
    skipped (seq <= last applied) and the tables end identical to a rebuild."""
    db = tmp_path / "d.duckdb"
    with Projector(db) as pj:
        pj.run(messages[:50])  # committed; the ack "never reached" the server
    stats = catch_up(messages[10:], db)  # redelivery from seq 11
    assert stats["skipped"] == 40 and stats["applied"] == len(messages) - 50
    stats = catch_up(messages, db)  # and once more, everything
    assert stats["skipped"] == len(messages) and stats["applied"] == 0
    assert _dump(db) == clean


def test_same_process_retry_after_failed_commit(tmp_path, messages, clean):
    db = tmp_path / "e.duckdb"
    with Projector(db, batch_size=5) as pj:
        fail = {"n": 0}

        def sometimes():
            fail["n"] += 1
            if fail["n"] % 3 == 0:
                raise Crash("disk hiccup")

        i = 0
        while i < len(messages):
            chunk = messages[i : i + 5]
            for m in chunk:
                pj.apply(*m)
            try:
                pj.commit(before_commit=sometimes)
            except Crash:
                i = pj.last_seq  # redeliver from the last committed point
                continue
            i += 5
    assert _dump(db) == clean


def test_pipelined_write_failure_writes_nothing_after_it(tmp_path, messages, clean):
    """Two batches in flight: the first one's commit fails, so the second is not written
    either; the failure surfaces with the state reloaded at the last committed batch, and
    redelivering from there gives the same tables."""
    db = tmp_path / "p.duckdb"

    entered, gate, calls = threading.Event(), threading.Event(), []

    def first_fails():
        calls.append(1)
        if len(calls) == 2:  # the second batch's commit waits, then fails
            entered.set()
            gate.wait(5)
            raise Crash("disk hiccup")

    with Projector(db, batch_size=1000, pipeline=True, writes_in_flight=2) as pj:
        for m in messages[:5]:
            pj.apply(*m)
        pj.commit(before_commit=first_fails, wait=False)
        assert pj.settle() == 5
        for m in messages[5:10]:
            pj.apply(*m)
        pj.commit(before_commit=first_fails, wait=False)  # fails (once released)
        for m in messages[10:15]:
            pj.apply(*m)
        pj.commit(before_commit=first_fails, wait=False)  # queued behind the failing one
        assert entered.wait(5) and len(calls) == 2
        gate.set()
        with pytest.raises(Crash):
            pj.settle()
        assert len(calls) == 2  # the batch after the failed one was never written
        assert pj.last_seq == 5 and pj.projection.last_seq == 5
        pj.run(messages[5:])
    assert _dump(db) == clean


def test_sequence_gap_halts_loudly(tmp_path, messages):
    db = tmp_path / "g.duckdb"
    with Projector(db) as pj:
        pj.run(messages[:10])
        with pytest.raises(SequenceGap, match="expected stream sequence 11, got 13"):
            pj.run(messages[12:])
        assert pj.last_seq == 10
    with Projector(db) as pj:
        with pytest.raises(SequenceGap):
            pj.apply(*messages[15])


def test_gap_inside_a_batch_commits_nothing_of_it(tmp_path, messages):
    db = tmp_path / "h.duckdb"
    with Projector(db, batch_size=1000) as pj:
        with pytest.raises(SequenceGap):
            pj.run(messages[:5] + messages[6:])
    with Projector(db) as pj:
        assert pj.last_seq == 0  # nothing was committed; the first 5 come again


def test_undecodable_payload_is_recorded_not_skipped(tmp_path):
    db = tmp_path / "u.duckdb"
    with Projector(db) as pj:
        pj.apply_raw(
            1,
            "gl.admin.TenantConfigured",
            ev.encode(ev.TenantConfigured(tenant="org/a", guaranteed_gpu_milli=1000)),
        )
        pj.apply_raw(2, "gl.submit.org/a.x", b'{"type": "Nope.v9"}')
        pj.apply_raw(3, "gl.submit.org/a.y", b"not json")
        pj.commit()
    con = connect_readonly(db)
    rows = con.execute(
        "SELECT seq, type, payload->>'error' IS NOT NULL FROM events ORDER BY seq"
    ).fetchall()
    assert rows == [
        (1, "TenantConfigured", False),
        (2, "Undecodable", True),
        (3, "Undecodable", True),
    ]
    assert con.execute("SELECT last_seq FROM projector_meta").fetchone() == (3,)
    con.close()


def test_the_payload_array_shares_the_json_column_which_then_refuses_to_grow():
    """The writer's Arrow array of a batch's payloads is the column's own buffer: while it
    exists, the column cannot change under it (a prepared batch is never appended to)."""
    col = JsonColumn()
    col.append({"node": "gpu-é"})
    col.append([1, 2])
    arr = _json_array(col)
    assert arr.type == pa.large_string()
    assert arr.to_pylist() == ['{"node":"gpu-é"}', "[1,2]"]
    with pytest.raises(BufferError):
        col.append({"late": True})
    assert len(col) == 2 and arr.to_pylist()[1] == "[1,2]"


def test_stored_payloads_decode_to_the_folded_events(tmp_path, messages):
    """`events.payload` is each event's JSON, byte for byte what the codec encodes, whatever
    the text holds (non-ASCII included) and however the batches fall."""
    extra = ev.PendingReasonChanged(
        job_id="job-u",
        reason="Quota",
        message="wartet auf GPU ✓ — 2/3",
        producer="scheduler/0",
        occurred_at_ms=9,
    )
    log = [*messages, (len(messages) + 1, ev.subject_for(extra), extra)]
    db = tmp_path / "p.duckdb"
    with Projector(db, batch_size=7, pipeline=True) as pj:
        pj.run(log)
    con = connect_readonly(db)
    try:
        stored = con.execute("SELECT seq, payload FROM events ORDER BY seq").fetchall()
    finally:
        con.close()
    assert [s for s, _ in stored] == [s for s, _, _ in log]
    assert [p.encode() for _, p in stored] == [ev.encode(e) for _, _, e in log]
    assert ev.decode(stored[-1][1]) == extra


def test_schema_and_mappers_agree(tmp_path):
    # Store() refuses to start if schema.sql and the mappers' columns disagree
    with Projector(tmp_path / "s.duckdb") as pj:
        assert pj.last_seq == 0


def test_relaxed_gc_restores_thresholds():
    import gc

    from gpuledger.services.runtime.gctune import fewer_gc_passes as relaxed_gc

    old = gc.get_threshold()
    with relaxed_gc(123_456):
        assert gc.get_threshold()[0] == max(old[0], 123_456)
    assert gc.get_threshold() == old


def test_memory_capped_writer_writes_the_same_tables(tmp_path):
    # The writer caps DuckDB's buffer pool and checkpoints often; with DuckDB's defaults
    # (no cap, no checkpoint until close, as before) the projection is the same, table by table.
    from gpuledger.replay.bench.projector import synthetic_log

    msgs = list(synthetic_log(12_000, nodes=16))
    capped, free = tmp_path / "capped.duckdb", tmp_path / "free.duckdb"
    with Projector(
        capped, batch_size=997, checkpoint_threshold="256KB", memory_limit="32MB", pipeline=True
    ) as pj:
        pj.run(msgs)
    with Projector(free, batch_size=5000, checkpoint_threshold="64GB", memory_limit=None) as pj:
        pj.run(msgs)
    a, b = _dump(capped), _dump(free)
    assert a.keys() == b.keys()
    for table in a:
        assert a[table] == b[table], table
    assert a["events"] and a["allocations"] and a["gpu_metrics"]


def test_a_rebuild_frees_its_folded_state_before_the_collector_resumes(
    tmp_path, messages, monkeypatch
):
    """Every object made while the collector is paused sits in its youngest generation: state
    still held when it resumes would all be walked once, for nothing (about 1 s after 1 M
    events). So the rebuild's projection is gone by then."""
    import contextlib
    import weakref

    from gpuledger.projections import store

    folded: list[weakref.ref] = []
    alive_at_resume: list[int] = []
    load = store.Store.load_projection

    def tracked_load(self):
        p = load(self)
        folded.append(weakref.ref(p))
        return p

    paused = store.collector_paused

    @contextlib.contextmanager
    def watched():
        with paused():
            yield
            alive_at_resume.append(sum(r() is not None for r in folded))

    monkeypatch.setattr(store.Store, "load_projection", tracked_load)
    monkeypatch.setattr(store, "collector_paused", watched)
    log = tmp_path / "log.jsonl"
    write_log(log, messages)
    rebuild(log, tmp_path / "r.duckdb")
    assert folded  # the rebuild loaded (and folded into) a projection
    assert alive_at_resume == [0]
