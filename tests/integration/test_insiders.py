"""Issue 30 against a real nats-server: what an insider holding one legitimate credential can
publish on its own subjects, and what the acceptance rules then refuse (docs/security.md has
the table; each test here is one row of it).

Given a log built with each role's own credential (nodes register with their node keys, the
admission and scheduler keys decide), when a principal publishes a fact about something it
does not own, on a subject its credential allows, then the server stores it and the fold
refuses it (the projection records the refusal with its code and changes nothing else); the
same fact from the owner is folded (a positive control in every test)."""

from __future__ import annotations

import asyncio
import json
import time

import nats
import pytest
from structlog.testing import capture_logs

from gpuledger import events as ev
from gpuledger.events import subject_for
from gpuledger.events.reasons import FoldRefusal
from gpuledger.projections.nats_source import DURABLE, ProjectorStatus, run_projector
from gpuledger.projections.queries import jobs_rows
from gpuledger.projections.store import connect_readonly
from gpuledger.services.runtime.nats_server import EmbeddedNats
from tests import natsauth
from tests.waiting import eventually_async

pytestmark = pytest.mark.integration

NODES = ("node-1", "node-2")


def gpu(i: int) -> ev.GpuInfo:
    return ev.GpuInfo(index=i, uuid=f"GPU-{i}", model="H100-80GB", memory_mib=81920, clique="c0")


async def publish_as(server: EmbeddedNats, principal: str, *events: ev.Event) -> None:
    """Publish `events` on their own subjects with `principal`'s credential (JetStream acks
    each one: the server accepted it)."""
    nc = await nats.connect(server.url, allow_reconnect=False, **server.client_options(principal))
    try:
        js = nc.jetstream(timeout=5)
        for e in events:
            await js.publish(subject_for(e), ev.encode(e))
    finally:
        await nc.close()


def project(server: EmbeddedNats, db) -> None:
    asyncio.run(
        run_projector(
            server.url, db, connect_options=natsauth.options(), fetch_timeout=0.5, follow=False
        )
    )


def refusals(db) -> list[tuple]:
    con = connect_readonly(db)
    try:
        return con.execute("SELECT type, producer, code FROM refusals ORDER BY seq").fetchall()
    finally:
        con.close()


@pytest.fixture
def cluster(monkeypatch):
    """A server with the stream, two nodes registered by their own agents, and job `a`
    admitted and placed (by the admission and scheduler keys) on node-2."""
    with EmbeddedNats() as server:
        natsauth.as_admin(monkeypatch, server)
        server.add_principals(*(f"node:{n}" for n in NODES))

        async def given() -> None:
            from gpuledger.services.runtime.bus import Bus

            bus = await Bus.connect(server.url, **natsauth.options())
            await bus.ensure_stream()
            await bus.close()
            for n in NODES:
                info = ev.NodeInfo(
                    name=n, cpu_milli=64000, memory_mib=512000, gpus=(gpu(0), gpu(1))
                )
                await publish_as(
                    server, f"node:{n}", ev.NodeRegistered(node=info, producer=f"node-agent/{n}")
                )
            spec = ev.JobSpec(job_id="a", tenant="org/a", resources=ev.Resources(gpus=2))
            await publish_as(server, "admin", ev.JobSubmitted(event_id="s-a", job=spec))
            await publish_as(
                server,
                "admission",
                ev.JobAdmitted(
                    job_id="a",
                    tenant="org/a",
                    priority_class="train",
                    priority=50,
                    preemptible=True,
                    slo_class="batch",
                    producer="admission/0",
                ),
            )
            member = ev.MemberPlacement(rank=0, node="node-2", gpus=(0, 1))
            await publish_as(
                server,
                "scheduler",
                ev.GangPlaced(
                    job_id="a",
                    allocation_id="a#1",
                    tenant="org/a",
                    members=(member,),
                    producer="scheduler/0",
                ),
            )

        asyncio.run(given())
        yield server


def member_fact(kind: str, node: str, event_id: str) -> ev.Event:
    common = dict(
        event_id=event_id,
        job_id="a",
        allocation_id="a#1",
        rank=0,
        node=node,
        producer=f"node-agent/{node}",
    )
    if kind == "MemberStarted":
        return ev.MemberStarted(**common)
    if kind == "MemberCheckpointed":
        return ev.MemberCheckpointed(step=3, progress_ms=500, **common)
    return ev.MemberExited(outcome="completed", **common)


