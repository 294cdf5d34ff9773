"""Maintenance windows through the simulator: given a window on node-1 from 1 h to 2 h, when
jobs come before and during it, then node-1 takes only work whose time limit ends before the
window, a job without a limit goes to node-2, a job whose limit reaches the window waits with
`Maintenance` naming it and starts on node-1 when the window ends; a scenario without windows
decides as before (the golden logs, tests/replay/test_decisions_unchanged.py)."""

import pytest

from gpuledger import events as ev
from gpuledger.replay.scenario import ScenarioError, from_document
from gpuledger.replay.simulator import simulate

DOC = {
    "cluster": {"nodes": [{"name_prefix": "node-", "count": 2, "gpus": 8}]},
    "tenants": [{"name": "ml", "guaranteed": 16}],
    "timeline": [
        {
            "at": "1s",  # the nodes register at 0
            "maintenance": {"id": "fw", "nodes": ["node-1"], "start": "1h", "end": "2h"},
            "reason": "firmware",
        },
        {"at": "1m", "submit": {"id": "open", "tenant": "ml", "gpus": 8, "duration": "3h"}},
        {
            "at": "10m",
            "submit": {
                "id": "short",
                "tenant": "ml",
                "gpus": 8,
                "duration": "20m",
                "time_limit": "30m",
            },
        },
        {
            "at": "50m",
            "submit": {
                "id": "late",
                "tenant": "ml",
                "gpus": 8,
                "duration": "10m",
                "time_limit": "20m",
            },
        },
    ],
}


def placements(sim):
    return {
        e.job_id: (e.occurred_at_ms // 1000, e.members[0].node)
        for _, _, e in sim.log
        if isinstance(e, ev.GangPlaced)
    }


def test_a_window_takes_only_work_that_ends_before_it_and_its_nodes_return_at_its_end():
    sim = simulate(from_document(DOC))
    assert placements(sim) == {
        "open": (60, "node-2"),  # no time limit: never on a node with a window ahead
        "short": (600, "node-1"),  # ends by 40 m, before the window
        "late": (7200, "node-1"),  # 50 m + 20 m reaches the window: waits for its end
    }
    (why,) = [
        e for _, _, e in sim.log if isinstance(e, ev.PendingReasonChanged) and e.job_id == "late"
    ]
    assert (why.reason, why.message) == (
        "Maintenance",
        "fits only on nodes of maintenance window fw (node-1, t+1h to t+2h): "
        "its time limit 20m would reach into it (firmware)",
    )


def test_a_cancelled_window_returns_its_nodes_at_the_cancel():
    doc = {**DOC, "timeline": [*DOC["timeline"], {"at": "70m", "maintenance_cancel": "fw"}]}
    assert placements(simulate(from_document(doc)))["late"] == (4200, "node-1")


@pytest.mark.parametrize(
    "window, problem",
    [
        ({"id": "w", "nodes": ["node-9"], "start": "1h", "end": "2h"}, "no node 'node-9'"),
        ({"id": "w", "nodes": ["node-1"], "start": "2h", "end": "1h"}, "end must be after start"),
    ],
)
def test_a_bad_window_in_a_scenario_is_one_line_naming_the_entry(window, problem):
    doc = {**DOC, "timeline": [{"at": 0, "maintenance": window}]}
    with pytest.raises(ScenarioError) as err:
        from_document(doc)
    assert problem in str(err.value) and "timeline[0].maintenance" in str(err.value)


def test_preemption_frees_capacity_only_off_the_windows_the_beneficiary_would_reach():
    # given both nodes busy with preemptible work, a window ahead on node-1
    doc = {
        **DOC,
        "timeline": [
            {"at": 0, "submit": {"id": "on-1", "tenant": "ml", "gpus": 8, "duration": "3h"}},
            {"at": 0, "submit": {"id": "on-2", "tenant": "ml", "gpus": 8, "duration": "3h"}},
            {
                "at": "1m",
                "maintenance": {"id": "fw", "nodes": ["node-1"], "start": "1h", "end": "2h"},
            },
            # when a non-preemptible job without a time limit comes
            {
                "at": "10m",
                "submit": {"id": "serve", "tenant": "ml", "gpus": 8, "class": "inference"},
            },
        ],
        "until": "12m",
    }
    sim = simulate(from_document(doc))
    where = {e.job_id: e.members[0].node for _, _, e in sim.log if isinstance(e, ev.GangPlaced)}
    # then the victim is the run on node-2, where serve is placed
    (asked,) = [e for _, _, e in sim.log if isinstance(e, ev.PreemptionRequested)]
    assert asked.job_id == [j for j in ("on-1", "on-2") if where[j] == "node-2"][0]
    assert where["serve"] == "node-2"
