"""The consumers a reader of the log may hold (issue 44: no key can exhaust the stream's).

Every identity but the operator may create consumers under its own few names only
(services/runtime/auth.py `consumer_names`, listed in its permissions). `ReaderSlots` picks
one for each new ordered consumer: a name nobody holds, or one left behind by a reader that
stopped (no subscriber bound: deleted first), in turn; `ReadersExhausted` when every name is
held by a live reader. The operator's connection names its consumers at random, as every
reader did before.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

import nats.js.errors

MAX_CONSUMERS = 100_000
"""The stream's consumer limit (nats-server's default is 1,000 per stream). Each identity but
the operator holds at most its own `auth.CONSUMER_SLOTS` consumers (its permissions name
them), so the sum stays far below this however large the fleet, and no identity can take
the budget the services' and the projector's consumers need."""


class ReadersExhausted(RuntimeError):
    """Every consumer name this identity may hold is in use by a live reader."""


def reader_name() -> str:
    """A fresh random consumer name (the operator's readers: any name is theirs)."""
    return "r" + secrets.token_hex(11)


class ReaderSlots:
    """The consumer names one connection may create, taken in turn (`take`)."""

    def __init__(self, names: list[str] | None) -> None:
        self.names = names
        """None: any name (the operator, or a connection without a credential)."""
        self._turn = 0

    @classmethod
    def of(cls, nc: Any) -> ReaderSlots:
        """The names of the identity `nc` connected as (from the seed file and the reply
        prefix nats-py keeps: auth.consumer_slots_of)."""
        from gpuledger.services.runtime.auth import consumer_slots_of

        seed = getattr(nc, "_nkeys_seed", None)
        prefix = getattr(nc, "_inbox_prefix", None)
        inbox = bytes(prefix).decode() if prefix else None
        return cls(consumer_slots_of({"nkeys_seed": seed, "inbox_prefix": inbox}))

    async def take(self, js: Any, stream: str) -> str:
        """A name for a new consumer on `stream`: one no live reader holds (absent, or
        without a bound subscriber: deleted first, durable or not). Raises ReadersExhausted
        when every name is held by a live reader."""
        names = self.names
        if not names:
            return reader_name()
        for _ in range(len(names)):
            name = names[self._turn % len(names)]
            self._turn += 1  # claimed before any await: concurrent readers differ
            try:
                info = await js.consumer_info(stream, name)
            except nats.js.errors.NotFoundError:
                return name
            if not info.push_bound:  # no reader on it: a stopped reader's, or a durable
                with contextlib.suppress(nats.js.errors.NotFoundError):
                    await js.delete_consumer(stream, name)
                return name
        raise ReadersExhausted(
            f"all {len(names)} consumers this identity may hold on {stream} are in use by "
            "live readers: stop one (each identity may hold only its own few)"
        )


def rename_on_reset(sub: Any, namer: Callable[[], Awaitable[str]]) -> None:
    """nats-py recreates an ordered consumer (after missed heartbeats or a delivery gap) with
    the request it first sent: with a name, that is an update of the consumer it just left
    (refused: its start cannot change), so each recreation gets another name (`namer`)."""
    jsi = getattr(getattr(sub, "_sub", None), "_jsi", None)  # nats-py keeps it on the inner one
    recreate = getattr(jsi, "recreate_consumer", None)
    if recreate is None or getattr(jsi, "_ccreq", None) is None:
        return

    async def recreate_renamed() -> None:
        jsi._ccreq.name = await namer()
        await recreate()

    jsi.recreate_consumer = recreate_renamed
