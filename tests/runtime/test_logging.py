"""Logging cannot raise (issue 11, case 2): the structlog configuration every process uses
guards each logger method, no log call passes a reserved keyword, and every host log call site
that a bad message, a bad decision or a bus failure reaches runs through to a JSON line while
the host keeps going (real nats-server)."""

from __future__ import annotations

import ast
import asyncio
import io
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import msgspec
import pytest
import structlog

from gpuledger import events
from gpuledger.services.runtime.bus import Bus
from gpuledger.services.runtime.host import Host
from gpuledger.services.runtime.logging import configure_logging
from gpuledger.services.runtime.nats_server import EmbeddedNats
from tests.runtime.test_host import (
    AdmitState,
    Admitter,
    admitted,
    of_type,
    running,
    served,
    settle,
    stream_events,
    submitted,
)
from tests.waiting import eventually_async as eventually

ROOT = Path(__file__).resolve().parents[2]
Lines = Callable[[], list[dict]]


@pytest.fixture
def json_logs(monkeypatch: pytest.MonkeyPatch) -> Iterator[Lines]:
    """The production logging configuration (JSON, debug level) writing into a buffer."""
    buf = io.StringIO()
    monkeypatch.setenv("GPULEDGER_LOG_JSON", "1")
    monkeypatch.setenv("GPULEDGER_LOG_LEVEL", "debug")
    monkeypatch.setattr(sys, "stderr", buf)
    configure_logging()
    try:
        yield lambda: [json.loads(line) for line in buf.getvalue().splitlines() if line.strip()]
    finally:
        structlog.reset_defaults()


def named(lines: list[dict], name: str) -> list[dict]:
    return [x for x in lines if x.get("event") == name]


# ------------------------------------------------------------------ the configuration


class Unprintable:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")

    __str__ = __repr__


async def test_no_log_call_can_raise_under_the_process_configuration(json_logs: Lines) -> None:
    log = structlog.get_logger("t").bind(service="s")
    log.info("with.reserved", event="JobAdmitted")  # TypeError in plain structlog
    log.debug("debug.reserved", event="x")
    log.log(30, "log.reserved", event="y")
    log.error("unprintable", value=Unprintable())
    log.info(Unprintable())
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("with.traceback", event="z")
    await log.ainfo("async.reserved", event="w")
    lines = json_logs()
    (reserved,) = named(lines, "with.reserved")
    assert reserved["event_"] == "JobAdmitted" and reserved["service"] == "s"
    assert named(lines, "debug.reserved")[0]["event_"] == "x"
    assert named(lines, "log.reserved")[0]["level"] == "warning"
    assert "ValueError: boom" in named(lines, "with.traceback")[0]["exception"]
    assert named(lines, "async.reserved")[0]["event_"] == "w"
    failed = named(lines, "log.failed")
    assert [(f["method"], f["logged"], f["error"]) for f in failed] == [
        ("error", "unprintable", "RuntimeError"),
        ("info", "?", "RuntimeError"),
    ]


def test_a_closed_log_stream_does_not_raise(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    configure_logging()
    try:
        stream.close()
        structlog.get_logger("t").warning("into.the.void", event="x")  # nothing left to write to
    finally:
        structlog.reset_defaults()


def test_no_structlog_call_passes_a_reserved_keyword() -> None:
    """`event` is structlog's positional message; passing it as a keyword raised TypeError
    in `host.unpublishable` / `host.publish_failed` and killed admission."""
    methods = {
        "debug",
        "info",
        "warning",
        "warn",
        "error",
        "exception",
        "critical",
        "msg",
        "fatal",
        "log",
        "adebug",
        "ainfo",
        "awarning",
        "aerror",
        "aexception",
        "acritical",
    }
    offenders = []
    for pkg in ("services", "projections", "replay", "events"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr in methods
                ):
                    bad = {k.arg for k in node.keywords} & {"event"}
                    if bad and (node.args or node.func.attr in ("log", "alog")):
                        offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} {sorted(bad)}")
    assert offenders == []


# ------------------------------------------------------------------ host log call sites


class Unroutable(Admitter):
    """Also admits a job whose id cannot be a subject token, on every decide."""

    name = "unroutable"

    def decide(self, state: AdmitState, now_ms: int) -> list[events.Event]:
        out = super().decide(state, now_ms)
        return (
            [*out, admitted("a.b*c >d", f"{self.name}/{self.instance}")] if state.submitted else out
        )


