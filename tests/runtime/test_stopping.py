"""Issue 11, case 12: a service stops on SIGTERM / SIGINT in every state, retries NATS with
jittered backoff (one JSON log line per attempt, never a traceback), and nats-py's own log
records come out as structlog JSON lines.

Each process test runs `gpuledger run ROLE` as a real subprocess against a port nobody
listens on (NATS down from the start) or against a real nats-server that is then killed.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import structlog

from gpuledger.services.runtime.bus import Bus, backoff_delay, connect_backoff
from gpuledger.services.runtime.nats_server import EmbeddedNats
from tests import natsauth
from tests.natsauth import as_admin
from tests.runtime.test_host import submitted
from tests.waiting import eventually

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "demo.yaml"


def closed_port_url() -> str:
    """A loopback URL where nothing listens (the port was free a moment ago)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"nats://127.0.0.1:{port}"


class Service:
    """`gpuledger run ROLE ...` (or `python -c SCRIPT ...`) as a subprocess; a thread collects
    its stderr line by line (so a chatty child never blocks on a full pipe)."""

    def __init__(self, *args: str, argv: list[str] | None = None) -> None:
        self.proc = subprocess.Popen(
            argv or [sys.executable, "-m", "gpuledger.services.cli", "run", *args],
            cwd=str(ROOT),
            env={**os.environ, "GPULEDGER_LOG_JSON": "1", "GPULEDGER_LOG_LEVEL": "info"},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)

    def events(self) -> list[str]:
        return [json.loads(x).get("event", "") for x in list(self.lines) if x.startswith("{")]

    def wait_for(self, event: str, timeout: float = 30.0, count: int = 1) -> None:
        """Wait until `count` JSON lines with this `event` have arrived."""

        def arrived() -> bool:
            if self.events().count(event) >= count:
                return True
            if self.proc.poll() is not None and not self._reader.is_alive():
                raise RuntimeError(f"exited before a {event!r} line")  # stops the wait
            return False

        try:
            eventually(arrived, timeout, f"a {event!r} line")
        except (AssertionError, RuntimeError) as exc:
            raise AssertionError(
                f"no {event!r} line; stderr so far:\n{''.join(self.lines)}"
            ) from exc

    def stop(self, sig: signal.Signals) -> tuple[int, float]:
        """Send `sig`; return the exit status and the seconds it took to exit."""
        started = time.monotonic()
        self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        took = time.monotonic() - started
        self._reader.join(10)
        return self.proc.returncode, took

    def records(self) -> list[dict]:
        """Every stderr line, parsed: fails if any line is not one JSON object."""
        out = []
        for line in self.lines:
            assert line.startswith("{"), f"not a JSON line: {line!r}\n{''.join(self.lines)}"
            out.append(json.loads(line))
        return out


def assert_clean_stop(svc: Service, sig: signal.Signals) -> list[dict]:
    code, took = svc.stop(sig)
    text = "".join(svc.lines)
    assert code == 0, text
    assert "Traceback" not in text
    records = svc.records()
    assert [r["event"] for r in records][-1] == "process.stopped", text
    assert {"process.stopping"} <= {r["event"] for r in records}
    return records


ROLES = {
    "scheduler": ["scheduler"],
    "admission": ["admission"],
    "node-agent": ["node-agent", "--config", str(DEMO), "--node", "shared-1"],
}


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("role", sorted(ROLES))
def test_a_service_with_nats_down_retries_with_backoff_and_stops_on_a_signal(role, sig):
    # Given no NATS server at the URL
    svc = Service(*ROLES[role], "--nats-url", closed_port_url())
    try:
        # when the service has tried to connect a few times and is then signalled
        svc.wait_for("bus.connect_failed", count=3)
    finally:
        records = assert_clean_stop(svc, sig)  # then it exits 0 within seconds, no traceback
    attempts = [r for r in records if r["event"] == "bus.connect_failed"]
    # one line per attempt, numbered, with the cause and the jittered wait before the next
    assert [a["attempt"] for a in attempts] == list(range(1, len(attempts) + 1))
    assert all("ConnectionRefusedError" in a["error"] for a in attempts)
    assert all(0.25 <= a["retry_in_s"] <= 5.0 for a in attempts)
    assert 3 <= len(attempts) <= 8  # backing off: ~4 tracebacks a second before the fix


def test_the_projector_with_nats_down_stops_on_sigterm(tmp_path):
    svc = Service("projector", "--data", str(tmp_path), "--nats-url", closed_port_url())
    try:
        svc.wait_for("bus.connect_failed", count=2)
    finally:
        records = assert_clean_stop(svc, signal.SIGTERM)
    assert sum(r["event"] == "bus.connect_failed" for r in records) >= 2


