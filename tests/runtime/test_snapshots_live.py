"""Snapshots over a real nats-server: a service folds, saves its state, is restarted, starts
from the snapshot and folds only the tail, and decides as a fresh refold would; a corrupted
snapshot gives one log line and a full refold; each service may touch only its own key."""

from __future__ import annotations

import asyncio
import contextlib
import pickle
from pathlib import Path

import nats.errors
import nats.js.errors
import pytest
from structlog.testing import capture_logs

from gpuledger import events
from gpuledger.replay.checking import digest
from gpuledger.replay.scenario import load
from gpuledger.replay.simulator import simulate
from gpuledger.services.domain.fold.ledger import Ledger
from gpuledger.services.runtime import host as host_module
from gpuledger.services.runtime import snapshots
from gpuledger.services.runtime.bus import Bus
from gpuledger.services.runtime.host import Host, open_snapshots
from gpuledger.services.runtime.snapshots import SnapshotPolicy, SnapshotStore, snapshot_bucket
from gpuledger.services.scheduler.decider import Scheduler
from tests.runtime.test_host import running, settle
from tests.waiting import eventually_async as eventually

DEMO = Path(__file__).resolve().parents[2] / "examples" / "demo.yaml"
NOW_MS = 10**13  # a fixed clock: both decides compared below see the same time
OFTEN = SnapshotPolicy(every_events=1, every_s=0.0, max_cost_share=1e9)


@pytest.fixture
def demo_log() -> list[events.Event]:
    return [e for _, _, e in simulate(load(DEMO)).log]


async def publish(bus: Bus, evs: list[events.Event]) -> None:
    for e in evs:
        await bus.publish(e)


async def scheduler_host(server, policy: SnapshotPolicy = OFTEN) -> tuple[Host, Bus]:
    """A scheduler host connected as the scheduler's own identity, with its snapshot store."""
    bus = await Bus.connect(server.url, **server.client_options("scheduler"))
    service = Scheduler()
    store = await open_snapshots(bus, service, None)
    assert store is not None and store.key == "scheduler"
    return Host(service, bus, clock=lambda: NOW_MS, snapshots=store, snapshot_policy=policy), bus


async def fresh_fold(bus: Bus) -> Ledger:
    ledger = Ledger()
    async for r in bus.read_all():
        ledger.apply(r.seq, events.at_receipt(events.decode(r.data), r.received_ms))
    return ledger


@pytest.fixture
async def admin_bus(nats_server):
    b = await Bus.connect(nats_server.url, **nats_server.client_options())
    await b.ensure_stream()
    await snapshot_bucket(b, create=True)
    try:
        yield b
    finally:
        await b.close()


async def test_a_restart_loads_the_snapshot_folds_the_tail_and_decides_as_a_refold(
    nats_server, admin_bus, demo_log
) -> None:
    half = len(demo_log) // 2
    await publish(admin_bus, demo_log[:half])
    host, bus = await scheduler_host(nats_server)
    async with running(host):
        await settle(host)
        await eventually(lambda: host.stats.last_snapshot_seq == host.folded_seq)
    saved_at = host.stats.last_snapshot_seq
    assert host.stats.snapshots_saved >= 1 and host.stats.restored_seq == 0
    await bus.close()

    await publish(admin_bus, demo_log[half:])
    total = await admin_bus.last_seq()
    assert total > saved_at
    restarted, bus = await scheduler_host(
        nats_server, SnapshotPolicy(enabled=True, every_events=10**9)
    )
    with capture_logs() as logs:
        async with running(restarted):
            await settle(restarted)
    loaded = [entry for entry in logs if entry["event"] == "host.snapshot_loaded"]
    assert [entry["seq"] for entry in loaded] == [saved_at]
    assert restarted.stats.restored_seq == saved_at
    assert restarted.stats.folded == await admin_bus.last_seq() - saved_at  # the tail only
    assert restarted.stats.folded < await admin_bus.last_seq()
    fresh = await fresh_fold(admin_bus)
    assert digest(restarted.state) == digest(fresh)
    assert Scheduler().decide(restarted.state, NOW_MS) == Scheduler().decide(fresh, NOW_MS)
    await bus.close()


