"""A full JetStream store: how its write errors are recognised, and how `gpuledger up` watches
its store (a probe write once a second) and gets the embedded server out of a latched write
error once space is back.

NATS answers a write it cannot store in one of two ways:
- a limit it enforces (the server's `max_file_store`, an account's storage limit, a stream's
  `max_bytes` with `discard: new`): the publish is answered at once with a JetStream error,
  `insufficient resources` (10023) or a store failure (10077, e.g. `maximum bytes exceeded`);
  the same write succeeds as soon as the store is below its limit again;
- the disk itself is full (`no space left on device`): the stream's file store *latches* its
  write error (`Critical write error` in the server's log); publishes are no longer answered
  (they time out) even after space is freed, until the server is restarted.

`store_write_error` classifies an exception as one of these (one line, or None). `StoreWatch`
is `up`'s probe: it writes one tiny message to its own probe stream (`PROBE_STREAM`, one
message kept) and reports `ok` or `full` with the reason; with the embedded server it also reads
the server's log (a latched write error makes the store `full` although a small write to
another stream may still fit); and it restarts
the server in place (same port, store and identities; the services reconnect by themselves)
when the log shows a latched write error and the store's file system has `ROOM_BYTES` free
again. An external server (`--nats-url`) is probed the same way, its log and disk unseen: a
refused write is `full` and clears by itself once space is back; writes left unacknowledged
`UNACKED_PROBES` times in a row are a latched store, `full` with a one-line `action` (restart
that server once its disk has room), since `up` restarts only the server it started. Each probe
also writes one key of the lease bucket (`LEASE_PROBE_KEY`): a small stream's write may still
fit in a block it already holds while the leases' stream has latched, and a latched lease
bucket keeps every role standby. Nothing is lost: a write NATS did not acknowledge was not
stored, and every writer retries (services re-decide from their fold, clients get an error and
an exit code).
"""

from __future__ import annotations

import asyncio
import shutil
import time
from typing import Any

from gpuledger.services.runtime.auth import LEASE_BUCKET

INSUFFICIENT_RESOURCES = 10023
STORE_FAILED = 10077
_FULL_TEXTS = (
    "insufficient resources",
    "no space left",
    "resource limits exceeded",
    "maximum bytes exceeded",
    "critical write error",
    "write error",
)
PROBE_STREAM = "GPULEDGER_PROBE"
PROBE_SUBJECT = "glprobe.up"
ROOM_BYTES = 32 * 1024 * 1024
"""Free space on the store's file system after which a latched write error is cleared by a
restart of the embedded server."""
RESTART_EVERY_S = 10.0
"""At most one in-place restart of the embedded server per this many seconds."""
PROBE_TIMEOUT_S = 2.0
LEASE_PROBE_KEY = "store-probe"
"""The lease bucket's key `up`'s probe writes (no service's name: no lease reads it)."""
UNACKED_PROBES = 5
"""Probes in a row whose write NATS did not acknowledge after which an external server's store
is taken to have latched a write error (a slow server answers within `PROBE_TIMEOUT_S`, and a
NATS cluster elects a new stream leader within a few seconds)."""
RESUMES = "writes are refused until space is freed, then everything resumes by itself"
"""What happens next while the store is full and `up` can recover it (`StoreWatch.action`)."""


def store_write_error(err: BaseException) -> str | None:
    """One line saying why the store refused a write, or None when `err` is something else
    (a permission denial, a lost connection, a bad request)."""
    code = getattr(err, "err_code", None)
    text = " ".join(str(getattr(err, "description", None) or err).split()).lower()
    if code in (INSUFFICIENT_RESOURCES, STORE_FAILED) or any(t in text for t in _FULL_TEXTS):
        what = text or type(err).__name__
        return f"the event store is full (NATS: {what}{f', {code}' if code else ''})"
    return None


def latched_write_error(log_text: str) -> str | None:
    """The last line of a nats-server log that says its store latched a write error (the disk
    was full), or None."""
    for line in reversed(log_text.splitlines()):
        low = line.lower()
        if "critical write error" in low or "no space left on device" in low:
            return line.split("] ", 2)[-1].strip()[:300]
    return None


def has_room(path: Any, need: int | None = None) -> bool:
    """Whether the file system holding `path` has `need` bytes free (`ROOM_BYTES`)."""
    try:
        return shutil.disk_usage(path).free >= (ROOM_BYTES if need is None else need)
    except OSError:
        return False


