"""Issue 13 against a real nats-server: what each identity may and may not do on the bus.

Given a server with authentication on (every test server runs so), when a client connects
without an identity, or as one identity and tries what belongs to another (a tenant's CI
system submitting as another tenant, a node agent speaking for another node, the auditor or
a service publishing what is not theirs, anyone but the operator managing the stream), then
the server refuses it (`Permissions Violation`, seen by the client's error callback) and the
stream holds nothing of it, checked as the operator afterwards. Each refusal has a positive
control: the same call by an identity entitled to it succeeds, so a refusal is never an
artefact of a broken set-up.

Covered elsewhere, under the same authenticated fixtures: a decision forged on its correct
subject by the wrong producer is dead-lettered (tests/projections/test_refusals_live.py,
`test_a_refused_placement_is_a_refusal_not_a_running_job`); oversized and malformed messages
are dead-lettered and every service goes on (tests/integration/test_bad_messages.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import ssl
import subprocess
from pathlib import Path

import msgspec
import nats
import nats.errors
import nats.js.api as api
import pytest

from gpuledger.events.subjects import STREAM
from gpuledger.projections.nats_source import DURABLE
from gpuledger.services.cli.apply import publish_config
from gpuledger.services.domain.fold.job_status import JobStatus
from gpuledger.services.runtime.auth import (
    CREDS_ENV,
    TLS_ENV,
    TlsFiles,
    client_options,
    new_seed,
    tls_from_env,
)
from gpuledger.services.runtime.bus import Bus
from gpuledger.services.runtime.nats_server import EmbeddedNats
from gpuledger.services.runtime.processes import ROOT, run_command
from tests.integration.cluster import Processes, cli, submission
from tests.waiting import eventually_async

pytestmark = pytest.mark.integration

A, B = "team-a", "team-b"
CONFIG = {
    "cluster": {"nodes": [{"name": "node-1", "gpus": 4, "model": "A100-80GB"}]},
    "tenants": [{"name": A, "guaranteed": 4}, {"name": B, "guaranteed": 4}],
}
PRINCIPALS = (f"ci:{A}", f"ci:{B}", "node:node-1", "node:node-2")
DECISIONS = (
    "gl.sched.victim.GangPlaced",
    "gl.sched.node-1.NodeDrained",
    "gl.admission.victim.JobAdmitted",
    "gl.preempt.victim.PreemptionRequested",
    "gl.quota.TenantUsageDecayed",
    "gl.node.node-1.NodeLost",
    "gl.admin.TenantConfigured",
)
STREAM_ADMIN = (
    ("delete the stream", f"$JS.API.STREAM.DELETE.{STREAM}", lambda js: js.delete_stream(STREAM)),
    ("purge the stream", f"$JS.API.STREAM.PURGE.{STREAM}", lambda js: js.purge_stream(STREAM)),
    (
        "update the stream",
        f"$JS.API.STREAM.UPDATE.{STREAM}",
        lambda js: js.update_stream(
            api.StreamConfig(name=STREAM, subjects=["gl.>"], deny_purge=False)
        ),
    ),
    (
        "create a stream",
        "$JS.API.STREAM.CREATE.SHADOW",
        lambda js: js.add_stream(api.StreamConfig(name="SHADOW", subjects=["shadow.>"])),
    ),
)


# ---------------------------------------------------------------------- helpers


until = eventually_async
REFUSED_WAIT_S = 0.25
"""How long a call expected to be refused waits for an answer: `Client.refused` asserts the
server's permissions-violation error, which arrives whether the call timed out or not."""


