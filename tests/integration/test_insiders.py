"""Issue 30 against a real nats-server: what an insider holding one legitimate credential can
publish on its own subjects, and what the acceptance rules then refuse (docs/security.md has
the table; each test here is one row of it).

Given a log built with each role's own credential (nodes register with their node keys, the
admission and scheduler keys decide), when a principal publishes a fact about something it
does not own, on a subject its credential allows, then the server stores it and the fold
refuses it (the projection records the refusal with its code and changes nothing else); the
same fact from the owner is folded (a positive control in every test).

The `test_live_*` tests are the held-out insider check on one live `gpuledger up
--processes`: node forgery, consumer hijack, quota overreach, id squatting and snapshot
forgery, each with the key file an insider would hold (docs/security.md)."""

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
from tests.fold.story import admission
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
                admission("a", "org/a", producer="admission/0"),
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


# ------------------------------------------------- the held-out check on a live `up --processes`
#
# One `gpuledger up --processes` (identities generated by `up` in <data>/auth: one key per
# node and per tenant, one per service role) serves every check below; each insider uses its
# own key file, connects with plain nats-py or the CLI, and is judged by what the operator then
# sees (`gpuledger sql`, `jobs`, the services' own logs).

LIVE_CONFIG = """\
name: insiders
cluster:
  nodes:
    - {name: n1, gpus: 4, model: H100-80GB, cpu: 64, memory: 512Gi}
    - {name: n2, gpus: 4, model: H100-80GB, cpu: 64, memory: 512Gi}
tenants:
  - {name: team-a, guaranteed: 4}
  - {name: team-b, guaranteed: 4}
schedules:
  - name: day
    cron: "0 8 * * *"
    timezone: UTC
    tenants:
      - {name: team-a, guaranteed: 4}
"""


class Live:
    """A running `up --processes` in `cwd`, and what an insider on its machine holds."""

    def __init__(self, cwd) -> None:
        self.cwd = cwd
        self.data = cwd / ".gpuledger"

    @property
    def url(self) -> str:
        return (self.data / "nats-url").read_text().strip()

    def creds(self, principal: str):
        from gpuledger.services.runtime.auth import AuthDir

        return AuthDir(self.data / "auth").creds(principal)

    def cli(self, *args: str, creds: str | None = None):
        from tests.integration.cluster import cli

        extra = ("--creds", str(self.creds(creds))) if creds else ()
        return cli(*args, *extra, cwd=self.cwd)

    def sql(self, query: str) -> list[dict]:
        out = self.cli("sql", query, "-f", "json")
        return json.loads(out.stdout) if out.returncode == 0 and out.stdout.strip() else []

    def submit(self, job: str, tenant: str, gpus: int = 1, wait: bool = True):
        path = self.cwd / f"{tenant}-{job}.yaml"
        path.write_text(f"id: {job}\ntenant: {tenant}\ngpus: {gpus}\nduration: 3600\n")
        return self.cli("submit", str(path), *(["--wait"] if wait else []), creds=f"ci:{tenant}")

    def jobs(self) -> dict[tuple[str, str], dict]:
        """Every job row by (tenant, id as its tenant submitted it)."""
        from gpuledger.events.ids import job_name

        rows = self.sql("SELECT job_id, tenant, state, member_gpus FROM jobs")
        return {(r["tenant"], job_name(r["job_id"])): r for r in rows}

    def refusals(self, code: str) -> list[dict]:
        return self.sql(f"SELECT type, producer, code, message FROM refusals WHERE code = '{code}'")

    async def publish_as(self, principal: str, *events: ev.Event) -> None:
        from gpuledger.services.runtime.auth import client_options

        nc = await nats.connect(
            self.url, allow_reconnect=False, **client_options(self.creds(principal))
        )
        try:
            js = nc.jetstream(timeout=5)
            for e in events:
                await js.publish(subject_for(e), ev.encode(e))
        finally:
            await nc.close()


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    import os
    import signal
    import subprocess
    import sys

    from tests.integration.cluster import ROOT
    from tests.waiting import eventually

    cwd = tmp_path_factory.mktemp("insiders")
    (cwd / "cluster.yaml").write_text(LIVE_CONFIG)
    env = {k: v for k, v in os.environ.items() if k != "GPULEDGER_CREDS"}
    out = (cwd / "up.log").open("w")  # a file, not a pipe nobody reads while up runs
    up = subprocess.Popen(
        [sys.executable, "-m", "gpuledger.services.cli", "up", "--processes"]
        + ["--config", "cluster.yaml"],
        cwd=cwd,
        stdout=out,
        stderr=subprocess.STDOUT,
        text=True,
        env={**env, "PYTHONPATH": str(ROOT), "GPULEDGER_LOG_LEVEL": "info"},
    )
    live = Live(cwd)
    try:

        def all_running():
            out = live.cli("status", "-o", "json")
            rows = json.loads(out.stdout).get("services", []) if out.stdout.strip() else []
            return rows if rows and all(s["state"] == "running" for s in rows) else None

        eventually(all_running, 90, "every service of up --processes running", interval_s=0.5)
        yield live
    finally:
        up.send_signal(signal.SIGTERM)
        try:
            up.wait(timeout=60)
        except subprocess.TimeoutExpired:
            up.kill()
            up.wait()
        out.close()