class StoreWatch:
    """`up`'s view of the store: `state` (`ok`, `full`, `unknown` before the first probe or
    when this identity may not probe), `error` (the reason while full), `since_ms`,
    `write_errors` (failed probes) and `restarts` (in-place restarts of the embedded server)."""

    def __init__(self, server: Any = None, url: str | None = None) -> None:
        self.server = server
        """An EmbeddedNats `up` started (None: an external NATS, never restarted by `up`)."""
        self.url = url
        """The server's URL, named by the instruction to restart an external server."""
        self.state = "unknown"
        self.error: str | None = None
        self.action = RESUMES
        """While full: what happens next, or what the operator must do (one line)."""
        self._unacked = 0
        self.since_ms: int | None = None
        self.write_errors = 0
        self.restarts = 0
        self._probe_ready = False
        self._disabled = False
        self._last_restart = 0.0

    def document(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "error": self.error,
            "action": self.action if self.state == "full" else None,
            "since_ms": self.since_ms,
            "write_errors": self.write_errors,
            "restarts": self.restarts,
        }

    def _full(self, why: str, action: str = RESUMES) -> None:
        if self.state != "full":
            self.since_ms = time.time_ns() // 1_000_000
        self.state, self.error, self.action = "full", why, action
        self.write_errors += 1

    def _unacknowledged(self, err: BaseException) -> None:
        """A probe write timed out: a latched store once `UNACKED_PROBES` in a row did (an
        external server: only its operator can restart it), else full stays full."""
        self._unacked += 1
        if self.server is None and self._unacked >= UNACKED_PROBES:
            where = f"nats-server at {self.url}" if self.url else "the nats-server"
            self._full(
                f"the event store acknowledged none of the last {self._unacked} probe writes "
                f"({err or 'timeout'}; NATS stops writing a stream whose disk filled up)",
                f"once the disk of {where} has room, restart that server (its store is kept; "
                "services reconnect by themselves): `gpuledger up` restarts only a server it started",
            )
        elif self.state == "full":
            self._full(self.error or f"the store did not acknowledge a write ({err})", self.action)

    async def probe(self, bus: Any) -> str:
        """Write one probe message; returns the state."""
        import nats.errors
        import nats.js.errors

        latched = self._latched()
        if latched is not None:  # the streams that latched it answer no write: full until restarted
            self._full(f"the event store cannot write (NATS: {latched})")
            return self.state
        if self._disabled:
            return self.state
        try:
            if not self._probe_ready:
                await self._ensure_probe_stream(bus)
            await bus.js.publish(PROBE_SUBJECT, b"1", timeout=PROBE_TIMEOUT_S)
            await self._probe_leases(bus)
        except nats.errors.NoRespondersError:
            self._probe_ready = False  # the probe stream is gone: made again next time
            return self.state
        except (nats.errors.TimeoutError, TimeoutError) as err:
            self._unacknowledged(err)
            return self.state
        except nats.js.errors.Error as err:
            self._unacked = 0  # an answer: the server is writing, or refusing
            why = store_write_error(err)
            if why is not None:
                self._full(why)
            elif getattr(err, "code", None) in (401, 403) or "permission" in str(err).lower():
                self._disabled = True  # this identity may not make the probe stream
            return self.state
        except nats.errors.Error as err:
            if "permission" in str(err).lower():
                self._disabled = True
            return self.state
        self.state, self.error, self.since_ms = "ok", None, None
        self.action, self._unacked = RESUMES, 0
        return self.state

    @staticmethod
    async def _probe_leases(bus: Any) -> None:
        """One write to the lease bucket's stream (none while the bucket does not exist)."""
        import nats.errors

        try:
            await bus.js.publish(
                f"$KV.{LEASE_BUCKET}.{LEASE_PROBE_KEY}", b"1", timeout=PROBE_TIMEOUT_S
            )
        except nats.errors.NoRespondersError:
            return

    async def _ensure_probe_stream(self, bus: Any) -> None:
        from nats.js import api

        await bus.js.add_stream(
            api.StreamConfig(
                name=PROBE_STREAM,
                subjects=[PROBE_SUBJECT],
                storage=api.StorageType.FILE,
                retention=api.RetentionPolicy.LIMITS,
                max_msgs_per_subject=1,
                discard=api.DiscardPolicy.OLD,
            )
        )
        self._probe_ready = True

    def _latched(self) -> str | None:
        tail = getattr(self.server, "log_text", None)
        return None if tail is None else latched_write_error(tail())

    async def recover(self) -> bool:
        """Restart the embedded server in place when its store latched a write error and the
        disk has room again (at most once per `RESTART_EVERY_S`); True if it did."""
        if self.server is None or self._latched() is None:
            return False
        if time.monotonic() - self._last_restart < RESTART_EVERY_S:
            return False
        if not has_room(self.server.store_dir):
            return False
        self._last_restart = time.monotonic()
        await asyncio.to_thread(self.server.restart)
        self.restarts += 1
        self._probe_ready = False
        return True