class Client:
    """A plain nats-py client (no gpuledger code) connected as one principal; it keeps the
    errors the server sends it (permission violations do not close the connection)."""

    def __init__(self, nc, errors: list[str]) -> None:
        self.nc, self.errors = nc, errors
        # for calls expected to be refused: the refusal is the server's error (awaited by
        # `refused`), so the call itself need not wait long for an answer that never comes
        self.js = nc.jetstream(timeout=REFUSED_WAIT_S)
        self.jsm = nc.jsm(timeout=REFUSED_WAIT_S)
        self.allowed = nc.jetstream(timeout=10)  # for calls expected to succeed (the controls)

    @classmethod
    async def connect(cls, server: EmbeddedNats, principal: str, **options) -> Client:
        errors: list[str] = []

        async def error_cb(err: Exception) -> None:
            errors.append(str(err))

        nc = await nats.connect(
            server.url,
            error_cb=error_cb,
            allow_reconnect=False,
            connect_timeout=3,
            **{**server.client_options(principal), **options},
        )
        return cls(nc, errors)

    async def refused(self, call, subject: str) -> None:
        """`call` fails, and the server said why: a permissions violation on `subject`."""
        with pytest.raises((nats.errors.Error, TimeoutError, asyncio.TimeoutError)):
            await call
        want = f'permissions violation for publish to "{subject}"'.lower()
        await until(
            lambda: any(want in e.lower() for e in self.errors), 5, f"{want!r} in {self.errors}"
        )
        assert self.nc.is_connected  # a refusal, not a dropped connection

    async def close(self) -> None:
        await self.nc.close()


async def stored(bus: Bus, subject: str) -> bool:
    """Whether the stream holds any message on `subject` (read as the operator)."""
    return await bus.last_message(subject) is not None


def cancellation(job_id: str, tenant: str) -> bytes:
    return json.dumps(
        {
            "type": "JobCancelled.v1",
            "event_id": f"cancel-{job_id}",
            "job_id": job_id,
            "tenant": tenant,
        }
    ).encode()


@pytest.fixture
async def ids(server, bus):
    """The identities of two tenants' CI systems and two node agents, admitted by the server."""
    server.add_principals(*PRINCIPALS)
    return server


@pytest.fixture
async def admission(ids, bus, tmp_path):
    """Two tenants configured, and admission running as its own identity (it answers status
    queries)."""
    await publish_config(ids.access(), CONFIG)
    p = Processes(ids, tmp_path / "config.yaml", tmp_path)
    (tmp_path / "config.yaml").write_text(json.dumps(CONFIG))
    p.start("admission")
    yield p
    p.stop()


# ---------------------------------------------------------------------- connecting


async def test_anonymous_and_unknown_identities_are_refused(server, tmp_path):
    with pytest.raises(nats.errors.Error, match="Authorization Violation"):
        await nats.connect(server.url, allow_reconnect=False, connect_timeout=3)
    stranger = tmp_path / "stranger.nk"
    stranger.write_bytes(new_seed() + b"\n")
    with pytest.raises(nats.errors.Error, match="Authorization Violation"):
        await nats.connect(
            server.url, allow_reconnect=False, connect_timeout=3, **client_options(stranger)
        )
    admin = await Client.connect(server, "admin")  # control: a known identity connects
    assert admin.nc.is_connected
    await admin.close()


# ---------------------------------------------------------------------- a tenant's CI identity


async def test_ci_cannot_submit_or_cancel_as_another_tenant(ids, bus, admission):
    """A CI key publishes into no subject of the stream, its own tenant's included (its
    headers could read other subjects and its Msg-Id sit in the one duplicate window: issue
    44); it asks the admission service's intake on its own tenant's subjects only, and the
    intake stores what it sends there."""
    ci = await Client.connect(ids, f"ci:{A}")
    try:
        for subject, data in (
            (f"gl.submit.{B}.x", submission("x", B)),
            (f"gl.cancel.{B}.y", cancellation("y", B)),
            (f"gl.submit.{A}.x", submission("x", A)),
            (f"gl.cancel.{A}.x", cancellation("x", A)),
        ):
            await ci.refused(ci.js.publish(subject, data), subject)
            assert not await stored(bus, subject)
        await ci.refused(
            ci.nc.request(f"glr.submit.{B}.x", submission("x", B), timeout=REFUSED_WAIT_S),
            f"glr.submit.{B}.x",
        )
        assert not await stored(bus, f"gl.submit.{B}.x")

        # control: through the intake, on its own tenant's subjects
        async def ask(subject: str, data: bytes) -> dict | None:
            try:
                reply = await ci.nc.request(subject, data, timeout=5)
            except nats.errors.NoRespondersError:
                return None  # admission has not subscribed yet
            return json.loads(reply.data)

        submitted = await until(
            lambda: ask(f"glr.submit.{A}.x", submission("x", A)), 20, "the intake"
        )
        cancelled = await ask(f"glr.cancel.{A}.x", cancellation("x", A))
        assert submitted["seq"] > 0 and cancelled["seq"] > submitted["seq"]
        assert await stored(bus, f"gl.submit.{A}.x") and await stored(bus, f"gl.cancel.{A}.x")
        # the intake checks what it stores: a body of another tenant on its own subject
        wrong = await ask(f"glr.submit.{A}.z", submission("z", B))
        assert wrong["error"].startswith("a JobSubmitted of this content belongs on gl.submit.")
        assert not await stored(bus, f"gl.submit.{B}.z")
    finally:
        await ci.close()


