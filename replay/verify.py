"""Decision verification: refold a log and re-decide every recorded decision from its
recorded inputs (the state at `input_seq`, the time it was taken, the producer's epoch).

A decision verifies when the service, given exactly that state and time, emits an identical
event (same id, same fields). Deciders keep no caches that change answers (docs/deciders.md),
so the answer depends on the folded state alone. The first divergence of a mismatch is explained field by
field against the closest event the service would emit instead.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from gpuledger.events import DeadLettered, Decision, Event
from gpuledger.services.domain.fold.ledger import Ledger
from gpuledger.services.roles import CONTROL_PLANE, build


@dataclass
class Mismatch:
    seq: int
    event_type: str
    correlation_id: str
    producer: str
    explanation: str

    def as_dict(self) -> dict[str, Any]:
        return self.__dict__.copy()


@dataclass
class VerifyReport:
    events: int = 0
    checked: int = 0
    skipped: int = 0
    dead_lettered: int = 0
    """Events the fold refused that the log records as `DeadLettered` (not mismatches)."""
    mismatches: list[Mismatch] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.mismatches

    def as_dict(self) -> dict[str, Any]:
        return {
            "events": self.events,
            "checked": self.checked,
            "skipped": self.skipped,
            "dead_lettered": self.dead_lettered,
            "mismatches": [m.as_dict() for m in self.mismatches],
            "ok": self.ok,
        }


def _fields(event: Event) -> dict[str, Any]:
    return msgspec.to_builtins(event)


def explain(recorded: Event, produced: list[Event]) -> str:
    """Why `recorded` is not among `produced`: the first differing fields against the
    closest candidate (same type, same correlation id), or what the service would do instead."""
    same = [
        e
        for e in produced
        if type(e) is type(recorded) and e.correlation_id == recorded.correlation_id
    ]
    if not same:
        kinds = sorted({f"{type(e).__name__}({e.correlation_id})" for e in produced}) or ["nothing"]
        return (
            f"re-deciding from seq {recorded.input_seq} at t={recorded.occurred_at_ms} ms would not emit "
            f"{type(recorded).__name__} for {recorded.correlation_id}; it emits {', '.join(kinds[:5])}"
        )
    want, got = _fields(recorded), _fields(same[0])
    diffs = [k for k in want if want.get(k) != got.get(k)]
    first = diffs[0] if diffs else "?"
    detail = ", ".join(
        f"{k}: recorded {want.get(k)!r} vs re-decided {got.get(k)!r}" for k in diffs[:3]
    )
    return f"first divergence in field {first!r}: {detail}"


def verify(entries: Iterable[tuple[int, str, Event]], check: bool = False) -> VerifyReport:
    """Re-decide every recorded decision. `check`: checking mode, every re-decision is
    digested and re-run without caches (raises `replay.checking.DecideDrift`)."""
    entries = list(entries)
    checking = check
    if checking:
        from gpuledger.replay.checking import checked_decide
    report = VerifyReport(events=len(entries))
    by_input: dict[int, list[tuple[int, Decision]]] = defaultdict(list)
    for seq, _, event in entries:
        if isinstance(event, Decision):
            role = event.producer.split("/", 1)[0]
            if role in CONTROL_PLANE:
                by_input[event.input_seq].append((seq, event))
            else:
                report.skipped += 1  # facts recorded by clients or scenarios, not decisions
    services = {role: build(role) for role in CONTROL_PLANE}
    ledger = Ledger()

    def check_group(at: int) -> None:
        group = by_input.pop(at, None)
        if not group:
            return
        calls: dict[tuple[str, int, int], list[tuple[int, Decision]]] = defaultdict(list)
        for seq, event in group:
            calls[(event.producer, event.occurred_at_ms, event.leader_epoch)].append((seq, event))
        for (producer, now_ms, epoch), recorded in sorted(calls.items()):
            role, _, instance = producer.partition("/")
            service = services[role]
            service.instance, service.leader_epoch = instance or "0", epoch
            produced = (
                checked_decide(service, ledger, now_ms)
                if checking
                else service.decide(ledger, now_ms)
            )
            by_id = {e.event_id: e for e in produced}
            for seq, event in recorded:
                report.checked += 1
                if by_id.get(event.event_id) != event:
                    report.mismatches.append(
                        Mismatch(
                            seq,
                            type(event).__name__,
                            event.correlation_id,
                            producer,
                            explain(event, produced),
                        )
                    )

    dead = {e.stream_seq for _, _, e in entries if isinstance(e, DeadLettered)}
    check_group(0)
    for seq, _, event in entries:
        try:
            ledger.apply(seq, event)
        except Exception as exc:  # noqa: BLE001 - an event the fold refuses is itself a finding
            if seq in dead:  # the services refused it too and recorded why: as it should be
                report.dead_lettered += 1
                continue
            report.mismatches.append(
                Mismatch(
                    seq,
                    type(event).__name__,
                    event.correlation_id,
                    event.producer,
                    f"the event cannot be applied to the state: {exc}",
                )
            )
        check_group(seq)
    for leftover in by_input.values():  # decisions citing an input_seq absent from the log
        for seq, event in leftover:
            report.checked += 1
            report.mismatches.append(
                Mismatch(
                    seq,
                    type(event).__name__,
                    event.correlation_id,
                    event.producer,
                    f"input_seq {event.input_seq} is not in the log",
                )
            )
    return report
