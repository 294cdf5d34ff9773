"""Recognising a full store (services/runtime/storefull.py): the write errors NATS answers,
the latched write error a full disk leaves in the server's log, and `up`'s in-place restart of
the embedded server only once the disk has room again."""

from __future__ import annotations

import asyncio
import errno
from pathlib import Path

import nats.errors
import nats.js.errors

from gpuledger.services.runtime import status_file as sf
from gpuledger.services.runtime import storefull
from gpuledger.services.runtime.status_file import write_json_keeping
from gpuledger.services.runtime.storefull import StoreWatch, latched_write_error, store_write_error

LATCHED_LOG = (
    "[1] 2026/11/27 14:05:05.616773 [INF] Server is ready\n"
    "[1] 2026/11/27 14:05:06.783430 [ERR] Filestore [A] Critical write error: write "
    "/s/jetstream/$G/streams/A/msgs/1.blk: no space left on device\n"
)


def test_a_refused_write_is_a_store_write_error_and_other_errors_are_not():
    full = nats.js.errors.ServiceUnavailableError(
        code=503, err_code=10023, description="insufficient resources"
    )
    assert store_write_error(full) == (
        "the event store is full (NATS: insufficient resources, 10023)"
    )
    capped = nats.js.errors.APIError(code=500, err_code=10077, description="maximum bytes exceeded")
    assert store_write_error(capped).startswith("the event store is full")
    assert store_write_error(nats.js.errors.NotFoundError()) is None
    assert store_write_error(nats.errors.TimeoutError()) is None
    assert store_write_error(PermissionError("Permissions Violation")) is None


def test_a_latched_write_error_is_found_in_the_server_log():
    assert latched_write_error("[1] [INF] Server is ready\n") is None
    line = latched_write_error(LATCHED_LOG)
    assert line.startswith("Filestore [A] Critical write error") and "no space left" in line


class FakeServer:
    def __init__(self, store: Path, log: str) -> None:
        self.store_dir, self.log, self.restarted = store, log, 0

    def log_text(self) -> str:
        return self.log

    def restart(self) -> None:
        self.restarted += 1
        self.log = "[1] [INF] Server is ready\n"  # a restarted server's log starts afresh


def test_the_embedded_server_is_restarted_only_when_latched_and_the_disk_has_room(
    tmp_path, monkeypatch
):
    server = FakeServer(tmp_path, LATCHED_LOG)
    watch = StoreWatch(server)
    # the latch makes the store full whatever a probe write would say
    assert asyncio.run(watch.probe(bus=None)) == "full"
    assert "Critical write error" in watch.error and watch.since_ms is not None
    # no room yet: no restart
    monkeypatch.setattr(storefull, "ROOM_BYTES", 1 << 62)
    assert asyncio.run(watch.recover()) is False and server.restarted == 0
    # room again: one restart clears the latch
    monkeypatch.setattr(storefull, "ROOM_BYTES", 1)
    assert asyncio.run(watch.recover()) is True and server.restarted == 1
    assert watch.restarts == 1
    assert asyncio.run(watch.recover()) is False  # nothing latched any more
    # an external server (none given) is never restarted
    assert asyncio.run(StoreWatch(None).recover()) is False


def test_a_status_file_is_rewritten_in_place_when_no_new_file_fits(tmp_path, monkeypatch):
    path = tmp_path / "status.json"
    write_json_keeping(path, {"a": 1, "pad": "x" * 100})

    def no_space(*_a, **_k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(sf, "write_json_atomic", no_space)
    write_json_keeping(path, {"a": 2})
    assert sf.read_json(path) == {"a": 2}
    assert [p.name for p in tmp_path.iterdir()] == ["status.json"]


class UnansweredJs:
    """A JetStream context whose writes go unanswered (`timeouts` > 0) or are acknowledged."""

    def __init__(self) -> None:
        self.timeouts, self.subjects = 0, []

    async def add_stream(self, _config) -> None:
        return None

    async def publish(self, subject: str, _data: bytes, timeout: float) -> None:
        self.subjects.append(subject)
        if self.timeouts:
            raise nats.errors.TimeoutError


class OneBus:
    def __init__(self) -> None:
        self.js = UnansweredJs()


def test_an_external_store_that_stops_acknowledging_is_full_with_the_restart_instruction():
    # given a watch on an external server (none `up` started), its writes acknowledged
    watch, bus = StoreWatch(None, url="nats://db-1:4222"), OneBus()
    assert asyncio.run(watch.probe(bus)) == "ok"
    # each probe writes the probe stream and the lease bucket (whose stream latches on its own)
    assert bus.js.subjects == [storefull.PROBE_SUBJECT, "$KV.gpuledger-leases.store-probe"]
    # when: writes go unanswered, then full only after UNACKED_PROBES in a row
    bus.js.timeouts = 1
    for _ in range(storefull.UNACKED_PROBES - 1):
        assert asyncio.run(watch.probe(bus)) == "ok"
    assert asyncio.run(watch.probe(bus)) == "full"
    doc = watch.document()
    assert doc["error"].startswith(
        f"the event store acknowledged none of the last {storefull.UNACKED_PROBES} probe writes"
    )
    assert doc["action"] == (
        "once the disk of nats-server at nats://db-1:4222 has room, restart that server (its "
        "store is kept; services reconnect by themselves): `gpuledger up` restarts only a "
        "server it started"
    )
    # when: the operator restarted it, then the next acknowledged write clears it
    bus.js.timeouts = 0
    assert asyncio.run(watch.probe(bus)) == "ok" and watch.document()["action"] is None


def test_a_refused_write_resumes_by_itself_and_says_so():
    # given any server whose store refuses a write as full
    class Refusing(UnansweredJs):
        async def publish(self, subject: str, _data: bytes, timeout: float) -> None:
            raise nats.js.errors.ServiceUnavailableError(
                code=503, err_code=10023, description="insufficient resources"
            )

    bus = OneBus()
    bus.js = Refusing()
    watch = StoreWatch(None, url="nats://db-1:4222")
    assert asyncio.run(watch.probe(bus)) == "full"
    assert watch.document()["action"] == storefull.RESUMES
