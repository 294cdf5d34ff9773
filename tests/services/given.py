"""Given/when/then helpers: build a ledger from events, run one decider, inspect its output."""

from __future__ import annotations

import msgspec

from gpuledger import events as ev
from gpuledger.services.domain.fold.ledger import Ledger
from gpuledger.services.domain.inputs.configfile import config_events, node_infos
from gpuledger.services.domain.inputs.jobfile import job_spec
from gpuledger.services.domain.tooling.stamp import submission


def cluster(*nodes: dict, tenants=(), classes=(), policy=None) -> list[ev.Event]:
    doc = {
        "cluster": {"nodes": list(nodes)},
        "tenants": list(tenants),
        "priority_classes": list(classes),
    }
    if policy is not None:
        doc["policy"] = policy
    out = config_events(doc)
    out += [
        ev.NodeRegistered(
            node=n, simulated=True, event_id=f"reg-{n.name}", producer="node-agent/sim"
        )
        for n in node_infos(doc)
    ]
    return out


def submitted(at_ms: int = 0, **job) -> ev.JobSubmitted:
    spec = job_spec(job)
    return submission(spec, now_ms=at_ms, producer="test")


def submitted_json(at_ms: int = 0, **spec) -> ev.JobSubmitted:
    """A submission in the CI JSON shape (`JobSpec` fields), bypassing the job-file schema:
    what `nats pub gl.submit...` can publish, so admission must still judge it."""
    return submission(msgspec.convert(spec, ev.JobSpec), now_ms=at_ms, producer="test")


def given(*events: ev.Event) -> Ledger:
    ledger = Ledger()
    for seq, e in enumerate(events, 1):
        ledger.apply(seq, e)
    return ledger


def fold(ledger: Ledger, new: list[ev.Event]) -> Ledger:
    for e in new:
        ledger.apply(ledger.last_seq + 1, e)
    return ledger


def of_type(events: list[ev.Event], cls):
    return [e for e in events if isinstance(e, cls)]


def stamped(cls, key: str, at: int = 0, **fields) -> ev.Event:
    """An enveloped event at `at` ms with a deterministic id from `key`, produced by a test
    instance of the role that produces `cls` (`test` where any producer may)."""
    from gpuledger.events.subjects import role_of
    from gpuledger.services.domain.tooling.stamp import stamp

    role = role_of(cls)
    producer = f"{role}/test" if role else "test"
    return stamp(cls, key=key, producer=producer, now_ms=at, correlation_id=key, **fields)


def started(job_id: str, at: int = 0, node: str = "n1", key: str = "s") -> ev.Event:
    """The one member (rank 0) of `job_id`'s first allocation started on `node` at `at` ms."""
    alloc = f"{job_id}#1"
    return stamped(ev.MemberStarted, key, at, job_id=job_id, allocation_id=alloc, rank=0, node=node)


def exited(
    job_id: str, at: int, outcome: str = "completed", node: str = "n1", key: str = "x"
) -> ev.Event:
    """The one member (rank 0) of `job_id`'s first allocation exited with `outcome` at `at` ms."""
    alloc = f"{job_id}#1"
    fields = {"job_id": job_id, "allocation_id": alloc, "rank": 0, "node": node}
    return stamped(ev.MemberExited, key, at, outcome=outcome, **fields)


def exit_all(
    ledger: Ledger, job_id: str, outcome: str, at: int, key: str = "exit-{allocation_id}-{rank}"
) -> Ledger:
    """Every member of `job_id`'s current allocation exits with `outcome` at `at` ms (event
    keys from `key`, formatted with job_id, allocation_id and rank)."""
    rec = ledger.allocations[ledger.jobs[job_id].allocation_id]
    alloc = rec.allocation_id
    return fold(
        ledger,
        [
            stamped(
                ev.MemberExited,
                key.format(job_id=job_id, allocation_id=alloc, rank=m.rank),
                at,
                job_id=job_id,
                allocation_id=alloc,
                rank=m.rank,
                node=m.node,
                outcome=outcome,
            )
            for m in rec.members
        ],
    )


def produced(event: ev.Event, instance: str = "0") -> ev.Event:
    """`event` as the role that produces its type publishes it (`<role>/<instance>`), where it
    names no producer yet; client and configuration events are left as they are."""
    from gpuledger.events.subjects import role_of

    role = role_of(type(event))
    if role is None or event.producer:
        return event
    return msgspec.structs.replace(event, producer=f"{role}/{instance}")