@pytest.mark.parametrize("subject", [*DECISIONS, "gl.dead.1"])
async def test_ci_cannot_publish_a_decision(ids, bus, subject):
    ci = await Client.connect(ids, f"ci:{A}")
    try:
        await ci.refused(ci.js.publish(subject, b'{"type":"forged"}'), subject)
        assert not await stored(bus, subject)
    finally:
        await ci.close()


async def test_ci_reads_only_its_own_jobs_status(ids, bus, admission):
    seq = await bus.publish_raw(f"gl.submit.{B}.b-job", submission("b-job", B))
    ci_a, ci_b = await Client.connect(ids, f"ci:{A}"), await Client.connect(ids, f"ci:{B}")
    try:
        await ci_a.refused(
            ci_a.nc.request(f"glq.job.{B}.b-job", b"", timeout=REFUSED_WAIT_S), f"glq.job.{B}.b-job"
        )

        async def status(client, tenant) -> JobStatus | None:
            try:
                reply = await client.nc.request(f"glq.job.{tenant}.b-job", b"", timeout=5)
            except nats.errors.NoRespondersError:
                return None  # admission has not subscribed to its queries yet
            st = msgspec.json.decode(reply.data, type=JobStatus)
            return st if st.folded_seq >= seq else None

        # its own tenant's subject for b's job: answered exactly as for a job nobody submitted
        mine = await until(lambda: status(ci_a, A), 20, "admission to fold b's submission")
        assert mine.known is False and mine.state is None and mine.spec is None
        # control: b's own CI identity sees the job
        theirs = await until(lambda: status(ci_b, B), 20, "b's status")
        assert theirs.known is True and theirs.tenant == B
    finally:
        await ci_a.close()
        await ci_b.close()


async def test_ci_cannot_read_the_stream(ids, bus):
    await bus.publish_raw(f"gl.submit.{B}.secret", submission("secret", B))
    ci = await Client.connect(ids, f"ci:{A}")
    try:
        await ci.refused(ci.js.stream_info(STREAM), f"$JS.API.STREAM.INFO.{STREAM}")
        await ci.refused(ci.jsm.get_msg(STREAM, 1), f"$JS.API.STREAM.MSG.GET.{STREAM}")
        await ci.refused(
            ci.jsm.add_consumer(STREAM, api.ConsumerConfig(durable_name="peek")),
            f"$JS.API.CONSUMER.DURABLE.CREATE.{STREAM}.peek",
        )
        await ci.refused(
            ci.js.subscribe("gl.>", stream=STREAM, ordered_consumer=True),
            f"$JS.API.CONSUMER.CREATE.{STREAM}",
        )
        assert [c async for c in _consumers(bus)] == []  # nothing was created on its behalf
    finally:
        await ci.close()


async def _consumers(bus: Bus):
    for info in await bus.nc.jsm().consumers_info(STREAM):
        yield info.name


@pytest.mark.parametrize(
    "principal", [f"ci:{A}", "scheduler", "auditor", "node:node-1", "projector"]
)
async def test_only_the_operator_manages_the_stream(ids, bus, principal):
    for i in range(3):
        await bus.publish_raw(f"gl.submit.{A}.j{i}", submission(f"j{i}", A))
    client = await Client.connect(ids, principal)
    try:
        for _what, subject, call in STREAM_ADMIN:
            await client.refused(call(client.jsm), subject)
    finally:
        await client.close()
    info = await bus.stream_info()  # the stream is there, unchanged, with every message
    assert info.state.messages == 3 and info.config.deny_purge and info.config.deny_delete
    with pytest.raises(nats.js.errors.NotFoundError):
        await bus.nc.jsm().stream_info("SHADOW")


