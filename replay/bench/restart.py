"""Restart benchmark (`gpuledger bench restart --events N --json OUT`): each service's time to
ready after N events, from a snapshot and by a full refold, measured in the same run.

A fresh embedded nats-server gets the synthetic log of `bench.projector.synthetic_log` (a
realistic job-lifecycle mix over 64 eight-GPU nodes) in two parts: the first N - T events,
then the tail of T = min(N // 10, the default snapshot interval) events, the most a service
folds after its last snapshot under the default `SnapshotPolicy`. For each service (admission,
quota, scheduler, preemption, the simulated node agent), in one process, one after another:

1. seed: a host of the first service folds the first part and saves its snapshot (not timed
   as ready; the loop's pause for the fork, the encoding time and the sizes are reported); the
   same fold is saved as each other service's snapshot (every one of them folds the same
   `Ledger`), by the host's code;
2. the tail is published (once, before the first service's step 3);
3. `ready_s_full_refold`: a host with snapshots off connects, folds all N events and makes its
   first decide (skipped with `full_refold=False`, `--no-full-refold`: null);
4. `ready_s`: a host with snapshots on connects, loads the snapshot, folds the T tail events
   and makes its first decide; `restore_s` is the part of it spent reading, checking and
   decoding the snapshot (the rest: connecting, folding the tail, the decide).

Ready = connect + load + fold + first `decide` returned. The measured decides return nothing
(their output is discarded), so every measurement sees the same log. `ratio` is
`ready_s_full_refold / ready_s`. (It lives next to `replay/bench/projector.py`, whose synthetic
log it replays: replay/ may not import projections/, which imports replay/.)
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

DEFAULT_TAIL = 10_000
"""`SnapshotPolicy().every_events` (a test keeps them equal)."""


def _services(nodes):
    from gpuledger.services.admission.decider import Admission
    from gpuledger.services.node_agent.simulated import SimulatedAgent
    from gpuledger.services.preemption.decider import Preemption
    from gpuledger.services.quota.decider import Quota
    from gpuledger.services.scheduler.decider import Scheduler

    return {
        "admission": Admission,
        "quota": Quota,
        "scheduler": Scheduler,
        "preemption": Preemption,
        "node-agent": lambda: SimulatedAgent(tuple(nodes)),
    }


async def _publish(nc, entries) -> None:
    from gpuledger import events as ev

    for i, (_, subject, event) in enumerate(entries, 1):
        await nc.publish(subject, ev.encode(event))
        if i % 5_000 == 0:
            await nc.flush()
    await nc.flush()


async def _wait_for_seq(bus, seq: int, timeout_s: float = 600.0) -> None:
    deadline = time.monotonic() + timeout_s
    while await bus.last_seq() < seq:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the stream holds {await bus.last_seq()} of {seq} events")
        await asyncio.sleep(0.05)


async def _ready(server, make, policy, *, until_snapshot: bool = False) -> tuple[float, Any]:
    """Start a host; return (seconds to its first decide, the host) and stop it."""
    from gpuledger.services.runtime.bus import Bus
    from gpuledger.services.runtime.host import Host, open_snapshots

    service = make()
    first = asyncio.Event()
    decide = service.decide

    def measured(state, now_ms):
        decide(state, now_ms)  # computed, then discarded: the log stays the same
        first.set()
        return []

    t0 = time.perf_counter()
    bus = await Bus.connect(server.url, name="gpuledger-bench-restart", **server.client_options())
    store = await open_snapshots(bus, service, _Quiet()) if policy.enabled else None
    host = Host(service, bus, snapshots=store, snapshot_policy=policy)
    service.decide = measured
    restore = host._restore

    async def timed_restore() -> None:  # the snapshot's share of ready: read, check, decode
        t = time.perf_counter()
        await restore()
        host.restore_s = time.perf_counter() - t  # type: ignore[attr-defined]  # a bench-only attribute on Host

    host._restore = timed_restore  # type: ignore[method-assign]  # the bench times Host._restore
    task = asyncio.create_task(host.run())
    try:
        await first.wait()
        ready = time.perf_counter() - t0
        if until_snapshot:
            while host.stats.snapshots_saved < 1:
                if host.stats.snapshot_errors or task.done():
                    raise RuntimeError(f"{service.name}: no snapshot saved")
                await asyncio.sleep(0.02)
        return ready, host
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await bus.close()


class _Quiet:
    def warning(self, *args, **kwargs) -> None:
        pass


async def _bench(
    n: int, tail: int, work: Path, progress, full_refold: bool = True
) -> dict[str, Any]:
    from gpuledger import events as ev
    from gpuledger.replay.bench.projector import synthetic_log
    from gpuledger.services.runtime.bus import Bus
    from gpuledger.services.runtime.host import Host, open_snapshots
    from gpuledger.services.runtime.nats_server import EmbeddedNats
    from gpuledger.services.runtime.snapshots import SnapshotPolicy, snapshot_bucket

    entries = list(synthetic_log(n))
    nodes = [e.node for _, _, e in entries if isinstance(e, ev.NodeRegistered)]
    head = entries[: n - tail]
    with EmbeddedNats(work / "nats") as server:
        bus = await Bus.connect(server.url, name="gpuledger-bench", **server.client_options())
        await bus.ensure_stream()
        await snapshot_bucket(bus, create=True)
        t0 = time.perf_counter()
        await _publish(bus.nc, head)
        await _wait_for_seq(bus, len(head))
        progress(f"published {len(head):,} events in {time.perf_counter() - t0:.1f}s")
        services = _services(nodes)
        seeds: dict[str, Any] = {}
        often = SnapshotPolicy(every_events=1, every_s=0.0, max_cost_share=1e9)
        first = next(iter(services))
        _, seed = await _ready(server, services[first], often, until_snapshot=True)
        for name, make in services.items():
            host = seed
            if name != first:  # the same fold (every one is a LedgerService): saved as its own
                host = Host(
                    make(),
                    bus,
                    snapshots=await open_snapshots(bus, make(), _Quiet()),
                    snapshot_policy=often,
                )
                host.state, host.folded_seq = seed.state, seed.folded_seq
                host._maybe_snapshot()
                await host._snapshot_task
            m, pause, cost = seeds[name] = (
                host._manifest,
                host._snapshot_pause_s,
                host._snapshot_cost_s,
            )
            progress(
                f"{name}: snapshot at seq {m.seq:,}: {m.raw_bytes / 1e6:.1f} MB encoded, "
                f"{m.bytes / 1e6:.1f} MB stored, loop pause {pause:.3f}s, encoding "
                f"{cost:.2f}s (forked child)"
            )
        del seed, host
        await _publish(bus.nc, entries[n - tail :])
        await _wait_for_seq(bus, n)
        out: dict[str, Any] = {}
        for name, make in services.items():
            full_s, full = None, None
            if full_refold:
                full_s, full = await _ready(server, make, SnapshotPolicy(enabled=False))
            snap_s, snap = await _ready(
                server, make, SnapshotPolicy(every_events=10**12, every_s=1e12)
            )
            m, pause, cost = seeds[name]
            out[name] = {
                "ready_s": round(snap_s, 3),
                "restore_s": round(snap.restore_s, 3),
                "ready_s_full_refold": None if full_s is None else round(full_s, 3),
                "ratio": round(full_s / snap_s, 2) if snap_s and full_s else None,
                "restored_seq": snap.stats.restored_seq,
                "folded_after_start": snap.stats.folded,
                "folded_full_refold": None if full is None else full.stats.folded,
                "snapshot_raw_bytes": m.raw_bytes,
                "snapshot_bytes": m.bytes,
                "snapshot_pause_s": round(pause, 3),
                "snapshot_encode_s": round(cost, 3),
            }
            refold = (
                ""
                if full is None
                else (f", {full_s:.2f}s by a full refold ({full.stats.folded:,})")
            )
            progress(
                f"{name}: ready {snap_s:.2f}s from the snapshot (+{snap.stats.folded:,} "
                f"events; {snap.restore_s:.2f}s reading and decoding it){refold}"
            )
            del full, snap
        await bus.close()
    return out


def run_restart_bench(
    events: int = 100_000, tail: int | None = None, progress=None, full_refold: bool = True
) -> dict[str, Any]:
    """Measure every service's time to ready after `events` events (see the module doc)."""
    from gpuledger.services.runtime.gctune import fewer_gc_passes

    tail = min(events // 10, DEFAULT_TAIL) if tail is None else min(tail, events - 1)
    say = progress or (lambda _m: None)
    started = datetime.datetime.now(datetime.UTC)
    with tempfile.TemporaryDirectory(prefix="gpuledger-restart-") as tmp, fewer_gc_passes():
        services = asyncio.run(_bench(events, tail, Path(tmp), say, full_refold))
    return {
        "date": started.isoformat(timespec="seconds"),
        "events": events,
        "tail_events": tail,
        "goal_ready_s": 3.0,
        "services": services,
        "machine": {
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "implementation": sys.implementation.name,
            "platform": platform.platform(),
            "load_avg_1m": round(os.getloadavg()[0], 2),
        },
    }
