"""Every projected table is exactly what the projector wrote before it was made faster.

`golden_tables.json` holds, per log and per table, a digest of the table's rows (in a canonical
order) as the projector of commit 02fe664 (before issue 15's projector work) wrote them. The
logs: the hand-built scenario, the projector benchmark's synthetic log, and that log with
refusals mixed in (a placement over busy GPUs, a stale leader epoch, a wrong subject, a wrong
producer, duplicates), so that acceptance is pinned too.

Regenerate (only for a deliberate change of what is projected, said in the commit):
`python -m tests.projections.test_golden_tables > tests/projections/golden_tables.json`.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from pathlib import Path

import msgspec

from gpuledger import events as ev
from gpuledger.projections.mappers import ALL_TABLES
from gpuledger.replay.bench.projector import synthetic_log
from tests.replay.simlog import rebuilt

GOLDEN = Path(__file__).with_name("golden_tables.json")


def _with_refusals(n: int) -> list[tuple[int, str, ev.Event]]:
    """The synthetic log with events the acceptance rules refuse, renumbered."""
    base = [e for _, _, e in synthetic_log(n)]
    out: list[ev.Event] = []
    subjects: dict[int, str] = {}
    last_placed: ev.GangPlaced | None = None
    for i, e in enumerate(base):
        out.append(e)
        if isinstance(e, ev.GangPlaced):
            last_placed = e
        if isinstance(e, ev.JobAdmitted) and last_placed is not None and i % 2 == 0:
            # a pending job placed on the GPUs the latest placement holds: PlacementConflict
            out.append(
                msgspec.structs.replace(
                    last_placed, job_id=e.job_id, allocation_id=e.job_id + "#c", tenant=e.tenant
                )
            )
        if isinstance(e, ev.GangPlaced) and i % 3 == 0:  # the same GPUs again: PlacementConflict
            out.append(msgspec.structs.replace(e, allocation_id=e.allocation_id + "x"))
        if isinstance(e, ev.JobAdmitted) and i % 5 == 0:  # a deposed leader's decision
            out.append(msgspec.structs.replace(e, leader_epoch=7))
            out.append(msgspec.structs.replace(e, leader_epoch=3, event_id=e.event_id + "s"))
        if isinstance(e, ev.MemberStarted) and i % 7 == 0:  # the wrong producer
            out.append(msgspec.structs.replace(e, producer="scheduler/0"))
        if isinstance(e, ev.NodeHeartbeat) and i % 4 == 0:  # published on another subject
            subjects[len(out)] = "gl.node.elsewhere.NodeHeartbeat"
            out.append(e)
        if isinstance(e, ev.JobSubmitted) and i % 6 == 0:  # a retry, and a conflicting one
            out.append(e)
            job = msgspec.structs.replace(e.job, duration_s=7)
            out.append(msgspec.structs.replace(e, job=job))
    return [(k + 1, subjects.get(k) or ev.subject_for(e), e) for k, e in enumerate(out)]


def logs() -> dict[str, list[tuple[int, str, ev.Event]]]:
    from tests.projections import scenario

    return {
        "scenario": scenario.build(),
        "synthetic": list(synthetic_log(6000)),
        "refusals": _with_refusals(4000),
    }


def digests(messages: list[tuple[int, str, ev.Event]]) -> dict[str, str]:
    """Per table: row count and SHA-256 of its rows in a canonical order."""
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "p.duckdb"
        with rebuilt(messages, db, batch_size=997) as con:
            out = {}
            for t in ALL_TABLES:
                rows = con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall()
                out[t] = f"{len(rows)}:{hashlib.sha256(repr(rows).encode()).hexdigest()[:24]}"
            return out


def test_every_table_is_what_the_projector_wrote_before() -> None:
    golden = json.loads(GOLDEN.read_text())
    for name, messages in logs().items():
        assert digests(messages) == golden[name], name


if __name__ == "__main__":
    print(json.dumps({name: digests(m) for name, m in logs().items()}, indent=1, sort_keys=True))