def evidence(db, kind: str):
    """What the projection shows of a's member fact of type `kind` (None: nothing)."""
    con = connect_readonly(db)
    try:
        (a,) = jobs_rows(con)
        assert a["state"] == "running"
        if kind == "MemberCheckpointed":
            return a["progress_ms"] or None
        column = "started_at_ms" if kind == "MemberStarted" else "end_reason"
        return con.execute(f"SELECT {column} FROM allocations WHERE job_id = 'a'").fetchone()[0]
    finally:
        con.close()


@pytest.mark.parametrize("kind", ["MemberStarted", "MemberCheckpointed", "MemberExited"])
def test_a_node_key_cannot_report_on_another_nodes_member(cluster, tmp_path, kind):
    # when node-1, with its own key and on its own subject, reports a's member (on node-2)
    asyncio.run(publish_as(cluster, "node:node-1", member_fact(kind, "node-1", "forged")))
    db = tmp_path / "p.duckdb"
    project(cluster, db)
    # then the fold refuses it: job a keeps running on node-2, its member untouched
    assert refusals(db) == [(kind, "node-agent/node-1", FoldRefusal.WrongNode)]
    assert evidence(db, kind) is None
    # control: node-2, which runs the member, is believed
    asyncio.run(publish_as(cluster, "node:node-2", member_fact(kind, "node-2", "real")))
    project(cluster, db)
    assert len(refusals(db)) == 1
    assert evidence(db, kind) is not None


def test_a_node_key_cannot_claim_another_nodes_name(cluster, tmp_path):
    # when node-1 publishes, on its own subject, a fact that claims to come from node-2
    forged = member_fact("MemberExited", "node-2", "claims-node-2")

    async def publish() -> None:
        nc = await nats.connect(cluster.url, **cluster.client_options("node:node-1"))
        try:
            await nc.jetstream(timeout=5).publish("gl.node.node-1.MemberExited", ev.encode(forged))
        finally:
            await nc.close()

    asyncio.run(publish())
    db = tmp_path / "p.duckdb"
    project(cluster, db)
    # then it is refused for its subject, and a's member has not exited
    assert refusals(db) == [("MemberExited", "node-agent/node-2", "WrongSubject")]
    assert evidence(db, "MemberExited") is None


# ---------------------------------------------------------------------- the quota role


def test_the_quota_key_cannot_set_a_guarantee_no_schedule_sets(monkeypatch, tmp_path):
    """Given the day/night schedules in force, when the quota key publishes on its own subject
    a guarantee of 1,000,000 GPUs for a tenant, then it is stored and refused `NotScheduled`,
    and on the operator's subject it is not even stored; the changes quota's own decide makes
    at that time are folded (control)."""
    from gpuledger.services.domain.fold.ledger import Ledger
    from gpuledger.services.domain.inputs.configfile import config_events
    from gpuledger.services.quota.decider import Quota
    from tests.integration.test_security import Client
    from tests.services.test_schedules import doc

    now = int(time.time() * 1000)
    config = config_events(doc(), at_ms=now - 1000)
    with EmbeddedNats() as server:
        natsauth.as_admin(monkeypatch, server)

        async def scenario() -> None:
            from gpuledger.services.runtime.bus import Bus

            bus = await Bus.connect(server.url, **natsauth.options())
            await bus.ensure_stream()
            await bus.close()
            await publish_as(server, "admin", *config)
            forged = ev.TenantConfigured(
                event_id="forged",
                tenant="inference",
                guaranteed_gpu_milli=1_000_000 * 1000,
                producer="quota/0",
                occurred_at_ms=now,
                correlation_id="schedule:day",
            )
            await publish_as(server, "quota", forged)
            quota = await Client.connect(server, "quota")
            try:
                await quota.refused(
                    quota.js.publish("gl.admin.TenantConfigured", ev.encode(forged)),
                    "gl.admin.TenantConfigured",
                )
            finally:
                await quota.close()
            ledger = Ledger()
            for seq, e in enumerate(config, 1):
                ledger.apply(seq, e)
            await publish_as(server, "quota", *Quota().decide(ledger, now))

        asyncio.run(scenario())
        db = tmp_path / "p.duckdb"
        project(server, db)

    assert refusals(db) == [("TenantConfigured", "quota/0", FoldRefusal.NotScheduled)]
    con = connect_readonly(db)
    try:
        rows = dict(con.execute("SELECT tenant, guaranteed_gpu_milli FROM tenants").fetchall())
        stored = con.execute(
            "SELECT count(*) FROM events WHERE subject = 'gl.admin.TenantConfigured'"
        ).fetchone()
    finally:
        con.close()
    assert rows["inference"] in (0, 6000) and rows["training"] in (2000, 8000)  # as scheduled
    assert stored == (len([e for e in config if isinstance(e, ev.TenantConfigured)]),)


