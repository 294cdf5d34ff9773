"""Safety of placements over random workloads (gangs, MIG slices, milli shares, limits,
cancels and lost nodes), judged by the log alone: no GPU capacity is ever held twice, no
gang is ever placed in part, and no tenant runs beyond its quota except by borrowing — above
its limit never, above its guarantee only with preemptible work (which reclaim takes back)."""

from __future__ import annotations

from collections import defaultdict

from hypothesis import given
from hypothesis import strategies as st

from gpuledger import events as ev
from gpuledger.replay.invariants import check_log
from gpuledger.replay.scenario import from_document
from gpuledger.replay.simulator import simulate
from gpuledger.services.domain.fold.ledger import Ledger
from tests.properties.test_preemption_properties import SETTINGS
from tests.properties.test_pure_decider_properties import disruption, document, job, limits, policy


def over_quota(log) -> list[tuple]:
    """Moments a tenant's allocations exceed its limit, or its non-preemptible allocations its
    guarantee (what it runs beyond the guarantee must be borrowing: preemptible work)."""
    folded, out = Ledger(), []
    for seq, _, e in log:
        folded.apply(seq, e)
        if not isinstance(e, ev.GangPlaced):
            continue
        conf = folded.config.tenants[e.tenant]
        used = folded.tenant_gpu_milli.get(e.tenant, 0)
        fixed = defaultdict(int)
        for alloc_id in sorted(folded.active):
            rec = folded.allocations[alloc_id]
            if not folded.jobs[rec.job_id].preemptible:
                fixed[rec.tenant] += rec.gpu_milli
        if conf.limit_gpu_milli is not None and used > conf.limit_gpu_milli:
            out.append((e.occurred_at_ms, e.tenant, "limit", used, conf.limit_gpu_milli))
        if fixed[e.tenant] > conf.guaranteed_gpu_milli:
            out.append((e.occurred_at_ms, e.tenant, "guarantee", fixed[e.tenant]))
    return out


@SETTINGS
@given(st.lists(job, min_size=1, max_size=12), policy, disruption, limits)
def test_no_capacity_is_held_twice_no_gang_is_split_and_quotas_hold_but_for_borrowing(
    jobs, pol, events_, lim
):
    sim = simulate(from_document(document(jobs, pol, events_, lim)))
    findings = {f.name: f for f in check_log(sim.log)}
    for name in ("no_double_allocation", "no_partial_gang"):
        assert findings[name].ok, (name, findings[name].violations)
        assert findings[name].checked or not any(
            isinstance(e, ev.GangPlaced) for _, _, e in sim.log
        )
    assert over_quota(sim.log) == []
