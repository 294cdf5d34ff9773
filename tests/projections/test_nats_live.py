"""Live projection from a real nats-server (JetStream), including a crash before the ack."""

from __future__ import annotations

import asyncio

import nats
import pytest

from gpuledger import events as ev
from gpuledger.projections.nats_source import run_projector
from gpuledger.projections.store import connect_readonly
from gpuledger.services.runtime.nats_server import EmbeddedNats
from tests import natsauth
from tests.natsauth import as_admin
from tests.projections.conftest import dump
from tests.replay.simlog import rebuilt

pytestmark = pytest.mark.integration


@pytest.fixture()
def nats_url(tmp_path, monkeypatch):
    with EmbeddedNats(tmp_path / "js") as server:
        as_admin(monkeypatch, server)
        yield server.url


def _clean_rebuild(path, log):
    with rebuilt(log, path) as con:
        return dump(con)


def caught_up(nats_url: str, db, **options) -> int:
    """Run the projector on the test stream until it has caught up (`follow=False`); its last
    sequence (`options`: more of `run_projector`'s)."""
    return asyncio.run(
        run_projector(
            nats_url,
            db,
            connect_options=natsauth.options(),
            fetch_timeout=0.5,
            follow=False,
            **options,
        )
    )


class Killed(Exception):
    pass


def test_live_projection_with_crash_between_commit_and_ack(tmp_path, nats_url, messages):
    asyncio.run(natsauth.publish_log(nats_url, messages))
    want = _clean_rebuild(tmp_path / "clean.duckdb", asyncio.run(natsauth.stored_log(nats_url)))
    db = tmp_path / "live.duckdb"

    def die(seq: int) -> None:
        raise Killed(f"killed after committing {seq}, before the ack")

    with pytest.raises(Killed):
        caught_up(
            nats_url,
            db,
            fetch_batch=30,
            before_ack=die,
            max_commit_delay_s=0,  # commit every fetch
        )
    con = connect_readonly(db)
    assert con.execute("SELECT last_seq FROM projector_meta").fetchone() == (30,)
    con.close()

    # restarted: resumes from the database's last sequence, skips what it already holds
    last = caught_up(nats_url, db, fetch_batch=30)
    assert last == len(messages)
    con = connect_readonly(db)
    assert dump(con) == want
    con.close()

    # new events arrive later: the durable consumer continues where it stopped
    async def more():
        nc = await nats.connect(nats_url, **natsauth.options())
        js = nc.jetstream()
        e = ev.NodeHeartbeat(
            event_id="late-hb", occurred_at_ms=2_000_000, node="n1", producer="node-agent/n1"
        )
        ack = await js.publish(ev.subject_for(e), ev.encode(e))
        await nc.drain()
        return ack.seq

    seq = asyncio.run(more())
    assert caught_up(nats_url, db) == seq
    con = connect_readonly(db)
    assert con.execute("SELECT last_heartbeat_ms FROM nodes WHERE node = 'n1'").fetchone() == (
        2_000_000,
    )
    con.close()


def test_group_commit_acks_only_what_is_committed(tmp_path, nats_url, messages):
    """Under a backlog, commits group several fetches and run in the background; the first
    acknowledgement comes only after a commit covering it, and after a crash there the
    restarted projector ends identical to a rebuild."""
    asyncio.run(natsauth.publish_log(nats_url, messages))
    want = _clean_rebuild(tmp_path / "clean.duckdb", asyncio.run(natsauth.stored_log(nats_url)))
    db = tmp_path / "group.duckdb"
    acked: list[int] = []

    def die(seq: int) -> None:
        acked.append(seq)
        raise Killed(f"killed after committing {seq}, before the ack")

    with pytest.raises(Killed):
        caught_up(
            nats_url,
            db,
            fetch_batch=10,
            before_ack=die,
            commit_events=25,
            max_commit_delay_s=60,
        )
    con = connect_readonly(db)
    (stored,) = con.execute("SELECT last_seq FROM projector_meta").fetchone()
    con.close()
    # never acknowledged beyond what is committed (a write in flight may have completed
    # after the crash: redelivered, those messages are skipped by sequence)
    assert 25 <= acked[0] <= stored

    last = caught_up(nats_url, db, fetch_batch=10)
    assert last == len(messages)
    con = connect_readonly(db)
    assert dump(con) == want
    con.close()
