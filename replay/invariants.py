"""Whole-system invariants over a recorded log, for the chaos soak (`gpuledger chaos`) and
anything else that wants to know whether a run stayed safe.

Pure: `check_log(entries, acked)` reads `(seq, subject, event)` entries and the submissions a
client was acknowledged for, and returns one `Finding` per invariant. No I/O, no clock.

What "took effect" means: an event the project's own acceptance rules fold
(`services.domain.fold.acceptance`, through `Ledger.fold`). An event the fold refuses without
changing anything (a stale leader's decision, a placement of a job that is not pending) did not
happen. An event the fold *raises* on (a placement over GPUs already held, a decision from the
wrong role) is one the services must dead-letter; it did not happen only if the log records
that refusal (`DeadLettered` for its sequence). A conflicting placement with no such record
counts as held: nothing in the log says the system refused it.

The allocation bookkeeping is this module's own (a GPU index per node, milli shares, MIG
memory-slice ranges), independent of the placement code it checks:

- `no_lost_job`: every acknowledged submission is in the log at the acknowledged sequence as
  the job's first submission, and admission decided it (the job is not left `submitted`).
- `no_double_allocation`: at no point in the log does a GPU (or a MIG memory slice, or more
  than 1000 milli of a shared GPU) belong to two live allocations, or a whole GPU to one
  allocation while a share or slice of it belongs to another.
- `no_partial_gang`: every placement holds at least the gang's required members (`min_members`,
  else `replicas`), no more than `replicas`, each rank once, each member with its full shape; no
  member starts outside a live allocation of its gang. An elastic gang's `GangResized` is
  checked the same way (its allocation holds the resized members from then on).
- `running_members_placed`: every member that starts does so on the node its placement names for
  its rank; at the end every running or preempting job has a live allocation.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from gpuledger import events as ev
from gpuledger.events.reasons import JobState
from gpuledger.services.domain.fold.ledger import Ledger
from gpuledger.services.domain.fold.refusals import Refused
from gpuledger.services.placement.mig import MEMORY_SLICES, profile_for

INVARIANTS = ("no_lost_job", "no_double_allocation", "no_partial_gang", "running_members_placed")
MAX_EXAMPLES = 5


@dataclass
class Finding:
    """One invariant's result: `ok`, how many things were checked, and up to MAX_EXAMPLES
    violations in words."""

    name: str
    checked: int = 0
    violations: list[str] = field(default_factory=list)
    count: int = 0

    @property
    def ok(self) -> bool:
        return self.count == 0

    def fail(self, text: str) -> None:
        self.count += 1
        if len(self.violations) < MAX_EXAMPLES:
            self.violations.append(text)

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "checked": self.checked,
            "violations": self.count,
            "examples": list(self.violations),
        }


@dataclass
class _Alloc:
    job_id: str
    members: tuple[ev.MemberPlacement, ...]
    units: list[tuple[str, int, str, int]]
    """(node, gpu, kind, amount): kind `whole` (amount 1), `milli` (amount milli) or `mig`
    (amount: memory-slice bitmask)."""


@dataclass
class _Gpu:
    """Who holds one GPU: at most one `whole` holder, milli shares, MIG slice masks."""

    whole: str | None = None
    milli: dict[str, int] = field(default_factory=dict)
    mig: dict[str, int] = field(default_factory=dict)

    def holders(self) -> set[str]:
        return ({self.whole} if self.whole else set()) | set(self.milli) | set(self.mig)


class _Checker:
    def __init__(self, acked: dict[str, int]) -> None:
        self.acked = acked
        self.ledger = Ledger()
        self.dead: set[int] = set()
        self.models: dict[tuple[str, int], str] = {}
        self.gpus: dict[tuple[str, int], _Gpu] = {}
        self.live: dict[str, _Alloc] = {}
        self.ended: set[str] = set()
        self.first_submit: dict[str, int] = {}
        self.decided: set[str] = set()
        self.lost = Finding("no_lost_job")
        self.double = Finding("no_double_allocation")
        self.partial = Finding("no_partial_gang")
        self.placed = Finding("running_members_placed")

    # ------------------------------------------------------------------ folding

    def took_effect(self, seq: int, event: ev.Event) -> bool:
        """Fold `event`; True when it changed the system (see the module doc)."""
        try:
            refusal = self.ledger.fold(seq, event)
        except Refused:
            return seq not in self.dead  # refused on the record, or it stands
        except Exception:  # noqa: BLE001 - an unexpected fold error is dead-lettered like Refused
            return seq not in self.dead
        return refusal is None

    def run(self, entries: list[tuple[int, str, ev.Event]]) -> list[Finding]:
        self.dead = {e.stream_seq for _, _, e in entries if isinstance(e, ev.DeadLettered)}
        for seq, _subject, event in entries:
            spec = None
            if isinstance(event, ev.GangPlaced):
                job = self.ledger.jobs.get(event.job_id)
                spec = None if job is None else job.spec
            if isinstance(event, ev.JobSubmitted):
                self.first_submit.setdefault(event.job.job_id, seq)
            if not self.took_effect(seq, event):
                continue
            if isinstance(event, ev.NodeRegistered):
                for g in event.node.gpus:
                    self.models[(event.node.name, g.index)] = g.model
            elif isinstance(event, ev.GangPlaced):
                self.place(seq, event, spec)
            elif isinstance(event, (ev.GangEvicted, ev.GangCompleted, ev.GangFailed)):
                self.release(event.allocation_id)
            elif isinstance(event, ev.GangResized):
                self.resize(seq, event)
            elif isinstance(event, ev.MemberStarted):
                self.started(seq, event)
            elif isinstance(event, (ev.JobAdmitted, ev.JobRejected)):
                self.decided.add(event.job_id)
        self.finish()
        return [self.lost, self.double, self.partial, self.placed]

    # ------------------------------------------------------------------ allocations

    def units(self, seq: int, e: ev.GangPlaced) -> list[tuple[str, int, str, int]]:
        out = []
        for m in e.members:
            for g in m.gpus:
                if m.mig_profile is not None:
                    model = self.models.get((m.node, g), "")
                    prof = profile_for(model, m.mig_profile)
                    start = m.mig_start if m.mig_start is not None else 0
                    if prof is None or start + prof.memory_slices > MEMORY_SLICES:
                        self.double.fail(
                            f"seq {seq}: {e.allocation_id} member {m.rank} holds MIG "
                            f"{m.mig_profile}@{start} that GPU {m.node}/{g} ({model or '?'}) cannot hold"
                        )
                        continue
                    out.append((m.node, g, "mig", ((1 << prof.memory_slices) - 1) << start))
                elif m.gpu_milli:
                    out.append((m.node, g, "milli", m.gpu_milli))
                else:
                    out.append((m.node, g, "whole", 1))
        return out

    def place(self, seq: int, e: ev.GangPlaced, spec: ev.JobSpec | None) -> None:
        self.partial.checked += 1
        self.double.checked += 1
        if e.allocation_id in self.live or e.allocation_id in self.ended:
            self.double.fail(f"seq {seq}: allocation {e.allocation_id} placed a second time")
            return
        if spec is not None:
            self.gang_shape(seq, e, spec)
        alloc = _Alloc(e.job_id, e.members, self.units(seq, e))
        for node, g, kind, amount in alloc.units:
            gpu = self.gpus.setdefault((node, g), _Gpu())
            others = gpu.holders() - {e.allocation_id}
            clash = None
            if kind == "whole":
                if gpu.whole == e.allocation_id or others:
                    clash = "whole GPU already held"
                gpu.whole = e.allocation_id
            elif kind == "milli":
                if gpu.whole is not None or gpu.mig:
                    clash = "a share of a GPU held whole or by MIG instances"
                gpu.milli[e.allocation_id] = gpu.milli.get(e.allocation_id, 0) + amount
                if sum(gpu.milli.values()) > 1000:
                    clash = f"shares add up to {sum(gpu.milli.values())} milli"
            else:
                held = 0
                for mask in gpu.mig.values():
                    held |= mask
                if gpu.whole is not None or gpu.milli or held & amount:
                    clash = "MIG memory slices already held"
                gpu.mig[e.allocation_id] = gpu.mig.get(e.allocation_id, 0) | amount
            if clash is not None:
                holders = ", ".join(sorted(gpu.holders()))
                self.double.fail(
                    f"seq {seq}: GPU {node}/{g} in two allocations ({clash}): {holders}"
                )
        self.live[e.allocation_id] = alloc

    def gang_shape(self, seq: int, e: ev.GangPlaced, spec: ev.JobSpec) -> None:
        need = spec.min_members if spec.min_members is not None else spec.replicas
        ranks = [m.rank for m in e.members]
        where = f"seq {seq}: {e.allocation_id} ({e.job_id})"
        if len(ranks) < need:
            self.partial.fail(f"{where}: {len(ranks)} of the {need} members the gang needs")
        if len(ranks) > spec.replicas:
            self.partial.fail(f"{where}: {len(ranks)} members for {spec.replicas} replicas")
        if len(set(ranks)) != len(ranks) or any(r < 0 or r >= spec.replicas for r in ranks):
            self.partial.fail(
                f"{where}: ranks {sorted(ranks)} are not distinct ranks below {spec.replicas}"
            )
        res = spec.resources
        for m in e.members:
            if res.mig_profile:
                ok = len(m.gpus) == 1 and m.mig_profile == res.mig_profile
            elif res.gpu_milli:
                ok = len(m.gpus) == 1 and m.gpu_milli == res.gpu_milli
            else:
                ok = len(m.gpus) == res.gpus and len(set(m.gpus)) == res.gpus
            if not ok:
                self.partial.fail(
                    f"{where}: member {m.rank} on {m.node} holds {m.gpus} "
                    f"(milli {m.gpu_milli}, MIG {m.mig_profile}), not the member's shape"
                )

    def release(self, allocation_id: str) -> None:
        alloc = self.live.pop(allocation_id, None)
        if alloc is None:
            return
        self.ended.add(allocation_id)
        for node, g, _kind, _amount in alloc.units:
            gpu = self.gpus[(node, g)]
            if gpu.whole == allocation_id:
                gpu.whole = None
            gpu.milli.pop(allocation_id, None)
            gpu.mig.pop(allocation_id, None)

    def resize(self, seq: int, e: ev.GangResized) -> None:
        """An elastic gang shrank or grew: its allocation holds exactly `e.members` from now
        on, checked like a placement (shape, no GPU held twice)."""
        if e.allocation_id not in self.live:
            return
        job = self.ledger.jobs.get(e.job_id)
        self.release(e.allocation_id)
        self.ended.discard(e.allocation_id)
        again = ev.GangPlaced(
            job_id=e.job_id, allocation_id=e.allocation_id, tenant="", members=e.members
        )
        self.place(seq, again, None if job is None else job.spec)

    def started(self, seq: int, e: ev.MemberStarted) -> None:
        self.placed.checked += 1
        alloc = self.live.get(e.allocation_id)
        where = f"seq {seq}: member {e.rank} of {e.job_id} ({e.allocation_id}) started on {e.node}"
        if alloc is None:
            state = "ended" if e.allocation_id in self.ended else "never placed"
            self.partial.fail(f"{where}, outside its gang (the allocation is {state})")
            self.placed.fail(f"{where} with no live placement (the allocation is {state})")
            return
        member = next((m for m in alloc.members if m.rank == e.rank), None)
        if member is None or member.node != e.node or alloc.job_id != e.job_id:
            placed = "no such rank" if member is None else f"placed on {member.node}"
            self.placed.fail(f"{where}, but its placement says {placed} for job {alloc.job_id}")

    # ------------------------------------------------------------------ the end

    def finish(self) -> None:
        jobs = self.ledger.jobs
        for job_id, seq in sorted(self.acked.items()):
            self.lost.checked += 1
            first = self.first_submit.get(job_id)
            job = jobs.get(job_id)
            if first is None or job is None:
                self.lost.fail(f"{job_id}: acknowledged at seq {seq}, not in the log")
            elif first != seq:
                self.lost.fail(
                    f"{job_id}: acknowledged at seq {seq}, but the log's first submission is at seq {first}"
                )
            elif job_id not in self.decided:
                self.lost.fail(f"{job_id}: submitted at seq {seq}, never admitted or rejected")
        for job_id in sorted(jobs):
            job = jobs[job_id]
            if job.state not in (JobState.running, JobState.preempting) or job.spec.is_service:
                continue
            self.placed.checked += 1
            alloc = self.live.get(job.allocation_id or "")
            if alloc is None or alloc.job_id != job_id or not alloc.members:
                self.placed.fail(
                    f"{job_id} is {job.state} with no live allocation "
                    f"({job.allocation_id or 'none'})"
                )


def check_log(
    entries: Iterable[tuple[int, str, ev.Event]], acked: dict[str, int] | None = None
) -> list[Finding]:
    """Check the invariants of the module doc over `entries` (in log order). `acked`: job id ->
    the stream sequence a client's submission was acknowledged at."""
    return _Checker(dict(acked or {})).run(list(entries))
