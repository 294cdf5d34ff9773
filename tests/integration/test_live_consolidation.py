"""Live consolidation (issue 16): every service is its own OS process on a real nats-server
with authentication, two real node agents run examples/train_tiny.py members. A job blocked
only by fragmentation gets a small job migrated out of its way: the mover is checkpointed on
disk, evicted with reason `Consolidate`, placed again on the other node at once and resumes
from its saved step; the blocked job runs on the GPUs that frees (examples/live-consolidation.yaml)."""

from __future__ import annotations

import pytest

from gpuledger import events as ev
from tests.integration.test_live_agent import live, member_log, run_scenario  # noqa: F401

pytestmark = pytest.mark.integration


async def test_a_fragmented_job_gets_a_small_job_migrated_out_of_its_way(live):  # noqa: F811
    c = live("live-consolidation.yaml")
    ledger, log = await run_scenario(c, timeout_s=45)
    jobs = ledger.jobs
    assert all(j.state == "completed" for j in jobs.values()), (
        {k: (j.state, j.reason) for k, j in jobs.items()},
        c.logs(),
    )
    (planned,) = [e for e in log if isinstance(e, ev.ConsolidationPlanned)]
    assert planned.job_id == "wide" and [m.job_id for m in planned.moves] == ["p2"]
    assert [(m.from_nodes, m.to_nodes) for m in planned.moves] == [(("n1",), ("n2",))]
    (req,) = [e for e in log if isinstance(e, ev.PreemptionRequested)]
    assert (req.job_id, req.reason, req.beneficiary) == ("p2", "Consolidate", "wide")
    (pre,) = jobs["p2"].preemptions
    assert (pre.reason, pre.by, pre.checkpointed) == ("Consolidate", "wide", True)
    placed = [e for e in log if isinstance(e, ev.GangPlaced) and e.job_id == "p2"]
    assert [sorted({m.node for m in p.members}) for p in placed] == [["n1"], ["n2"]]
    acks = [e for e in log if isinstance(e, ev.MemberCheckpointed) and e.allocation_id == "p2#1"]
    assert acks and placed[1].resume_step == max(e.step for e in acks) > 0
    text = member_log(c, "p2#2", 0)  # the step counter survived the move
    assert "starting at step 0" not in text and "done at step 400" in text, text
    wide = next(e for e in log if isinstance(e, ev.GangPlaced) and e.job_id == "wide")
    assert {m.node for m in wide.members} == {"n1"}
    order = [e for e in log if isinstance(e, (ev.GangEvicted, ev.GangPlaced))]
    assert order.index(next(e for e in order if isinstance(e, ev.GangEvicted))) < order.index(wide)
    reasons = [
        e.reason for e in log if isinstance(e, ev.PendingReasonChanged) and e.job_id == "wide"
    ]
    assert "WaitingForConsolidation" in reasons