def wait(cond, what: str, timeout_s: float = 60):
    from tests.waiting import eventually

    return eventually(cond, timeout_s, what, interval_s=0.5)


def test_live_id_squatting_two_tenants_own_the_same_job_id(live):
    """Tenant A and tenant B, each with its own CI key, both submit `train-1`: both are
    admitted and run; each sees only its own; A's cancel touches only A's; B learns nothing
    of A's ids (a request about A's id is answered as one about an id nobody has)."""
    a = live.submit("train-1", "team-a", gpus=1)
    b = live.submit("train-1", "team-b", gpus=2)
    assert a.returncode == 0 and "admitted train-1" in a.stdout, a.stderr
    assert b.returncode == 0 and "admitted train-1" in b.stdout, b.stderr
    assert live.submit("a-only", "team-a").returncode == 0
    rows = wait(
        lambda: (
            (j := live.jobs())
            and all(
                j.get((t, "train-1"), {}).get("state") == "running" for t in ("team-a", "team-b")
            )
            and j
        ),
        "both train-1 running",
    )
    assert rows[("team-a", "train-1")]["member_gpus"] == 1
    assert rows[("team-b", "train-1")]["member_gpus"] == 2

    # each tenant's status of train-1 is its own job
    for tenant in ("team-a", "team-b"):
        st = live.cli("status", "train-1", "-o", "json", creds=f"ci:{tenant}")
        assert st.returncode == 0, st.stderr
        doc = json.loads(st.stdout)
        (submitted,) = live.sql(
            f"SELECT seq FROM events WHERE subject = 'gl.submit.{tenant}.train-1'"
        )
        assert (doc["job_id"], doc["tenant"], doc["state"]) == ("train-1", tenant, "running")
        assert doc["submit_seq"] == submitted["seq"] and "~~" not in st.stdout

    # B cannot tell A's id from one nobody has: status, cancel, a dependency, a submission
    def answer(*args: str) -> tuple[int, str]:
        out = live.cli(*args, creds="ci:team-b")
        return out.returncode, (out.stdout + out.stderr).replace(args[1], "ID")

    assert answer("status", "a-only") == answer("status", "nobody-has")
    assert answer("cancel", "a-only") == answer("cancel", "nobody-has")
    assert answer("status", "a-only")[0] == 1
    mine = live.submit("a-only", "team-b", wait=True)
    assert mine.returncode == 0 and "admitted a-only" in mine.stdout, mine.stderr

    # A's cancel of train-1 ends A's job only
    cancel = live.cli("cancel", "train-1", creds="ci:team-a")
    assert cancel.returncode == 0, cancel.stderr
    rows = wait(
        lambda: (j := live.jobs()) and j[("team-a", "train-1")]["state"] == "cancelled" and j,
        "A's train-1 cancelled",
    )
    assert rows[("team-b", "train-1")]["state"] == "running"
    why = live.cli("why", "train-1", "--tenant", "team-b")
    assert why.returncode == 0 and "running" in why.stdout, why.stderr


def test_live_node_forgery_a_node_key_cannot_end_a_member_on_another_node(live):
    assert live.submit("victim", "team-a").returncode == 0
    alloc = wait(
        lambda: live.sql(
            "SELECT allocation_id, node FROM allocations WHERE job_id = 'victim' "
            "AND started_at_ms IS NOT NULL"
        ),
        "victim's member started",
    )[0]
    other = "n2" if alloc["node"] == "n1" else "n1"
    forged = ev.MemberExited(
        event_id="forged-exit",
        job_id="victim",
        allocation_id=alloc["allocation_id"],
        rank=0,
        node=other,
        outcome="failed",
        producer=f"node-agent/{other}",
    )
    asyncio.run(live.publish_as(f"node:{other}", forged))
    refused = wait(
        lambda: [r for r in live.refusals(FoldRefusal.WrongNode) if r["type"] == "MemberExited"],
        "the forged exit refused",
    )
    assert refused[0]["producer"] == f"node-agent/{other}"
    assert live.jobs()[("team-a", "victim")]["state"] == "running"