# ---------------------------------------------------------------------- the projector's consumer


HIJACK = {  # what a reader could send before issue 30: an "ephemeral" create naming the durable
    "stream_name": "GPULEDGER",
    "config": {"name": DURABLE, "filter_subject": "gl.dead.>", "ack_policy": "all"},
}


async def replace_projector_consumer(server: EmbeddedNats) -> None:
    """Replace the projector's durable with a `gl.dead.>` one, as the operator (the one
    identity still allowed to)."""
    nc = await nats.connect(server.url, **server.client_options("admin"))
    try:
        reply = await nc.request(
            "$JS.API.CONSUMER.CREATE.GPULEDGER", json.dumps(HIJACK).encode(), timeout=5
        )
        assert b'"filter_subject":"gl.dead.' in reply.data, reply.data
    finally:
        await nc.close()


def submissions(*ids: str) -> list[ev.Event]:
    return [
        ev.JobSubmitted(
            event_id=f"s-{i}",
            job=ev.JobSpec(job_id=i, tenant="org/a", resources=ev.Resources(gpus=1)),
        )
        for i in ids
    ]


def projected_events(db) -> int:
    con = connect_readonly(db)
    try:
        return con.execute("SELECT count(*) FROM events").fetchone()[0]
    finally:
        con.close()


def test_the_projector_recreates_a_replaced_consumer_on_start(cluster, tmp_path):
    db = tmp_path / "p.duckdb"
    project(cluster, db)
    before = projected_events(db)
    asyncio.run(replace_projector_consumer(cluster))
    asyncio.run(publish_as(cluster, "admin", *submissions("x", "y")))
    with capture_logs() as logs:
        project(cluster, db)
    replaced = [e for e in logs if e["event"] == "projector.consumer_replaced"]
    assert len(replaced) == 1 and "gl.dead.>" in replaced[0]["differs"], logs
    assert projected_events(db) == before + 2


async def test_a_running_projector_recovers_when_its_consumer_is_replaced(cluster, tmp_path):
    db = tmp_path / "p.duckdb"
    status = ProjectorStatus()
    stop = asyncio.Event()
    task = asyncio.create_task(
        run_projector(
            cluster.url,
            db,
            connect_options=natsauth.options(),
            fetch_timeout=0.2,
            follow=True,
            stop=stop,
            status=status,
        )
    )
    try:
        await until(lambda: status.committed_seq == 5, what="the first 5 events projected")
        await replace_projector_consumer(cluster)
        await publish_as(cluster, "admin", *submissions("x", "y"))
        await until(lambda: status.committed_seq == 7, what="the 2 new events projected")
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


async def until(cond, timeout_s: float = 20.0, what: str = "condition"):
    await eventually_async(cond, timeout_s, what)


async def test_a_readers_ordered_consumer_is_renamed_when_nats_py_recreates_it(cluster):
    """Readers name their ordered consumers (the only create they may use); when nats-py
    recreates one (its consumer vanished, heartbeats missed) it gets a fresh name and the
    reader goes on where it was, under its own least-privilege identity."""
    from gpuledger.services.runtime.bus import Bus

    reader = await Bus.connect(
        cluster.url, idle_heartbeat_s=0.3, **cluster.client_options("auditor")
    )
    admin = await Bus.connect(cluster.url, **cluster.client_options("admin"))
    follower = await reader.follower()
    try:
        first = [(await follower.next(5)).seq for _ in range(5)]
        named = {c.name for c in await admin.nc.jsm().consumers_info("GPULEDGER")}
        for name in named:
            await admin.nc.jsm().delete_consumer("GPULEDGER", name)
        await publish_as(cluster, "admin", *submissions("z"))
        after = await follower.next(15)
        assert first == [1, 2, 3, 4, 5] and after is not None and after.seq == 6
        now = {c.name for c in await admin.nc.jsm().consumers_info("GPULEDGER")}
        assert now and not now & named and reader.denied == []
    finally:
        await follower.close()
        await reader.close()
        await admin.close()