@pytest.mark.parametrize("principal", ["auditor", "scheduler", "node:node-1"])
async def test_a_reader_cannot_touch_the_projectors_consumer(ids, bus, principal):
    """Readers follow the log with ordered consumers they name at random; the projector's
    durable consumer (its position in the log) is the projector's alone (issue 30: by the
    bare create API, whose request names the consumer, a reader replaced it)."""
    await bus.publish_raw(f"gl.submit.{A}.j", submission("j", A))
    await bus.nc.jsm().add_consumer(
        STREAM, api.ConsumerConfig(durable_name=DURABLE, ack_policy=api.AckPolicy.ALL)
    )
    reader = await Client.connect(ids, principal)
    try:
        await reader.refused(
            reader.jsm.delete_consumer(STREAM, DURABLE),
            f"$JS.API.CONSUMER.DELETE.{STREAM}.{DURABLE}",
        )
        await reader.refused(
            reader.jsm.add_consumer(STREAM, api.ConsumerConfig(name=DURABLE, durable_name=DURABLE)),
            f"$JS.API.CONSUMER.CREATE.{STREAM}.{DURABLE}",
        )
        await reader.refused(
            reader.jsm.add_consumer(
                STREAM, api.ConsumerConfig(name=DURABLE, filter_subject="gl.dead.>")
            ),
            f"$JS.API.CONSUMER.CREATE.{STREAM}.{DURABLE}.gl.dead.>",
        )
        await reader.refused(
            reader.jsm.add_consumer(STREAM, api.ConsumerConfig(durable_name=DURABLE)),
            f"$JS.API.CONSUMER.DURABLE.CREATE.{STREAM}.{DURABLE}",
        )
        hijack = {  # the request that replaced it: an "ephemeral" create naming it
            "stream_name": STREAM,
            "config": {"name": DURABLE, "filter_subject": "gl.dead.>", "ack_policy": "all"},
        }
        await reader.refused(
            reader.nc.request(
                f"$JS.API.CONSUMER.CREATE.{STREAM}",
                json.dumps(hijack).encode(),
                timeout=REFUSED_WAIT_S,
            ),
            f"$JS.API.CONSUMER.CREATE.{STREAM}",
        )
        # control: it still reads the log (an ordered consumer it names at random)
        assert [r.seq async for r in Bus(reader.nc).read_all()] == [1]
    finally:
        await reader.close()
    info = await bus.nc.jsm().consumer_info(STREAM, DURABLE)
    assert info.config.durable_name == DURABLE and info.config.filter_subject in (None, "")


# ---------------------------------------------------------------------- roles


async def test_a_node_agent_speaks_only_for_its_own_node(ids, bus):
    node = await Client.connect(ids, "node:node-1")
    try:
        await node.refused(
            node.js.publish("gl.node.node-2.NodeHeartbeat", b"{}"), "gl.node.node-2.NodeHeartbeat"
        )
        assert not await stored(bus, "gl.node.node-2.NodeHeartbeat")
        await node.refused(
            node.js.publish("gl.sched.node-1.NodeDrained", b"{}"), "gl.sched.node-1.NodeDrained"
        )
        await node.allowed.publish("gl.node.node-1.NodeHeartbeat", b"{}")  # control: its own node
        assert await stored(bus, "gl.node.node-1.NodeHeartbeat")
    finally:
        await node.close()


async def test_the_auditor_reads_everything_and_publishes_nothing(ids, bus, tmp_path):
    seqs = [await bus.publish_raw(f"gl.submit.{A}.j{i}", submission(f"j{i}", A)) for i in range(3)]
    auditor = await Client.connect(ids, "auditor")
    try:
        for subject in (f"gl.submit.{A}.forged", f"gl.cancel.{A}.j0", *DECISIONS, "gl.dead.1"):
            await auditor.refused(auditor.js.publish(subject, b"{}"), subject)
        assert await bus.last_seq() == seqs[-1]
        reader = Bus(auditor.nc)  # an ordered consumer, as `gpuledger export` reads
        assert [r.seq async for r in reader.read_all()] == seqs
    finally:
        await auditor.close()
    out = tmp_path / "log.jsonl"
    done = await asyncio.to_thread(
        cli,
        "export",
        "--out",
        str(out),
        "--nats-url",
        ids.url,
        "--creds",
        str(ids.creds("auditor")),
    )
    assert done.returncode == 0, done.stderr
    assert len(out.read_text().splitlines()) >= len(seqs)


