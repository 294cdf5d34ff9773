"""The projector never dies from one message (issue 11, cases 1 and 3): a payload it cannot
decode is recorded as an `Undecodable` row with the reason, an event its fold raises on is
logged with the reason and skipped, and the batch around them commits."""

from __future__ import annotations

import logging

import pytest

from gpuledger import events as ev
from gpuledger.projections import mappers
from gpuledger.projections.store import Projector


def submitted(job_id: str, gpus: int = 1) -> bytes:
    return ev.encode(
        ev.JobSubmitted(
            event_id=f"sub-{job_id}",
            job=ev.JobSpec(job_id=job_id, tenant="t", resources=ev.Resources(gpus=gpus)),
        )
    )


DEEP = b'{"type":"JobSubmitted.v1","x":' + b"[" * 50_000 + b"]" * 50_000 + b"}"
HUGE = (
    b'{"type":"JobSubmitted.v1","occurred_at_ms":1'
    + b"0" * 30
    + b',"job":{"job_id":"h","tenant":"t"}}'
)


def test_undecodable_payloads_are_recorded_with_their_reason_and_the_batch_commits() -> None:
    with Projector(":memory:") as pj:
        assert pj.apply_raw(1, "gl.submit.t.a", submitted("a"))
        assert pj.apply_raw(2, "gl.submit.t.deep", DEEP)
        assert pj.apply_raw(3, "gl.submit.t.h", HUGE)
        assert pj.apply_raw(4, "gl.submit.t.b", submitted("b"))
        assert pj.commit() == 4
        con = pj._store().con
        rows = con.execute(
            "SELECT seq, type, payload->>'error' FROM events ORDER BY seq"
        ).fetchall()
        jobs = [r[0] for r in con.execute("SELECT job_id FROM jobs ORDER BY job_id").fetchall()]
    assert rows[1] == (2, "Undecodable", "JSON nested deeper than 64 levels")
    assert rows[2][:2] == (3, "Undecodable") and "`$.occurred_at_ms` is outside" in rows[2][2]
    assert [r[1] for r in (rows[0], rows[3])] == ["JobSubmitted", "JobSubmitted"]
    assert jobs == ["a", "b"]


def test_an_event_the_fold_raises_on_is_logged_and_skipped(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    fold = mappers._HANDLERS[ev.JobSubmitted]

    def brittle(p, seq, event):  # a mapper bug that only this job meets
        if event.job.job_id == "poison":
            raise OverflowError("int too big to convert")
        return fold(p, seq, event)

    monkeypatch.setitem(mappers._HANDLERS, ev.JobSubmitted, brittle)
    with caplog.at_level(logging.ERROR, "gpuledger.projector"), Projector(":memory:") as pj:
        assert pj.apply_raw(1, "gl.submit.t.poison", submitted("poison"))
        assert pj.apply_raw(2, "gl.submit.t.fine", submitted("fine"))
        assert pj.commit() == 2
        jobs = [r[0] for r in pj._store().con.execute("SELECT job_id FROM jobs").fetchall()]
    assert pj.failed == 1
    assert jobs == ["fine"]
    (record,) = caplog.records
    assert "seq=1" in record.getMessage() and "OverflowError" in record.getMessage()
