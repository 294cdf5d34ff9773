"""A window held for one tenant (`gpuledger node maintenance --tenant`, a scenario's
`maintenance: {tenant}`, a reservation's `tenant:`), through the simulator: given a window
on node-1 held for `ml` from 1 h to 3 h, then `ml`'s jobs start on node-1 before and during
it, another tenant's run still there at its start is drained (reason `Drain`, naming the
window) and its jobs wait with `Maintenance` naming the tenant; its nodes are not planned
down (the projection's `maintenance_windows` holds no row for it)."""

from gpuledger import events as ev
from gpuledger.replay.scenario import from_document
from gpuledger.replay.simulator import simulate

DOC = {
    "cluster": {"nodes": [{"name_prefix": "node-", "count": 2, "gpus": 8}]},
    "tenants": [{"name": "ml", "guaranteed": 8}, {"name": "cv", "guaranteed": 8}],
    "timeline": [
        {"at": 0, "submit": {"id": "cv-run", "tenant": "cv", "gpus": 8, "duration": "3h"}},
        {
            "at": "1s",
            "maintenance": {
                "id": "ml-day",
                "nodes": ["node-1"],
                "start": "1h",
                "end": "3h",
                "tenant": "ml",
            },
            "reason": "launch",
        },
        {"at": "1m", "submit": {"id": "cv-open", "tenant": "cv", "gpus": 8, "duration": "3h"}},
        {"at": "70m", "submit": {"id": "ml-big", "tenant": "ml", "gpus": 8, "duration": "1h"}},
    ],
}


def test_the_tenants_jobs_start_on_its_window_and_the_others_leave_at_its_start():
    sim = simulate(from_document(DOC), until_ms=80 * 60_000)
    placed = [
        (e.job_id, e.occurred_at_ms // 1000, e.members[0].node)
        for _, _, e in sim.log
        if isinstance(e, ev.GangPlaced)
    ]
    # then cv-run (placed before the window) leaves node-1 at its start; ml-big starts there
    assert placed == [
        ("cv-run", 0, "node-1"),
        ("cv-open", 60, "node-2"),
        ("ml-big", 4200, "node-1"),
    ]
    (asked,) = [e for _, _, e in sim.log if isinstance(e, ev.PreemptionRequested)]
    assert (asked.job_id, asked.reason, asked.occurred_at_ms) == ("cv-run", "Drain", 3_600_000)
    assert asked.message == "node node-1 is held for tenant ml by window ml-day (launch)"
    (waits,) = [
        e
        for _, _, e in sim.log
        if isinstance(e, ev.PendingReasonChanged) and e.occurred_at_ms == 3_605_000
    ]
    assert (waits.job_id, waits.reason) == ("cv-run", "Maintenance")
    assert waits.message == (
        "fits only on nodes of maintenance window ml-day held for tenant ml "
        "(node-1, t+1h to t+3h): in force (launch)"
    )
    # and the window is folded with its tenant
    assert sim.ledger.maintenance["ml-day"].tenant == "ml"


def test_a_tenants_job_without_a_time_limit_starts_on_its_window_ahead():
    doc = {
        **DOC,
        "timeline": [
            DOC["timeline"][1],
            {"at": "1m", "submit": {"id": "ml-open", "tenant": "ml", "gpus": 8, "duration": "3h"}},
            {"at": "1m", "submit": {"id": "cv-open", "tenant": "cv", "gpus": 8, "duration": "3h"}},
        ],
    }
    sim = simulate(from_document(doc), until_ms=2 * 3_600_000)
    where = {e.job_id: e.members[0].node for _, _, e in sim.log if isinstance(e, ev.GangPlaced)}
    assert where == {"ml-open": "node-1", "cv-open": "node-2"}
    assert not [e for _, _, e in sim.log if isinstance(e, ev.PreemptionRequested)]
