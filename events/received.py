"""The time of an external input: the stream's receive time when the client's is missing or
implausible.

Clients (CI, `nats pub`, operators) stamp `occurred_at_ms` with their own clock, or leave it
out (0 = 1970). Every reader of the live stream passes each message's JetStream timestamp
(stored with the message, the same on every read and every replica) through `at_receipt`
before folding it, so the ledger, the projection and exports agree on one effective time,
and a refold or replay of the same stream gives the same result.
"""

from __future__ import annotations

import msgspec

from gpuledger.events.catalog import CLIENT_EVENTS, CONFIG_EVENTS
from gpuledger.events.envelope import Event

MAX_CLIENT_SKEW_MS = 5 * 60 * 1000
"""A client time further than this from the stream's receive time is replaced by it."""

_EXTERNAL = frozenset(CLIENT_EVENTS + CONFIG_EVENTS)


def at_receipt(event: Event, received_ms: int) -> Event:
    """`event` with its effective time: an external input (submission, cancel,
    configuration) whose `occurred_at_ms` is missing (<= 0) or more than
    `MAX_CLIENT_SKEW_MS` from `received_ms` gets `received_ms`; anything else, and any event
    read without a receive time (`received_ms <= 0`: files, the simulator), is returned
    unchanged. Services' own events keep their time (their clocks are the cluster's)."""
    if received_ms <= 0 or type(event) not in _EXTERNAL:
        return event
    if event.occurred_at_ms > 0 and abs(event.occurred_at_ms - received_ms) <= MAX_CLIENT_SKEW_MS:
        return event
    return msgspec.structs.replace(event, occurred_at_ms=received_ms)
