"""The host loop over a real nats-server, with tiny services defined here."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

from gpuledger import events
from gpuledger.services.runtime.bus import Bus
from gpuledger.services.runtime.host import Host, run_service
from gpuledger.services.runtime.nats_server import EmbeddedNats
from tests import natsauth
from tests.fold.story import admission
from tests.waiting import eventually_async as eventually


def submitted(job_id: str) -> events.JobSubmitted:
    return events.JobSubmitted(
        event_id=events.derive_event_id("JobSubmitted", job_id),
        job=events.JobSpec(job_id=job_id, tenant="t", resources=events.Resources(gpus=1)),
    )


def admitted(job_id: str, producer: str = "admitter/0") -> events.JobAdmitted:
    return admission(
        job_id, "t", event_id=events.derive_event_id("JobAdmitted", job_id), producer=producer
    )


@dataclass
class AdmitState:
    submitted: list[str] = field(default_factory=list)
    admitted: set[str] = field(default_factory=set)
    dead: list[int] = field(default_factory=list)
    last_seq: int = 0


class Admitter:
    """Admits every submitted job once; records every id it ever emits."""

    name = "admitter"

    def __init__(self, instance: str = "0", fail_on: str | None = None) -> None:
        self.instance = instance
        self.fail_on = fail_on
        self.emitted: list[str] = []
        self.decide_calls = 0

    def initial_state(self) -> AdmitState:
        return AdmitState()

    def evolve(self, state: AdmitState, seq: int, event: events.Event) -> AdmitState:
        assert seq > state.last_seq, "events must arrive in stream order"
        state.last_seq = seq
        match event:
            case events.JobSubmitted(job=job):
                if job.job_id == self.fail_on:
                    raise RuntimeError(f"cannot fold {job.job_id}")
                state.submitted.append(job.job_id)
            case events.JobAdmitted(job_id=job_id):
                state.admitted.add(job_id)
            case events.DeadLettered(stream_seq=bad):
                state.dead.append(bad)
        return state

    def decide(self, state: AdmitState, now_ms: int) -> list[events.Event]:
        self.decide_calls += 1
        out: list[events.Event] = [
            admitted(j, f"{self.name}/{self.instance}")
            for j in state.submitted
            if j not in state.admitted
        ]
        self.emitted.extend(e.event_id for e in out)
        return out

    def next_wakeup_ms(self, state: AdmitState, now_ms: int) -> int | None:
        return None


@contextlib.asynccontextmanager
async def running(host: Host) -> AsyncIterator[Host]:
    task = asyncio.create_task(host.run())
    try:
        yield host
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def served(service, url: str, stop: asyncio.Event, hosts: list[Host], **options) -> asyncio.Task:
    """`run_service(service)` as a task, connecting with the test credential, stopping when
    `stop` is set; each host it builds is appended to `hosts` (`options`: run_service's)."""
    return asyncio.create_task(
        run_service(
            service,
            url,
            nats_options=natsauth.options(),
            stop=stop,
            on_host=hosts.append,
            **options,
        )
    )


async def settle(*hosts: Host, seq: int | None = None, timeout: float = 5.0) -> None:
    """Wait until every host folded the whole log and sits idle, twice in a row with the
    stream's last seq unchanged between the two looks (a late message would have moved it)."""
    seen: list[int] = []

    async def settled() -> bool:
        last = await hosts[0].bus.last_seq() if seq is None else seq
        folded = all(h.idle.is_set() and h.folded_seq >= last for h in hosts)
        steady = folded and seen[-1:] == [last]
        seen[:] = [last] if folded else []
        return steady

    await eventually(settled, timeout, "hosts to settle", interval_s=0.05)


async def stream_events(bus: Bus) -> list[tuple[int, events.Event | None]]:
    out: list[tuple[int, events.Event | None]] = []
    async for r in bus.read_all():
        try:
            out.append((r.seq, events.decode(r.data)))
        except events.UndecodableEvent:
            out.append((r.seq, None))
    return out


def of_type(evs: list[tuple[int, events.Event | None]], cls: type) -> list[events.Event]:
    return [e for _, e in evs if isinstance(e, cls)]


async def test_three_submissions_give_exactly_three_admissions(bus: Bus) -> None:
    service = Admitter()
    async with running(Host(service, bus)) as host:
        for j in ("j1", "j2", "j3"):
            await bus.publish(submitted(j))
        await eventually(lambda: len(host.state.admitted) == 3)
        await settle(host)
    evs = await stream_events(bus)
    assert sorted(e.job_id for e in of_type(evs, events.JobAdmitted)) == ["j1", "j2", "j3"]
    assert len(evs) == 6
    assert len(service.emitted) == len(set(service.emitted)) == 3


async def test_a_burst_never_decides_from_a_state_missing_its_own_output(bus: Bus) -> None:
    service = Admitter()
    async with running(Host(service, bus)) as host:
        await asyncio.gather(*(bus.publish(submitted(f"j{i}")) for i in range(60)))
        await eventually(lambda: len(host.state.admitted) == 60)
        await settle(host)
    # had the host decided again before folding its own JobAdmitted, ids would repeat here
    # (JetStream would have deduplicated them, hiding the bug in the stream itself)
    assert len(service.emitted) == len(set(service.emitted)) == 60
    assert host.stats.duplicates == 0
    assert len(of_type(await stream_events(bus), events.JobAdmitted)) == 60


async def test_garbage_is_dead_lettered_once_even_with_two_hosts(bus: Bus) -> None:
    a, b = Admitter("0"), Admitter("1")
    async with running(Host(a, bus)) as ha, running(Host(b, bus)) as hb:
        await bus.publish(submitted("before"))
        bad_seq = await bus.publish_raw("gl.submit.t.x", b"\x00not json{")
        await eventually(lambda: ha.state.dead == [bad_seq] and hb.state.dead == [bad_seq])
        await bus.publish(submitted("after"))
        await eventually(lambda: {"before", "after"} <= ha.state.admitted)
        await settle(ha, hb)
    evs = await stream_events(bus)
    dead = of_type(evs, events.DeadLettered)
    assert len(dead) == 1
    (d,) = dead
    assert d.stream_seq == bad_seq
    assert d.subject == "gl.submit.t.x"
    assert d.event_id == events.derive_event_id("DeadLettered", str(bad_seq))
    assert "UndecodableEvent" in d.reason
    assert d.payload_head.endswith("not json{")
    assert sorted(e.job_id for e in of_type(evs, events.JobAdmitted)) == ["after", "before"]


async def test_an_evolve_failure_is_dead_lettered_and_skipped(bus: Bus) -> None:
    service = Admitter(fail_on="poison")
    async with running(Host(service, bus)) as host:
        poison_seq = await bus.publish(submitted("poison"))
        await bus.publish(submitted("fine"))
        await eventually(lambda: "fine" in host.state.admitted)
        await eventually(lambda: host.state.dead == [poison_seq])
        await settle(host)
    (d,) = of_type(await stream_events(bus), events.DeadLettered)
    assert d.reason.startswith("RuntimeError: cannot fold poison")
    assert "poison" not in host.state.admitted


async def test_a_restart_refolds_and_emits_nothing_new(bus: Bus) -> None:
    first = Admitter()
    async with running(Host(first, bus)) as host:
        for j in ("j1", "j2"):
            await bus.publish(submitted(j))
        await bus.publish_raw("gl.submit.t.x", b"garbage")
        await eventually(lambda: len(host.state.admitted) == 2 and host.state.dead)
        await settle(host)
    last = await bus.last_seq()

    again = Admitter()
    async with running(Host(again, bus)) as host2:
        await settle(host2)
        assert host2.folded_seq == last
        assert host2.state.admitted == {"j1", "j2"}
        assert again.decide_calls >= 1
    assert again.emitted == []
    assert host2.stats.dead_letters == 1  # it met the garbage again, but published nothing
    assert await bus.last_seq() == last


class Timer:
    """Emits one event once the clock passes `deadline_ms`; never receives a message."""

    name = "timer"
    instance = "0"

    def __init__(self, deadline_ms: int) -> None:
        self.deadline_ms = deadline_ms
        self.decided_at: list[int] = []

    def initial_state(self) -> set[str]:
        return set()

    def evolve(self, state: set[str], seq: int, event: events.Event) -> set[str]:
        if isinstance(event, events.JobAdmitted):
            state.add(event.job_id)
        return state

    def decide(self, state: set[str], now_ms: int) -> list[events.Event]:
        self.decided_at.append(now_ms)
        if now_ms >= self.deadline_ms and "timer" not in state:
            return [admitted("timer", "timer/0")]
        return []

    def next_wakeup_ms(self, state: set[str], now_ms: int) -> int | None:
        return None if "timer" in state else self.deadline_ms


class FakeClock:
    def __init__(self, now_ms: int = 1_000_000) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


async def test_next_wakeup_wakes_the_loop_without_a_message(bus: Bus) -> None:
    clock = FakeClock()
    service = Timer(deadline_ms=clock.now_ms + 200)
    async with running(Host(service, bus, clock=clock)) as host:
        await eventually(lambda: host.idle.is_set())
        assert service.decided_at == [1_000_000]
        clock.now_ms += 200  # time passes; nothing is published
        await eventually(lambda: "timer" in host.state, timeout_s=3)
        await settle(host)
    assert service.decided_at[-1] == 1_000_200
    assert len(of_type(await stream_events(bus), events.JobAdmitted)) == 1


async def test_run_service_stops_gracefully_on_the_stop_event(
    bus: Bus, nats_server: EmbeddedNats
) -> None:
    stop = asyncio.Event()
    hosts: list[Host] = []
    task = served(Admitter(), nats_server.url, stop, hosts)
    await bus.publish(submitted("j1"))
    await eventually(lambda: bool(hosts) and "j1" in hosts[0].state.admitted)
    stop.set()
    await asyncio.wait_for(task, 5)
    assert len(of_type(await stream_events(bus), events.JobAdmitted)) == 1


async def test_only_the_lease_holder_decides_and_a_standby_takes_over(
    bus: Bus, nats_server: EmbeddedNats
) -> None:
    first, second = Admitter("0"), Admitter("1")
    stop_first, stop_second = asyncio.Event(), asyncio.Event()
    hosts: list[Host] = []
    t1 = served(first, nats_server.url, stop_first, hosts, lease_ttl_s=2)
    await eventually(lambda: bool(hosts) and hosts[0].lease is not None and hosts[0].lease.held)
    t2 = served(second, nats_server.url, stop_second, hosts, lease_ttl_s=2)
    await eventually(lambda: len(hosts) == 2)
    h1, h2 = hosts
    await bus.publish(submitted("j1"))
    await eventually(lambda: "j1" in h2.state.admitted)  # the standby folds too
    assert first.emitted and not second.emitted and second.decide_calls == 0
    epoch1 = h1.leader_epoch
    stop_first.set()
    await asyncio.wait_for(t1, 5)  # releases the lease
    await eventually(lambda: h2.leader_epoch is not None)
    assert h2.leader_epoch > epoch1
    await bus.publish(submitted("j2"))
    await eventually(lambda: "j2" in h2.state.admitted)
    assert second.emitted == [events.derive_event_id("JobAdmitted", "j2")]
    stop_second.set()
    await asyncio.wait_for(t2, 5)
    assert len(of_type(await stream_events(bus), events.JobAdmitted)) == 2


async def test_a_service_waits_for_the_operator_to_create_the_lease_bucket_folding_meanwhile(
    bus: Bus, nats_server: EmbeddedNats, capsys
) -> None:
    from gpuledger.services.runtime.lease import BUCKET, lease_bucket

    await bus.js.delete_key_value(BUCKET)  # a stream provisioned without the bucket
    stop = asyncio.Event()
    hosts: list[Host] = []
    admitter = Admitter()
    task = served(admitter, nats_server.url, stop, hosts, lease_ttl_s=2)
    await bus.publish(submitted("j1"))
    await eventually(lambda: bool(hosts) and hosts[0].folded_seq == 1)  # folds meanwhile
    seen: list[str] = []

    def attempts() -> int:
        out = capsys.readouterr()
        seen.append(out.out + out.err)
        return "".join(seen).count("lease.bucket_unavailable")

    await eventually(lambda: attempts() >= 2, what="a second attempt to find the bucket")
    assert not task.done() and not hosts[0].may_decide and not admitter.emitted  # no decision
    await lease_bucket(bus)  # the operator provisions it
    await eventually(lambda: hosts[0].may_decide, timeout_s=10)
    await eventually(lambda: bool(admitter.emitted))
    stop.set()
    await asyncio.wait_for(task, 5)
    assert attempts() >= 2


SERVE_SCRIPT = """
import sys
from tests.runtime.test_host import Admitter
from gpuledger.services.runtime.host import serve
serve(Admitter(), sys.argv[1])
print("clean exit", flush=True)
"""


async def test_serve_stops_gracefully_on_sigterm(bus: Bus, nats_server: EmbeddedNats) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        SERVE_SCRIPT,
        nats_server.url,
        cwd=str(Path(__file__).resolve().parents[2]),
        env={**os.environ, "GPULEDGER_LOG_JSON": "1"},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        await bus.publish(submitted("j1"))

        async def decided() -> bool:
            return bool(of_type(await stream_events(bus), events.JobAdmitted))

        await eventually(decided, 10, "the service's first decision")
        proc.send_signal(signal.SIGTERM)
        out, err = await asyncio.wait_for(proc.communicate(), 10)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, err.decode()
    assert b"clean exit" in out
    lines = [json.loads(line) for line in err.decode().splitlines() if line.startswith("{")]
    decisions = [x for x in lines if x.get("event") == "host.decision"]
    assert decisions and decisions[0]["service"] == "admitter" and decisions[0]["instance"] == "0"
    assert any(x.get("event") == "host.stopped" for x in lines)


class Flaky(Admitter):
    """Its decide raises while a job named `boom` is pending."""

    def decide(self, state: AdmitState, now_ms: int) -> list[events.Event]:
        if "boom" in state.submitted and "boom" not in state.admitted:
            raise RuntimeError("decider bug")
        return super().decide(state, now_ms)


async def test_a_raising_decide_is_logged_and_folding_goes_on(bus: Bus) -> None:
    service = Flaky()
    async with running(Host(service, bus)) as host:
        await bus.publish(submitted("boom"))
        await eventually(lambda: host.stats.decide_errors >= 1)
        await bus.publish(admitted("boom"))  # someone else resolves it
        await bus.publish(submitted("ok"))
        await eventually(lambda: "ok" in host.state.admitted)
        await settle(host)
    assert host.folded_seq == await bus.last_seq()


async def test_a_host_started_before_the_stream_exists_waits_for_it(
    nats_server: EmbeddedNats,
) -> None:
    bus = await Bus.connect(nats_server.url, **nats_server.client_options())
    try:
        tries: list[int] = []
        follower = bus.follower

        async def counted(seq: int):
            tries.append(seq)
            return await follower(seq)

        bus.follower = counted  # type: ignore[method-assign]  # counts the host's tries to read
        host = Host(Admitter(), bus, retry_backoff_s=0.05)
        async with running(host):
            await eventually(lambda: len(tries) >= 2, what="the host to retry the missing stream")
            await bus.ensure_stream()
            await bus.publish(submitted("j1"))
            await eventually(lambda: "j1" in host.state.admitted)
    finally:
        await bus.close()


async def test_a_host_folds_on_after_its_server_restarts_in_place(tmp_path, monkeypatch) -> None:
    """`up` restarts its embedded server in place to clear a full disk's latched write error:
    every host reconnects and goes on folding and deciding (its consumer, gone with the
    restart, is made again)."""
    from tests.natsauth import as_admin

    with EmbeddedNats(tmp_path / "store") as server:
        as_admin(monkeypatch, server)
        bus = await Bus.connect(server.url, **server.client_options())
        await bus.ensure_stream()
        host_bus = await Bus.connect(server.url, **server.client_options())
        svc = Admitter()
        host = Host(svc, host_bus, stall_log_s=0.5)
        task = asyncio.create_task(host.run())
        try:
            await bus.publish(submitted("a"))
            await eventually(lambda: "a" in host.state.admitted, 30, "a admitted")
            await asyncio.to_thread(server.restart)
            await bus.publish_retrying(submitted("b"))
            await eventually(lambda: "b" in host.state.admitted, 30, "b admitted after a restart")
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await host_bus.close()
            await bus.close()