async def snapshot_saved(nats_server, admin_bus, demo_log) -> None:
    """Given the demo log published and the scheduler's snapshot of it saved (by a scheduler
    host that then stopped)."""
    await publish(admin_bus, demo_log)
    host, bus = await scheduler_host(nats_server)
    async with running(host):
        await settle(host)
        await eventually(lambda: host.stats.last_snapshot_seq == host.folded_seq)
    await bus.close()


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda chunk: chunk[::-1], "digest mismatch"),
        (lambda chunk: chunk[: len(chunk) // 2], "truncated"),
        (lambda chunk: b"", "truncated"),
    ],
)
async def test_a_corrupted_snapshot_gives_one_line_and_a_full_refold(
    nats_server, admin_bus, demo_log, damage, reason
) -> None:
    await snapshot_saved(nats_server, admin_bus, demo_log)
    kv = await snapshot_bucket(admin_bus)
    manifest = await SnapshotStore(kv, "scheduler", 1 << 20, b"").manifest(verified=False)
    chunk = f"scheduler.{manifest.slot}.0"
    await kv.put(chunk, damage((await kv.get(chunk)).value))

    again, bus = await scheduler_host(nats_server)
    with capture_logs() as logs:
        async with running(again):
            await settle(again)
    ignored = [entry for entry in logs if entry["event"] == "host.snapshot_ignored"]
    assert len(ignored) == 1 and reason in ignored[0]["reason"], logs
    assert not [entry for entry in logs if entry["event"] == "host.snapshot_loaded"]
    assert again.stats.restored_seq == 0
    assert again.stats.folded == await admin_bus.last_seq()  # the whole log
    assert digest(again.state) == digest(await fresh_fold(admin_bus))
    await bus.close()


class _Runs:
    """What a pickled payload would run on load (snapshots used to be unpickled)."""

    def __reduce__(self):
        return (exec, ("import pathlib; pathlib.Path(__import__('os').environ['RAN']).touch()",))


@pytest.mark.parametrize("payload", ["pickle", "graph"])
async def test_a_snapshot_written_with_the_admin_key_is_refused_and_nothing_runs(
    nats_server, admin_bus, demo_log, tmp_path, monkeypatch, payload
) -> None:
    """Given the scheduler's own snapshot, when the operator (who may write any key of the
    bucket) replaces it with one it signed with its own key, a pickle that would run code or
    a well-formed fold of its own, then the restarted scheduler says why in one line, refolds
    the whole log, and nothing in the payload ran."""
    ran = tmp_path / "ran"
    monkeypatch.setenv("RAN", str(ran))
    await snapshot_saved(nats_server, admin_bus, demo_log)

    kv = await snapshot_bucket(admin_bus)
    admin_key = snapshots.mac_key(snapshots.seed_of_creds(nats_server.creds("admin")))
    store = SnapshotStore(kv, "scheduler", 1 << 20, admin_key)
    genuine = await store.manifest(verified=False)
    if payload == "pickle":
        raw = pickle.dumps(_Runs())
    else:  # a fold the operator made up: no job at all
        raw = snapshots.dumps(Ledger(last_seq=genuine.seq))
    data, digest_ = snapshots.compress(raw)
    fields = {
        f: getattr(genuine, f)
        for f in ("service", "instance", "seq", "stream_first_seq", "stream_created")
    }
    await store.save({**fields, "config_digest": "", "raw_bytes": len(raw)}, data, digest_, genuine)

    again, bus = await scheduler_host(nats_server)
    with capture_logs() as logs:
        async with running(again):
            await settle(again)
    ignored = [entry for entry in logs if entry["event"] == "host.snapshot_ignored"]
    assert len(ignored) == 1, logs
    assert "forged or foreign" in ignored[0]["reason"]
    assert ignored[0]["action"] == "folding the whole log"
    assert not [entry for entry in logs if entry["event"] == "host.snapshot_loaded"]
    assert again.stats.restored_seq == 0 and again.stats.folded == await admin_bus.last_seq()
    assert digest(again.state) == digest(await fresh_fold(admin_bus))
    assert not ran.exists()
    await bus.close()


