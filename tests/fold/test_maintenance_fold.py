"""Maintenance windows in the nodes fold (services/domain/fold/maintenance.py): a window is
derived once, as the interval its nodes are planned down; bad windows change nothing."""

from __future__ import annotations

from gpuledger import events as ev
from gpuledger.services.domain.fold.maintenance import in_force, reaching
from tests.fold.story import given, node, when

H = 3_600_000


def window(window_id="fw", nodes=("n1",), start=2 * H, end=4 * H, **kw):
    return ev.MaintenanceScheduled(
        window_id=window_id, nodes=tuple(nodes), start_ms=start, end_ms=end, **kw
    )


def test_a_window_is_folded_once_as_the_span_its_nodes_are_planned_down():
    # given two nodes, when the operator plans a window on both
    ledger = given(node("n1"), node("n2"), window(nodes=("n2", "n1"), reason="firmware"))
    w = ledger.maintenance["fw"]
    # then it holds its nodes (sorted) and its span
    assert (w.nodes, w.start_ms, w.until_ms, w.reason) == (("n1", "n2"), 2 * H, 4 * H, "firmware")
    assert [w.phase(t) for t in (0, 2 * H, 4 * H - 1, 4 * H)] == [
        "scheduled",
        "active",
        "active",
        "ended",
    ]
    # a run from 1 h reaches it with a 2 h limit, not with a 1 h one; without a limit it does
    assert reaching(ledger, "n1", H, 3 * H) is w
    assert reaching(ledger, "n1", H, 2 * H) is None
    assert reaching(ledger, "n1", H, None) is w
    assert in_force(ledger, "n2", 3 * H) is w and in_force(ledger, "n2", 5 * H) is None


def test_a_cancelled_window_ends_at_its_cancel():
    ledger = given(node("n1"), window())
    when(ledger, ev.MaintenanceCancelled(window_id="fw", occurred_at_ms=3 * H))
    w = ledger.maintenance["fw"]
    assert (w.until_ms, w.phase(3 * H), in_force(ledger, "n1", 3 * H)) == (3 * H, "cancelled", None)
    # a second cancel, or one of no window, is refused
    assert when(ledger, ev.MaintenanceCancelled(window_id="fw")).code == "UnknownWindow"
    assert when(ledger, ev.MaintenanceCancelled(window_id="nope")).code == "UnknownWindow"


def test_bad_windows_are_refused_and_change_nothing():
    ledger = given(node("n1"), node("n2"), window())
    cases = {
        "UnknownNode": window("a", nodes=("n1", "n9"), start=5 * H, end=6 * H),
        "InvalidWindow": window("b", nodes=("n2",), start=6 * H, end=5 * H),
        "DuplicateWindow": window("fw", nodes=("n2",), start=5 * H, end=6 * H),
    }
    for code, e in cases.items():
        assert when(ledger, e).code == code
    # an overlap on a shared node is refused; on other nodes, or after, it is fine
    overlap = when(ledger, window("c", nodes=("n1", "n2"), start=3 * H, end=5 * H))
    assert overlap.code == "InvalidWindow" and "overlaps window 'fw' on n1" in overlap.message
    assert sorted(ledger.maintenance) == ["fw"]
    assert when(ledger, window("d", nodes=("n2",), start=3 * H, end=5 * H)) is None
    assert when(ledger, window("e", nodes=("n1",), start=4 * H, end=5 * H)) is None
    assert sorted(ledger.maintenance) == ["d", "e", "fw"]


def test_a_configurations_window_may_name_nodes_not_yet_registered_and_comes_back_unchanged():
    # given no node yet, when the configuration declares a window on n1
    from gpuledger.services.domain.fold.maintenance import closed_nodes

    ledger = given(window(origin="config"))
    assert ledger.maintenance["fw"].nodes == ("n1",)
    # then the operator's same window would be refused (an unknown node)
    assert when(given(), window()).code == "UnknownNode"
    # and declaring it again unchanged changes nothing, changed is refused
    assert when(ledger, window(origin="config")) is None
    assert when(ledger, window(origin="config", end=5 * H)).code == "DuplicateWindow"
    assert ledger.maintenance["fw"].end_ms == 4 * H
    assert closed_nodes(ledger, 3 * H, None) == {"n1"}


def test_a_window_held_for_a_tenant_closes_its_nodes_to_the_others_only():
    from gpuledger.services.domain.fold.maintenance import closed_nodes, in_force_on

    ledger = given(node("n1"), window(tenant="ml"))
    w = ledger.maintenance["fw"]
    assert w.tenant == "ml"
    assert closed_nodes(ledger, H, None, "ml") == frozenset()
    assert closed_nodes(ledger, H, None, "cv") == {"n1"}
    assert reaching(ledger, "n1", H, None, "ml") is None
    assert reaching(ledger, "n1", H, None, "cv") is w
    assert in_force_on(ledger, 3 * H) == {"n1": w}
