"""The configuration's `reservations:` (services/domain/inputs/reservations.py): given a
window declared in the configuration, when the configuration is published (a scenario's
start, `gpuledger apply`), then it is the same folded window as the operator's `gpuledger
node maintenance` (the same placements, the same `Maintenance` reason), published with an id
that follows from its content, so applying the configuration again changes nothing; a bad
reservation is one line per problem and nothing is published."""

import pytest

from gpuledger import events as ev
from gpuledger.replay.scenario import ScenarioError, from_document
from gpuledger.replay.simulator import simulate
from gpuledger.services.domain.fold.acceptance import admit
from gpuledger.services.domain.fold.ledger import Ledger
from gpuledger.services.domain.inputs.configfile import ConfigFileError, config_events

CLUSTER = {"cluster": {"nodes": [{"name_prefix": "node-", "count": 2, "gpus": 8}]}}
JOBS = [
    {"at": "1m", "submit": {"id": "open", "tenant": "ml", "gpus": 8, "duration": "3h"}},
    {
        "at": "50m",
        "submit": {"id": "late", "tenant": "ml", "gpus": 8, "duration": "10m", "time_limit": "20m"},
    },
]
# a scenario's clock starts at the epoch: 1 h in is 1970-01-01T01:00Z
RESERVATION = {
    "name": "fw",
    "nodes": "node-[1]",
    "start": "1970-01-01T02:00+01:00",
    "end": "1970-01-01T02:00:00Z",
    "reason": "firmware",
}


def decisions(sim):
    return [
        (type(e).__name__, e.job_id, getattr(e, "reason", ""), getattr(e, "message", ""))
        for _, _, e in sim.log
        if isinstance(e, ev.GangPlaced | ev.PendingReasonChanged)
    ]


def test_a_declared_reservation_decides_as_the_operators_window():
    # given the same window, once in the configuration, once from the operator at 1 s
    declared = {**CLUSTER, "tenants": [{"name": "ml", "guaranteed": 16}], "timeline": JOBS}
    declared["reservations"] = [RESERVATION]
    planned = {**declared, "reservations": []}
    planned["timeline"] = [
        {
            "at": "1s",
            "maintenance": {"id": "fw", "nodes": ["node-1"], "start": "1h", "end": "2h"},
            "reason": "firmware",
        },
        *JOBS,
    ]
    by_config = simulate(from_document(declared), until_ms=9_000_000)
    by_operator = simulate(from_document(planned), until_ms=9_000_000)
    # then every placement and pending reason is the same
    assert decisions(by_config) == decisions(by_operator)
    assert ("GangPlaced", "late", "", "") in decisions(by_config)
    (window,) = by_config.ledger.maintenance.values()
    assert (window.window_id, window.nodes, window.start_ms, window.end_ms, window.reason) == (
        "fw",
        ("node-1",),
        3_600_000,
        7_200_000,
        "firmware",
    )


def test_applying_the_configuration_again_changes_nothing():
    doc = {**CLUSTER, "reservations": [RESERVATION]}
    # given the configuration published at 1 s (before node-1 registers) and again at 2 s
    (first,) = [e for e in config_events(doc, at_ms=1000) if isinstance(e, ev.MaintenanceScheduled)]
    (again,) = [e for e in config_events(doc, at_ms=2000) if isinstance(e, ev.MaintenanceScheduled)]
    # then both carry the same id, `origin: config`
    assert first.event_id == again.event_id and first.origin == "config"
    ledger = Ledger()
    admit(ledger, 1, first, "gl.admin.maint.fw.MaintenanceScheduled")
    before = dict(ledger.maintenance)
    # and the second folds without a refusal and changes nothing
    admit(ledger, 2, again, "gl.admin.maint.fw.MaintenanceScheduled")
    assert ledger.maintenance == before
    # and a window that has ended when the configuration is published is left out
    late = [
        e for e in config_events(doc, at_ms=7_200_000) if isinstance(e, ev.MaintenanceScheduled)
    ]
    assert late == []


@pytest.mark.parametrize(
    "change, problem",
    [
        ({"nodes": "node-[2-1]"}, "reservations[0].nodes: node range 'node-[2-1]': '2-1' is not"),
        ({"nodes": "node-[1-3]"}, "reservations[0].nodes: no node 'node-3' in cluster.nodes"),
        ({"start": "1970-01-01T01:00"}, "reservations[0].start: '1970-01-01T01:00' has no zone"),
        ({"end": "1970-01-01T00:30Z"}, "reservations[0].end: 1970-01-01T00:30Z is not after start"),
        ({"name": "a.b"}, "reservations[0].name: invalid window 'a.b'"),
        ({"tenant": "cv"}, "reservations[0].tenant: no tenant 'cv' in tenants"),
    ],
)
def test_a_bad_reservation_is_one_line_naming_it(change, problem):
    doc = {**CLUSTER, "reservations": [{**RESERVATION, **change}]}
    with pytest.raises(ConfigFileError) as err:
        config_events(doc)
    (line,) = err.value.problems
    assert line.startswith(problem), line


def test_overlapping_reservations_on_a_shared_node_are_refused():
    other = {**RESERVATION, "name": "bios", "nodes": "node-[1-2]"}
    doc = {**CLUSTER, "reservations": [RESERVATION, other]}
    with pytest.raises(ScenarioError) as err:
        from_document({**doc, "timeline": []})
    assert "reservations[1]: overlaps reservation 'fw' on node-1" in str(err.value)