async def test_host_unpublishable_is_logged_once_and_the_host_goes_on(
    bus: Bus, json_logs: Lines
) -> None:
    service = Unroutable()
    async with running(Host(service, bus)) as host:
        for j in ("j1", "j2", "j3"):
            await bus.publish(submitted(j))
            await eventually(lambda j=j: j in host.state.admitted)
        await settle(host)
    assert host.state.admitted == {"j1", "j2", "j3"}
    assert host.stats.publish_errors >= 3  # tried on every decide ...
    (line,) = named(json_logs(), "host.unpublishable")  # ... reported once
    assert line["event_type"] == "JobAdmitted"
    assert "invalid job id 'a.b*c >d'" in line["error"]
    assert line["level"] == "error" and line["service"] == "unroutable"


class OversizedOnce(Admitter):
    """The first decision is too large for NATS (max_payload): a publish failure."""

    name = "oversized"

    def decide(self, state: AdmitState, now_ms: int) -> list[events.Event]:
        out = super().decide(state, now_ms)
        if out and self.decide_calls == 1:
            return [msgspec.structs.replace(out[0], slo_class="x" * (2 << 20))]
        return out


async def test_host_publish_failed_backs_off_and_retries(bus: Bus, json_logs: Lines) -> None:
    async with running(Host(OversizedOnce(), bus, retry_backoff_s=0.05)) as host:
        await bus.publish(submitted("j1"))
        await eventually(lambda: "j1" in host.state.admitted)
        await settle(host)
    (line,) = named(json_logs(), "host.publish_failed")
    assert line["event_type"] == "JobAdmitted"
    assert "maximum payload" in line["error"].lower() or "payload" in line["error"].lower()
    assert host.stats.publish_errors == 1


class Brittle(Admitter):
    """decide raises once; next_wakeup_ms always raises; evolve cannot fold a DeadLettered."""

    name = "brittle"

    def decide(self, state: AdmitState, now_ms: int) -> list[events.Event]:
        if self.decide_calls == 0 and state.submitted:
            self.decide_calls += 1
            raise RuntimeError("decider bug")
        return super().decide(state, now_ms)

    def next_wakeup_ms(self, state: AdmitState, now_ms: int) -> int | None:
        raise RuntimeError("wakeup bug")

    def evolve(self, state: AdmitState, seq: int, event: events.Event) -> AdmitState:
        if isinstance(event, events.DeadLettered):
            state.last_seq = seq
            raise RuntimeError("cannot fold dead letters")
        return super().evolve(state, seq, event)


async def test_host_failure_log_lines_run_and_the_host_survives(bus: Bus, json_logs: Lines) -> None:
    async with running(Host(Brittle(), bus, max_idle_s=0.2)) as host:
        await bus.publish(submitted("j1"))
        bad = await bus.publish_raw(
            "gl.submit.t.x",
            b'{"type":"JobSubmitted.v1","x":' + b"[" * 50_000 + b"]" * 50_000 + b"}",
        )
        await bus.publish(submitted("j2"))
        await eventually(lambda: {"j1", "j2"} <= host.state.admitted)
        await settle(host)
    lines = json_logs()
    assert named(lines, "host.decide_failed")[0]["exception"].endswith("RuntimeError: decider bug")
    assert "RuntimeError: wakeup bug" in named(lines, "host.next_wakeup_failed")[0]["exception"]
    (dead,) = named(lines, "host.dead_letter")
    assert (
        dead["seq"] == bad
        and dead["reason"] == "UndecodableEvent: JSON nested deeper than 64 levels"
    )
    assert named(lines, "host.dead_letter_recorded")[0]["seq"] == bad
    assert named(lines, "host.dead_letter_not_foldable")[0]["error"] == "cannot fold dead letters"
    assert named(lines, "host.decision")
    assert not named(lines, "log.failed")
    assert len(of_type(await stream_events(bus), events.DeadLettered)) == 1


async def test_host_start_and_stop_lines(nats_server: EmbeddedNats, json_logs: Lines) -> None:
    bus = await Bus.connect(nats_server.url, **nats_server.client_options())
    try:
        stop = asyncio.Event()
        hosts: list[Host] = []
        task = served(Admitter(), nats_server.url, stop, hosts, retry_backoff_s=0.05)
        # no stream yet: the host says so and waits for it
        await eventually(lambda: named(json_logs(), "host.stream_unavailable"))
        await bus.ensure_stream()
        await bus.publish(submitted("j1"))
        await eventually(lambda: bool(hosts) and "j1" in hosts[0].state.admitted)
        stop.set()
        await asyncio.wait_for(task, 5)
    finally:
        await bus.close()
    lines = json_logs()
    assert named(lines, "host.stream_unavailable")
    assert named(lines, "host.folded")[0]["service"] == "admitter"
    assert named(lines, "host.stopped")[0]["folded_seq"] == 2
