"""The envelope every event carries, and the extra envelope of decisions.

Events are frozen msgspec Structs in one tagged union; the JSON field `type` holds the tag,
which names the event type and its major version (`JobSubmitted.v1`). Field names are
snake_case in every external JSON/YAML document.
"""

from __future__ import annotations

import msgspec


class Event(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="type", forbid_unknown_fields=False
):
    """Base of every event."""

    event_id: str = ""
    """Deterministic id (also the `Nats-Msg-Id`); clients may leave it empty on submissions."""
    occurred_at_ms: int = 0
    """When the fact happened: epoch ms on a live bus, virtual ms in the simulator."""
    causation_id: str = ""
    """Id of the event that caused this one ("" for external inputs)."""
    correlation_id: str = ""
    """The entity the event belongs to: a job id, a node name, or `config`."""
    producer: str = ""
    """Service and instance that produced it (`scheduler/0`, `node-agent/n1`, `cli`)."""


class Decision(Event, frozen=True, kw_only=True):
    """Base of events that record a service's decision; they can be re-decided and verified."""

    input_seq: int = 0
    """Last log sequence folded into the state the decision was taken from."""
    config_digest: str = ""
    """Digest of the configuration in force (tenants, classes, policy)."""
    leader_epoch: int = 0
    """Epoch of the producing service's leadership lease; stale epochs are ignored."""
