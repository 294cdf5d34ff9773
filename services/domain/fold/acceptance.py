"""The one acceptance rule set: which log events are folded, and why the others are not.

Every service folds the log into a `Ledger` (services/domain/fold/ledger.py) and the projector
folds the same log into DuckDB rows; both must agree on which events count, or the
projection shows what the services refused (a placement over busy GPUs as a running job,
FREE -8 on a node). So there is one rule set, and it is the ledger's fold itself:

- an event must travel on the subject its type and ids name (`events.subject_for`): NATS
  permissions confine each role, and each tenant's CI identity, by subject, so a payload
  claiming another tenant, job, node or role than its subject is `WrongSubject` (an id that
  cannot be a subject token is `InvalidId`); checked by the host and the projector, which
  know the subject (`subject_refusal`), before folding;
- a decision or node fact must come from the one role that produces its type
  (`events.subjects.role_of`: admission, quota, scheduler, preemption, node-agent; only the
  role part of `<role>/<instance>` is checked), whatever its subject: a `GangPlaced` from
  `node-agent/n1`, or a `PreemptionRequested` claiming `scheduler/x`, raises `Refused`
  (`WrongProducer`, naming both) and the host dead-letters it. Client and configuration events
  name any producer. A scenario's `NodeLost` and an importer's `NodeRegistered` replay as
  operator inputs, without a leader epoch;
- a decision from a deposed leader (its epoch older than one already seen for the role of its
  type, never the role its producer claims) changes nothing: `StaleLeaderEpoch`;
- an event that contradicts the folded state (a placement over capacity already held, on an
  unknown node, of the wrong shape) raises `Refused` *before* anything is changed; a
  service's host dead-letters it with the reason (`Refused: PlacementConflict: ...`);
- an event that refers to something absent or already settled (an admission of an unknown
  job, a placement of a job that is not pending, a second submission of a job id) changes
  nothing and is reported as a `Refusal` with a stable CamelCase code.

`admit(ledger, seq, event, subject)` folds one event and returns None (accepted: it may change the
state) or the `Refusal` (the ledger is unchanged, apart from `last_seq`). The projector calls
it before mapping an event to rows and maps only accepted events; a refused one is recorded
with its code and message instead. Services call `Ledger.apply`, which folds the same way.
Pure: no I/O, clock or logging.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuledger.events import subject_for
from gpuledger.events.reasons import FoldRefusal
from gpuledger.events.subjects import legacy_subject
from gpuledger.services.domain.fold.refusals import Refusal, Refused

__all__ = ["Refusal", "Refused", "admit", "subject_refusal"]

if TYPE_CHECKING:
    from gpuledger.events import Event
    from gpuledger.services.domain.fold.ledger import Ledger


def subject_refusal(subject: str, event: Event) -> Refusal | None:
    """None if `event` travels on its own subject, else why not."""
    try:
        want = subject_for(event)
    except ValueError as err:  # InvalidId: not even routable
        return Refusal(FoldRefusal.InvalidId, str(err)[:300])
    if subject != want and subject != legacy_subject(event):
        return Refusal(
            FoldRefusal.WrongSubject,
            f"{type(event).__name__} belongs on {want!r}, not {subject[:300]!r}",
        )
    return None


def admit(ledger: Ledger, seq: int, event: Event, subject: str | None = None) -> Refusal | None:
    """Fold `event` (stream sequence `seq`, published on `subject` when known) into `ledger`
    under the acceptance rules.

    Returns None when the event was accepted, else why it was refused (the ledger is left
    as it was). An unexpected error of the fold is a refusal too (the host dead-letters it
    the same way), named after the exception type."""
    if subject is not None and (wrong := subject_refusal(subject, event)) is not None:
        return wrong
    try:
        return ledger.fold(seq, event)
    except Refused as err:
        return err.refusal
    except Exception as err:  # the host dead-letters exactly these; so does the projection
        return Refusal(type(err).__name__, str(err)[:500])
