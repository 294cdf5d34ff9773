"""The fleet as it will be once the preemptions already decided have landed.

Preemption plans against this outlook rather than the fleet of the moment: every beneficiary
of a live nomination (in queue order) has its still-running victims released and its own gang
placed, tentatively. A blocked job that fits in the outlook needs no new victims (capacity
already being released will do), and victims chosen in one call are accounted for by the
next job's plan, so two jobs never evict two victims where one frees room for both. A
beneficiary that cannot be placed in the outlook keeps its nominated nodes excluded.

Everything happens in a copy-on-write `TrialFleet` (`self.fleet`) that is dropped with the
outlook: the folded fleet is only read.
"""

from __future__ import annotations

from gpuledger.services.domain.fold.ledger import JobRecord, Ledger
from gpuledger.services.placement import Placement, TrialFleet


class Outlook:
    def __init__(self, state: Ledger, now_ms: int) -> None:
        self.state = state
        self.now_ms = now_ms
        self.fleet: TrialFleet = state.fleet.trial()
        """The fleet as the outlook sees it (trial view; the folded fleet is untouched)."""
        self.held: set[str] = set()
        """Beneficiaries placed in the outlook."""
        self._unmodelled: set[str] = set()

    def model(self, queue: list[JobRecord]) -> None:
        state = self.state
        for job in queue:
            if job.job_id not in state.nominations:
                continue
            expires = state.nomination_expires_ms(job.job_id)
            if expires is not None and self.now_ms >= expires:
                continue
            victims = sorted(
                a
                for a in state.nominations[job.job_id]
                if a in state.allocations
                and not state.allocations[a].ended
                and not _resized_since(state.allocations[a])
            )
            partial = {
                a: ranks for a in victims if (ranks := state.allocations[a].leaving()) is not None
            }
            if self.land(job, victims, partial) is None:
                self._unmodelled.add(job.job_id)

    def exclude(self) -> frozenset[str]:
        """Nodes still off limits: those nominated to beneficiaries the outlook could not place,
        and the nodes the operator cordoned (capacity freed there serves nobody)."""
        out: set[str] = set(self.state.sched.cordoned)
        for b in sorted(self._unmodelled):
            for a in sorted(self.state.nominations.get(b, ())):
                rec = self.state.allocations.get(a)
                if rec is not None:
                    out.update(rec.nodes())
        return frozenset(out)

    def fits(self, job: JobRecord) -> bool:
        placed = self.fleet.place(
            self.state.gang_request(job),
            self.state.config.policy.placement_policy,
            exclude=self.exclude(),
            explain=False,
        )
        return isinstance(placed, Placement)

    def land(
        self,
        job: JobRecord,
        victims: list[str],
        partial: dict[str, tuple[int, ...]] | None = None,
    ) -> Placement | None:
        """Release `victims` (of an elastic gang in `partial`, only the members it names) and
        place `job` in the outlook; None (and nothing changed) when the job would still not
        fit."""
        fleet = self.fleet.fork()  # kept only if the job fits
        present = set(fleet.allocation_ids())
        for a in victims:
            if a in present:
                held = fleet.release(a)
                ranks = (partial or {}).get(a)
                if ranks is not None:  # the members that stay keep their capacity
                    keep = len(held.placement.members) - len(ranks)
                    kept = Placement(members=held.placement.members[:keep])
                    fleet.allocate(a, held.tenant, kept, held.request)
        request = self.state.gang_request(job)
        placed = fleet.place(
            request,
            self.state.config.policy.placement_policy,
            exclude=self.exclude(),
            explain=False,
        )
        if not isinstance(placed, Placement):
            return None
        fleet.allocate(f"outlook:{job.job_id}", job.tenant, placed, request)
        self.fleet = fleet
        self.held.add(job.job_id)
        return placed


def _resized_since(rec) -> bool:
    """An elastic gang that already gave up its members (resized, no preemption under way):
    the capacity its nomination names is free already, nothing more leaves."""
    return rec.resized_ms is not None and rec.preemption is None
