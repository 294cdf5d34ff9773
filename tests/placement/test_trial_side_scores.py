"""A trial view (`Fleet.trial()`, one per decide) keeps the scores of its node copies between
queries and re-scores only the copies changed since (`TrialFleet.side_scores`). Given any
sequence of trial bookings and releases, when a gang is placed on the view, then the answer
equals that of a new view given the same bookings and asked once (scores from scratch)."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuledger.services.placement import Fleet, Placement

from .test_explain_incremental import gangs, node_specs


def fresh_view(fleet: Fleet, ops: list[tuple]) -> object:
    view = fleet.trial()
    for op in ops:
        if op[0] == "allocate":
            view.allocate(*op[1:])
        else:
            view.release(op[1])
    return view


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(1, 8),
    data=st.data(),
    policy=st.sampled_from(["bestfit", "packing", "fgd", "default"]),
)
def test_a_long_lived_view_answers_as_a_fresh_one(n, data, policy):
    fleet = Fleet([data.draw(node_specs(i)) for i in range(n)])
    names = fleet.node_names()
    for k in range(data.draw(st.integers(0, 6))):  # some allocations in the base fleet
        g = data.draw(gangs(f"base{k}"))
        got = fleet.place(g, policy)
        if isinstance(got, Placement):
            fleet.allocate(g.job_id, g.tenant, got, g)
    view, ops, booked = fleet.trial(), [], []
    for k in range(data.draw(st.integers(1, 30))):
        if booked and data.draw(st.integers(0, 5)) == 0:
            alloc_id = booked.pop(data.draw(st.integers(0, len(booked) - 1)))
            view.release(alloc_id)
            ops.append(("release", alloc_id))
            continue
        g = data.draw(gangs(k))
        exclude = data.draw(st.lists(st.sampled_from(names), max_size=1)) if names else []
        got = view.place(g, policy, exclude=exclude)
        assert got == fresh_view(fleet, ops).place(g, policy, exclude=exclude)
        if isinstance(got, Placement) and data.draw(st.booleans()):
            view.allocate(g.job_id, g.tenant, got, g)
            ops.append(("allocate", g.job_id, g.tenant, got, g))
            booked.append(g.job_id)
