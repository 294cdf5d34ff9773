"""Plays a scenario's timeline against a live bus in real time, and waits for its jobs.

The same scenario file drives the simulator and a live cluster, so their outcomes can be
compared (`gpuledger demo`, integration tests).
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import msgspec

from gpuledger import events as ev
from gpuledger.replay.scenario import Scenario
from gpuledger.services.domain.fold.acceptance import admit
from gpuledger.services.domain.fold.ledger import TERMINAL, Ledger


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


async def publish_config(bus, scenario: Scenario) -> None:
    at = _now_ms()
    for e in scenario.config:
        await bus.publish(msgspec.structs.replace(e, occurred_at_ms=at))


async def play(bus, scenario: Scenario, speed: float = 1.0) -> int:
    """Publish every timeline input at its offset from now; returns the start time (ms)."""
    start = _now_ms()
    for at_ms, event in scenario.inputs:
        delay = (start + at_ms / speed - _now_ms()) / 1000
        if delay > 0:
            await asyncio.sleep(delay)
        live = msgspec.structs.replace(event, occurred_at_ms=_now_ms())
        if isinstance(live, ev.JobSubmitted):
            from gpuledger.services.runtime.bus import AlreadyExists

            with contextlib.suppress(AlreadyExists):
                await bus.create_once(live)
        else:
            await bus.publish(live)
    return start


async def fold(bus) -> tuple[Ledger, list[tuple[int, str, ev.Event]]]:
    """Fold the whole stream; returns the ledger and the decoded log."""
    ledger = Ledger()
    log: list[tuple[int, str, ev.Event]] = []
    async for rec in bus.read_all():
        with contextlib.suppress(Exception):  # a bad message is dead-lettered live; skip it
            event = ev.at_receipt(ev.decode(rec.data), rec.received_ms)
            admit(ledger, rec.seq, event, rec.subject)
            log.append((rec.seq, rec.subject, event))
    return ledger, log


async def wait_for_nodes(bus, names: list[str], timeout_s: float, poll_s: float = 0.2) -> bool:
    """Until every named node has registered (so jobs are not judged against an empty fleet)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ledger, _ = await fold(bus)
        if all(n in ledger.nodes for n in names):
            return True
        await asyncio.sleep(poll_s)
    return False


async def wait_for_jobs(bus, job_ids: list[str], timeout_s: float, poll_s: float = 0.5) -> Ledger:
    """Until every job is terminal (or the timeout); returns the last folded ledger."""
    deadline = time.monotonic() + timeout_s
    while True:
        ledger, _ = await fold(bus)
        if all(j in ledger.jobs and ledger.jobs[j].state in TERMINAL for j in job_ids):
            return ledger
        if time.monotonic() > deadline:
            return ledger
        await asyncio.sleep(poll_s)