async def _provision(url: str, jobs: int) -> None:
    bus = await Bus.connect(url, **natsauth.options())
    try:
        await bus.ensure_stream()
        for chunk in range(0, jobs, 500):
            await bus.publish_many(
                [submitted(f"j{i}") for i in range(chunk, min(jobs, chunk + 500))]
            )
    finally:
        await bus.close()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_services_stop_after_the_server_they_follow_is_killed(monkeypatch, tmp_path, sig):
    # Given a scheduler and the projector connected to a real nats-server holding a log
    server = EmbeddedNats(tmp_path / "nats").start()
    as_admin(monkeypatch, server)
    services: list[Service] = []
    try:
        asyncio.run(_provision(server.url, 50))
        services = [
            Service("scheduler", "--nats-url", server.url),
            Service("projector", "--data", str(tmp_path), "--nats-url", server.url),
        ]
        for svc in services:
            svc.wait_for("bus.connected")
        services[0].wait_for("host.folded")
        # when the server dies and they have tried to reconnect
        server.kill()
        for svc in services:
            svc.wait_for("bus.reconnect_failed")
    finally:
        # then each stops within seconds on the signal, exit 0, JSON lines only
        results = [assert_clean_stop(svc, sig) for svc in services]
        server.stop()
    for records in results:
        events_ = [r["event"] for r in records]
        assert "bus.disconnected" in events_
        assert all(
            r.get("attempt", 1) >= 1 for r in records if r["event"] == "bus.reconnect_failed"
        )


def test_a_service_stops_while_folding_a_long_log(monkeypatch, tmp_path):
    # Given a log of 20,000 submissions
    server = EmbeddedNats(tmp_path / "nats").start()
    as_admin(monkeypatch, server)
    try:
        asyncio.run(_provision(server.url, 20_000))
        svc = Service("admission", "--nats-url", server.url)
        try:
            # when SIGTERM arrives as soon as it has connected (it is folding)
            svc.wait_for("bus.connected")
        finally:
            records = assert_clean_stop(svc, signal.SIGTERM)
    finally:
        server.stop()
    stopped = [r for r in records if r["event"] == "host.stopped"]
    assert len(stopped) == 1 and 0 <= stopped[0]["folded_seq"] <= 20_000


STUCK_SCRIPT = """
import sys, time
import structlog
from tests.runtime.test_host import Admitter
from gpuledger.services.runtime.host import serve

class Stuck(Admitter):
    def decide(self, state, now_ms):
        if state.submitted:
            structlog.get_logger().info("stuck.deciding")
            time.sleep(60)  # a synchronous step that never yields to the event loop
        return super().decide(state, now_ms)

serve(Stuck(), sys.argv[1])
"""


def test_a_service_stuck_in_a_synchronous_decide_is_ended_within_seconds(monkeypatch, tmp_path):
    # Given a service whose decide blocks the event loop for a minute
    server = EmbeddedNats(tmp_path / "nats").start()
    as_admin(monkeypatch, server)
    try:
        asyncio.run(_provision(server.url, 1))
        svc = Service(argv=[sys.executable, "-c", STUCK_SCRIPT, server.url])
        try:
            svc.wait_for("stuck.deciding")
        finally:
            # when SIGTERM arrives, then the watchdog ends it (status 0) with one line
            code, took = svc.stop(signal.SIGTERM)
    finally:
        server.stop()
    text = "".join(svc.lines)
    assert code == 0, (code, took, text)  # it ended itself: Service.stop kills nothing
    assert "Traceback" not in text
    assert svc.events()[-1] == "process.stop_forced"
    assert [r["after_s"] for r in svc.records() if r["event"] == "process.stop_forced"] == [4.5]


async def test_a_one_shot_connect_gives_up_with_the_real_cause():
    url = closed_port_url()
    with structlog.testing.capture_logs() as logs:
        with pytest.raises(ConnectionRefusedError):
            await Bus.connect(url, connect_attempts=3)
    assert [x["attempt"] for x in logs if x["event"] == "bus.connect_failed"] == [1, 2]


def test_the_connect_backoff_grows_is_capped_and_jittered():
    wait = connect_backoff()
    for attempt, high in [(1, 0.5), (2, 1.0), (3, 2.0), (4, 4.0), (5, 5.0), (30, 5.0)]:
        delays = [backoff_delay(wait, attempt) for _ in range(200)]
        assert all(0.25 <= d <= high for d in delays), (attempt, min(delays), max(delays))
        assert len(set(delays)) > 100  # jittered: hosts that lost a server do not retry in step


def test_nats_py_log_records_come_out_as_one_structlog_json_line(monkeypatch):
    from nats.aio.client import _default_error_callback

    from gpuledger.services.runtime.logging import configure_logging

    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setenv("GPULEDGER_LOG_JSON", "1")
    root = logging.getLogger()
    before = list(root.handlers), root.level
    configure_logging()
    try:
        # nats-py's own default error callback logs with exc_info (a traceback before)
        try:
            raise ConnectionRefusedError(111, "Connect call failed")
        except ConnectionRefusedError as exc:
            asyncio.run(_default_error_callback(exc))
        logging.getLogger("gpuledger.projector").info("projector: %s events", 3)
        structlog.get_logger("gpuledger.host").info("host.folded", seq=1)
    finally:
        root.handlers[:] = before[0]
        root.setLevel(before[1])
        structlog.reset_defaults()
    lines = err.getvalue().splitlines()
    assert "Traceback" not in err.getvalue()
    records = [json.loads(line) for line in lines]  # every line is one JSON object
    assert len(records) == 3
    nats_rec, projector_rec, host_rec = records
    assert nats_rec["logger"] == "nats.aio.client" and nats_rec["level"] == "error"
    assert nats_rec["event"] == "nats: encountered error"
    assert nats_rec["error"] == "ConnectionRefusedError(111, 'Connect call failed')"
    assert "exception" not in nats_rec and "timestamp" in nats_rec
    assert projector_rec["event"] == "projector: 3 events" and projector_rec["level"] == "info"
    assert host_rec == {**host_rec, "event": "host.folded", "seq": 1, "level": "info"}