async def test_the_scheduler_cannot_admit(ids, bus):
    sched = await Client.connect(ids, "scheduler")
    try:
        for subject in (
            "gl.admission.victim.JobAdmitted",
            "gl.preempt.victim.PreemptionRequested",
            "gl.quota.TenantUsageDecayed",
            "gl.node.node-1.NodeLost",
            f"gl.submit.{A}.x",
        ):
            await sched.refused(sched.js.publish(subject, b"{}"), subject)
            assert not await stored(bus, subject)
        # control: its own subjects
        await sched.allowed.publish("gl.sched.victim.GangPlaced", b"{}")
        assert await stored(bus, "gl.sched.victim.GangPlaced")
    finally:
        await sched.close()


# ---------------------------------------------------------------------- the CI path, end to end


def job_file(tmp_path: Path, job_id: str, tenant: str) -> Path:
    path = tmp_path / f"{job_id}.yaml"
    path.write_text(json.dumps({"id": job_id, "tenant": tenant, "gpus": 1, "duration": "1h"}))
    return path


def one_line_error(done: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, done.stderr
    return lines[0]


async def test_ci_submits_and_cancels_under_least_privilege(ids, bus, tmp_path):
    await publish_config(ids.access(), CONFIG)
    (tmp_path / "config.yaml").write_text(json.dumps(CONFIG))
    procs = Processes(ids, tmp_path / "config.yaml", tmp_path)
    try:
        for role in ("admission", "quota", "scheduler", "preemption"):  # each as its own identity
            procs.start(role)
        creds_a = str(ids.creds(f"ci:{A}"))

        def gl(*args: str) -> subprocess.CompletedProcess:
            return cli(*args, "--nats-url", ids.url, "--creds", creds_a, timeout=90)

        done = await asyncio.to_thread(gl, "submit", str(job_file(tmp_path, "mine", A)), "--wait")
        assert done.returncode == 0, (done.stdout, done.stderr, procs.logs())
        assert "admitted mine" in done.stdout

        done = await asyncio.to_thread(
            gl, "submit", str(job_file(tmp_path, "theirs", B)), "--wait", "--timeout", "5"
        )
        assert done.returncode != 0
        assert "theirs" in one_line_error(done)
        assert not await stored(bus, "gl.submit.*.theirs")

        await bus.publish_raw(f"gl.submit.{B}.b-job", submission("b-job", B))  # b's own job
        done = await asyncio.to_thread(gl, "cancel", "b-job")
        assert done.returncode == 1 and "UnknownJob" in one_line_error(done)
        assert not await stored(bus, "gl.cancel.*.b-job")

        done = await asyncio.to_thread(gl, "cancel", "mine")
        assert done.returncode == 0, done.stderr
        assert await stored(bus, f"gl.cancel.{A}.mine")
    finally:
        procs.stop()


# ---------------------------------------------------------------------- TLS


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A CA, a server certificate for 127.0.0.1 and a client certificate (trustme)."""
    trustme = pytest.importorskip("trustme")
    d = tmp_path_factory.mktemp("pki")
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(d / "ca.pem"))
    server = ca.issue_cert("127.0.0.1", "localhost")
    server.private_key_pem.write_to_path(str(d / "server.key"))
    server.cert_chain_pems[0].write_to_path(str(d / "server.pem"))
    for pem in server.cert_chain_pems[1:]:
        pem.write_to_path(str(d / "server.pem"), append=True)
    client = ca.issue_cert("gpuledger-client")
    client.private_key_pem.write_to_path(str(d / "client.key"))
    client.cert_chain_pems[0].write_to_path(str(d / "client.pem"))
    return d


def tls_files(pki: Path, *, verify_clients: bool = False, client: bool = False) -> TlsFiles:
    return TlsFiles(
        ca=str(pki / "ca.pem"),
        server_cert=str(pki / "server.pem"),
        server_key=str(pki / "server.key"),
        client_cert=str(pki / "client.pem") if client else None,
        client_key=str(pki / "client.key") if client else None,
        verify_clients=verify_clients,
    )


def plain_connect_refused(port: int) -> str:
    """What a client that speaks plain NATS (no TLS) gets: the server's refusal."""
    with socket.create_connection(("127.0.0.1", port), timeout=3) as s:
        s.settimeout(3)
        info = s.recv(4096)
        assert b'"tls_required":true' in info
        s.sendall(b'CONNECT {"verbose":false}\r\nPING\r\n')
        got = b""
        while True:
            try:
                chunk = s.recv(4096)
            except (ConnectionResetError, TimeoutError):
                break
            if not chunk:
                break
            got += chunk
        assert b"PONG" not in got
        return got.decode(errors="replace")


async def test_tls_required_refuses_plain_connections(pki, monkeypatch):
    with EmbeddedNats(tls=tls_files(pki)) as server:
        bus = await Bus.connect(
            server.url, connect_attempts=1, quiet=True, **server.client_options()
        )
        try:
            await bus.ensure_stream()
            assert await bus.publish_raw(f"gl.submit.{A}.over-tls", submission("over-tls", A)) == 1
        finally:
            await bus.close()
        # GPULEDGER_TLS_CA is how a process is told whom to trust
        monkeypatch.setenv(TLS_ENV["ca"], str(pki / "ca.pem"))
        nc = await nats.connect(
            server.url,
            allow_reconnect=False,
            **client_options(server.creds("auditor"), tls_from_env()),
        )
        assert (await nc.jetstream().stream_info(STREAM)).state.messages == 1
        await nc.close()

        assert plain_connect_refused(server.port) == ""  # closed without a word, no PONG
        with pytest.raises(ssl.SSLCertVerificationError):  # the right identity, no trust in the CA
            await nats.connect(
                server.url,
                allow_reconnect=False,
                connect_timeout=3,
                **client_options(server.creds("admin")),
            )


async def test_tls_verify_clients_requires_a_client_certificate(pki):
    with EmbeddedNats(tls=tls_files(pki, verify_clients=True)) as server:
        ca_only = TlsFiles(ca=str(pki / "ca.pem"))
        with pytest.raises(OSError):  # the server ends the handshake: certificate required
            await nats.connect(
                server.url,
                allow_reconnect=False,
                connect_timeout=3,
                **client_options(server.creds("admin"), ca_only),
            )
        with_cert = TlsFiles(
            ca=str(pki / "ca.pem"),
            client_cert=str(pki / "client.pem"),
            client_key=str(pki / "client.key"),
        )
        nc = await nats.connect(
            server.url,
            allow_reconnect=False,
            connect_timeout=3,
            **client_options(server.creds("admin"), with_cert),
        )
        assert nc.is_connected
        await nc.close()


async def test_a_service_reaches_a_tls_server_from_its_environment(pki, tmp_path):
    with EmbeddedNats(tls=tls_files(pki)) as server:
        server.add_principals(f"ci:{A}")
        access = server.access("admin")
        bus = await Bus.connect(server.url, connect_attempts=1, quiet=True, **access.options())
        await bus.ensure_stream()
        await publish_config(access, CONFIG)
        env = {k: v for k, v in os.environ.items() if k not in (CREDS_ENV, *TLS_ENV.values())}
        env.update({CREDS_ENV: str(server.creds("admission")), TLS_ENV["ca"]: str(pki / "ca.pem")})
        log = open(tmp_path / "admission.log", "wb")  # noqa: SIM115
        proc = subprocess.Popen(
            run_command("admission", server.url),
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            seq = await bus.publish_raw(f"gl.submit.{A}.tls-job", submission("tls-job", A))

            async def admitted() -> bool:
                return await stored(bus, "gl.admission.tls-job.JobAdmitted")

            await until(
                admitted,
                30,
                f"admission over TLS: {(tmp_path / 'admission.log').read_text()[-2000:]}",
            )
            assert seq > 0 and proc.poll() is None
        finally:
            proc.terminate()
            proc.wait(10)
            log.close()
            await bus.close()
