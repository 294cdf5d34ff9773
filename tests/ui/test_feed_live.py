"""`gpuledger ui --nats-url`: the dashboard's own projection, fed from a real nats-server as
the read-only auditor, equal to a rebuild of the same log, while the projector's durable
consumer is left alone."""

from __future__ import annotations

import asyncio

import pytest

from gpuledger import events as ev
from gpuledger.projections.store import connect_readonly
from gpuledger.projections.ui.feed import feed
from gpuledger.services.runtime.bus import Bus
from gpuledger.services.runtime.nats_server import EmbeddedNats
from tests import natsauth
from tests.natsauth import as_admin, publish_log, stored_log
from tests.projections import scenario
from tests.projections.conftest import dump
from tests.projections.test_nats_live import _clean_rebuild
from tests.waiting import eventually_async

pytestmark = pytest.mark.integration


async def test_the_feed_reads_as_the_auditor_and_matches_a_rebuild(tmp_path, monkeypatch):
    messages = scenario.build()
    with EmbeddedNats(tmp_path / "js") as server:
        as_admin(monkeypatch, server)
        await publish_log(server.url, messages[:50])
        stop = asyncio.Event()
        commits: list[int] = []
        db = tmp_path / "ui.duckdb"
        task = asyncio.create_task(
            feed(
                server.url,
                db,
                connect_options=server.client_options("auditor"),
                stop=stop,
                on_commit=commits.append,
            )
        )
        await eventually_async(lambda: commits and commits[-1] == 50, what="50 events committed")
        con = connect_readonly(db, wait_s=5)  # the file is free between commits
        con.close()
        nc_bus = await Bus.connect(server.url, **natsauth.options())
        try:  # more events arrive while the dashboard runs
            for _seq, subject, event in messages[50:]:
                await nc_bus.js.publish(
                    subject, ev.encode(event), headers={"Nats-Msg-Id": event.event_id}
                )
            await eventually_async(
                lambda: commits[-1] == len(messages), what="every event committed"
            )
            names = await nc_bus.js.consumers_info("GPULEDGER")
        finally:
            await nc_bus.close()
        stop.set()
        assert await asyncio.wait_for(task, 10) == len(messages)
        assert [c.name for c in names if c.config.durable_name] == []  # no durable consumer made
        stored = await stored_log(server.url)
    con = connect_readonly(db)
    try:
        live = dump(con)
    finally:
        con.close()
    assert live == _clean_rebuild(tmp_path / "rebuilt.duckdb", stored)
