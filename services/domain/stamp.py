"""Building fully enveloped events inside a decider, deterministically."""

from __future__ import annotations

from typing import Any, TypeVar

from events import Decision, Event, derive_event_id

E = TypeVar("E", bound=Event)


def stamp(
    cls: type[E],
    *,
    key: str,
    producer: str,
    now_ms: int,
    correlation_id: str,
    causation_id: str = "",
    input_seq: int = 0,
    config_digest: str = "",
    leader_epoch: int = 0,
    **fields: Any,
) -> E:
    """Create `cls(**fields)` with its envelope: the id derives from the type and `key` (the
    semantic identity of the fact), so re-deciding the same fact yields the same id."""
    envelope: dict[str, Any] = dict(
        event_id=derive_event_id(cls.__name__, key),
        occurred_at_ms=now_ms,
        causation_id=causation_id,
        correlation_id=correlation_id,
        producer=producer,
    )
    if issubclass(cls, Decision):
        envelope.update(input_seq=input_seq, config_digest=config_digest, leader_epoch=leader_epoch)
    return cls(**envelope, **fields)
