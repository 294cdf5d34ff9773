"""How a member's end maps to completed / failed / preempted. Pure.

| how the member ended                     | checkpoint requested | fresh ack | outcome   |
|------------------------------------------|----------------------|-----------|-----------|
| exit 0                                   | no                   | -         | completed |
| exit 0                                   | yes                  | yes       | preempted |
| exit 0                                   | yes                  | no        | completed (it finished before it saw the request) |
| exit 75 (EXIT_CHECKPOINTED)              | yes                  | any       | preempted |
| killed by a signal, or exit 128+n        | yes                  | any       | preempted (work since the last ack is lost) |
| any other non-zero exit                  | yes                  | yes       | preempted (the checkpoint exists) |
| any other non-zero exit                  | yes                  | no        | failed (it crashed while saving) |
| exit 75, a signal, or any non-zero exit  | no                   | any       | failed    |
| unknown (the agent could not see it end) | yes / no             | any       | preempted / failed |

"Fresh ack" means a checkpoint acknowledged after the request was sent; an older periodic
acknowledgement does not turn a normal completion into a preemption.
"""

from __future__ import annotations

from typing import Literal

#: Exit code meaning "I saved a checkpoint and exit because I was asked to" (EX_TEMPFAIL); the
#: job side (`checkpoint.EXIT_CHECKPOINTED`) re-exports it.
EXIT_CHECKPOINTED = 75

Outcome = Literal["completed", "failed", "preempted"]


def classify_exit(
    exit_code: int | None,
    signalled: int | bool | None,
    checkpoint_requested: bool,
    checkpoint_acknowledged: bool,
) -> Outcome:
    """See the module table. ``signalled`` is the terminating signal (or True), else None."""
    killed = bool(signalled) or (exit_code is not None and exit_code > 128)
    if exit_code == 0 and not killed:
        return "preempted" if checkpoint_requested and checkpoint_acknowledged else "completed"
    if not checkpoint_requested:
        return "failed"
    if killed or exit_code in (EXIT_CHECKPOINTED, None) or checkpoint_acknowledged:
        return "preempted"
    return "failed"
