"""Building fully enveloped events inside a decider, deterministically."""

from __future__ import annotations

import hashlib
from typing import Any, TypeVar

from gpuledger.events import Decision, Event, JobSpec, JobSubmitted, derive_event_id, encode

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
    return enveloped(
        cls,
        key,
        producer,
        now_ms,
        correlation_id,
        causation_id,
        input_seq,
        config_digest,
        leader_epoch,
        fields,
    )


def enveloped(
    cls: type[E],
    key: str,
    producer: str,
    now_ms: int,
    correlation_id: str,
    causation_id: str,
    input_seq: int,
    config_digest: str,
    leader_epoch: int,
    fields: dict[str, Any],
) -> E:
    """`stamp` with the envelope given positionally and the fields as one mapping (the
    deciders' `emit` path: one keyword mapping per event instead of one per call layer). The
    decision envelope (input sequence, configuration digest, leader epoch) is kept for
    `Decision` types only."""
    if issubclass(cls, Decision):
        return cls(
            event_id=derive_event_id(cls.__name__, key),
            occurred_at_ms=now_ms,
            causation_id=causation_id,
            correlation_id=correlation_id,
            producer=producer,
            input_seq=input_seq,
            config_digest=config_digest,
            leader_epoch=leader_epoch,
            **fields,
        )
    return cls(
        event_id=derive_event_id(cls.__name__, key),
        occurred_at_ms=now_ms,
        causation_id=causation_id,
        correlation_id=correlation_id,
        producer=producer,
        **fields,
    )


def submission(spec: JobSpec, *, now_ms: int, producer: str) -> JobSubmitted:
    """A `JobSubmitted` whose id derives from the job id AND its content: a retry of the same
    submission deduplicates, a different job under a reused id does not pass as a retry."""
    digest = hashlib.blake2b(encode(spec), digest_size=8).hexdigest()
    return stamp(
        JobSubmitted,
        key=f"{spec.job_id}:{digest}",
        producer=producer,
        now_ms=now_ms,
        correlation_id=spec.job_id,
        job=spec,
    )