@pytest.mark.parametrize(
    ("principal", "own", "other"),
    [
        ("scheduler", "scheduler", "quota"),
        ("node:n1", "node-agent.n1", "node-agent.n2"),
        ("agents", "node-agent.sim", "scheduler"),
    ],
)
async def test_a_service_writes_and_reads_only_its_own_snapshot(
    nats_server, admin_bus, principal, own, other
) -> None:
    if principal.startswith("node:"):
        nats_server.add_principals(principal)
    kv_admin = await snapshot_bucket(admin_bus)
    await kv_admin.put(other, b"{}")
    bus = await Bus.connect(nats_server.url, **nats_server.client_options(principal))
    try:
        kv = await snapshot_bucket(bus)
        await kv.put(own, b"{}")
        await kv.put(f"{own}.a.0", b"chunk")
        assert (await kv.get(f"{own}.a.0")).value == b"chunk"
        for attempt in (kv.put(other, b"x"), kv.put(f"{other}.a.0", b"x"), kv.get(other)):
            with pytest.raises((nats.errors.Error, nats.js.errors.Error, TimeoutError)):
                await asyncio.wait_for(attempt, 1)
        with pytest.raises((nats.errors.Error, nats.js.errors.Error, TimeoutError)):
            await asyncio.wait_for(bus.js.delete_key_value("gpuledger-snapshots"), 1)
    finally:
        with contextlib.suppress(Exception):
            await bus.close()
    assert (await kv_admin.get(other)).value == b"{}"


async def test_a_service_that_could_not_open_its_snapshot_bucket_saves_once_it_answers(
    nats_server, demo_log, monkeypatch
) -> None:
    """Started while the bucket does not answer (here: not created yet), a service folds the
    whole log and says so once; it keeps trying in the background, and once the bucket is
    there it saves its fold, so its next restart does not refold everything."""
    monkeypatch.setattr(host_module, "SNAPSHOT_REOPEN_S", (0.05, 0.2))
    admin = await Bus.connect(nats_server.url, **nats_server.client_options())
    await admin.ensure_stream()
    half = len(demo_log) // 2
    await publish(admin, demo_log[:half])
    hosts: list[Host] = []
    stop = asyncio.Event()
    with capture_logs() as logs:
        task = asyncio.create_task(
            host_module.run_service(
                Scheduler(),
                nats_server.url,
                stop=stop,
                clock=lambda: NOW_MS,
                on_host=hosts.append,
                nats_options=nats_server.client_options("scheduler"),
                snapshot_policy=OFTEN,
            )
        )
        try:
            await eventually(lambda: bool(hosts))
            await settle(hosts[0], timeout=10)
            assert hosts[0].snapshots is None and hosts[0].stats.snapshots_saved == 0
            await snapshot_bucket(admin, create=True)
            await eventually(lambda: hosts[0].snapshots is not None)
            await publish(admin, demo_log[half:])
            await eventually(lambda: hosts[0].stats.snapshots_saved >= 1, timeout_s=10)
        finally:
            stop.set()
            await task
            await admin.close()
    said = [e["event"] for e in logs if e["event"].startswith("host.snapshots_")]
    assert said == ["host.snapshots_off", "host.snapshots_on"]
    assert hosts[0].stats.last_snapshot_seq > half


def test_the_restart_bench_times_a_full_refold_only_when_asked() -> None:
    from gpuledger.replay.bench.restart import run_restart_bench

    both = run_restart_bench(2_000, full_refold=True)["services"]
    for name, out in both.items():
        assert out["folded_full_refold"] == 2_000 and out["ready_s_full_refold"] > 0, name
        assert out["restored_seq"] == 1_800 and out["folded_after_start"] == 200, name
        assert 0 < out["restore_s"] < out["ready_s"], name
    alone = run_restart_bench(2_000, full_refold=False)["services"]
    assert all(
        out["ready_s_full_refold"] is None and out["ratio"] is None for out in alone.values()
    )