def test_live_consumer_hijack_readers_cannot_replace_the_projectors_consumer(live):
    async def attempt(principal: str) -> list[str]:
        from gpuledger.services.runtime.auth import client_options

        errors: list[str] = []

        async def error_cb(err: Exception) -> None:
            errors.append(str(err))

        nc = await nats.connect(
            live.url,
            allow_reconnect=False,
            error_cb=error_cb,
            **client_options(live.creds(principal)),
        )
        try:
            with pytest.raises((nats.errors.Error, TimeoutError, asyncio.TimeoutError)):
                await nc.request(
                    "$JS.API.CONSUMER.CREATE.GPULEDGER", json.dumps(HIJACK).encode(), timeout=2
                )
            await until(lambda: errors, 10, "the server's answer")
        finally:
            await nc.close()
        return errors

    for principal in ("auditor", "scheduler", "node:n1"):
        errors = asyncio.run(attempt(principal))
        assert any("permissions violation" in e.lower() for e in errors), (principal, errors)
    # the projection keeps up: a job submitted now shows in `jobs`
    assert live.submit("after-hijack", "team-b", wait=False).returncode == 0
    wait(lambda: ("team-b", "after-hijack") in live.jobs(), "the projection to keep up")


def test_live_quota_overreach_the_quota_key_cannot_set_an_unscheduled_guarantee(live):
    forged = ev.TenantConfigured(
        event_id="forged-guarantee",
        tenant="team-a",
        guaranteed_gpu_milli=1_000_000 * 1000,
        producer="quota/0",
        occurred_at_ms=int(time.time() * 1000),
        correlation_id="schedule:day",
        causation_id="day@0",
    )
    asyncio.run(live.publish_as("quota", forged))
    wait(lambda: live.refusals(FoldRefusal.NotScheduled), "the forged guarantee refused")
    rows = live.sql("SELECT tenant, guaranteed_gpu_milli FROM tenants WHERE tenant = 'team-a'")
    assert rows == [{"tenant": "team-a", "guaranteed_gpu_milli": 4000}]


class _Touches:
    """A pickle that would create a file when loaded."""

    def __init__(self, path) -> None:
        self.path = str(path)

    def __reduce__(self):
        return (exec, (f"open({self.path!r}, 'w').close()",))


def test_live_snapshot_forgery_is_refused_with_its_reason_and_the_scheduler_refolds(live):
    """The operator's key may write any key of the snapshot bucket: it writes a pickle that
    would run code as the scheduler's snapshot; the restarted scheduler says why in one line,
    refolds the whole log, runs nothing, and goes on scheduling."""
    import os
    import pickle
    import signal

    from gpuledger.services.runtime import snapshots
    from gpuledger.services.runtime.bus import Bus
    from gpuledger.services.runtime.snapshots import SnapshotStore, snapshot_bucket

    ran = live.cwd / "ran"

    async def forge() -> None:
        from gpuledger.services.runtime.auth import client_options

        bus = await Bus.connect(live.url, **client_options(live.creds("admin")))
        try:
            kv = await snapshot_bucket(bus, create=True)
            key = snapshots.mac_key(snapshots.seed_of_creds(live.creds("admin")))
            store = SnapshotStore(kv, "scheduler", 1 << 20, key)
            raw = pickle.dumps(_Touches(ran))
            data, digest_ = snapshots.compress(raw)
            fields = dict(
                service="scheduler",
                instance="0",
                seq=await bus.last_seq(),
                stream_first_seq=1,
                stream_created="",
                config_digest="",
                raw_bytes=len(raw),
            )
            await store.save(fields, data, digest_, await store.manifest(verified=False))
        finally:
            await bus.close()

    log = live.data / "logs" / "scheduler.log"
    doc = json.loads(live.cli("status", "-o", "json").stdout)
    pid = next(s["pid"] for s in doc["services"] if s["name"] == "scheduler")
    asyncio.run(forge())
    os.kill(pid, signal.SIGKILL)  # at once: before it could save a snapshot of its own again

    def refused_line() -> str | None:
        text = log.read_text() if log.exists() else ""
        return next(
            (ln for ln in text.splitlines() if "snapshot_ignored" in ln and "forged" in ln), None
        )

    line = wait(refused_line, "the restarted scheduler to refuse the snapshot", timeout_s=90)
    assert "folding the whole log" in line
    assert not ran.exists()
    # it refolded and schedules: a job submitted now runs
    assert live.submit("after-restart", "team-b", wait=False).returncode == 0
    wait(
        lambda: live.jobs().get(("team-b", "after-restart"), {}).get("state") == "running",
        "a job placed by the restarted scheduler",
        timeout_s=90,
    )
