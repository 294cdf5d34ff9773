"""Hierarchical fair shares: given a tenant tree with guarantees, limits and weights, when
capacity is split by water-filling, then guarantees come first, idle surplus follows the
weights, limits and demand cap it, and each subtree splits its own share the same way."""

from gpuledger.events import TenantConfigured
from gpuledger.services.domain.policy.quota import fair_shares


def tenants(*rows):
    return {
        t: TenantConfigured(
            tenant=t,
            guaranteed_gpu_milli=g * 1000,
            limit_gpu_milli=None if lim is None else lim * 1000,
            over_quota_weight=w,
        )
        for t, g, lim, w in rows
    }


def shares(tree, capacity, demand):
    out = fair_shares(tree, capacity * 1000, {}, {t: d * 1000 for t, d in demand.items()})
    return {t: s.fair_share_gpu_milli / 1000 for t, s in out.items()}


def test_guarantees_first_then_surplus_by_weight_capped_by_limit_and_demand():
    tree = tenants(("a", 4, None, 1), ("b", 4, None, 3), ("c", 0, 1, 1))
    got = shares(tree, 16, {"a": 16, "b": 16, "c": 16})
    # 8 guaranteed; 8 surplus by weight 1:3:1 -> c capped at its 1-GPU limit, the rest 1:3
    assert got == {"a": 5.75, "b": 9.25, "c": 1}
    assert shares(tree, 16, {"a": 16, "b": 5, "c": 0}) == {"a": 11, "b": 5, "c": 0}  # demand caps


def test_idle_guarantees_are_lent_to_those_with_demand():
    tree = tenants(("a", 8, None, 1), ("b", 8, None, 1))
    assert shares(tree, 16, {"a": 0, "b": 16}) == {"a": 0, "b": 16}


def test_a_subtree_splits_its_own_share_recursively():
    tree = tenants(
        ("org", 8, None, 1), ("org/x", 6, None, 1), ("org/y", 2, None, 1), ("other", 8, None, 1)
    )
    got = shares(tree, 16, {"org/x": 10, "org/y": 10, "other": 8})
    assert got["org"] == 8 and got["other"] == 8
    assert (got["org/x"], got["org/y"]) == (6, 2)


def test_oversubscribed_guarantees_are_scaled_down_deterministically():
    tree = tenants(("a", 8, None, 1), ("b", 8, None, 1))
    got = shares(tree, 8, {"a": 8, "b": 8})
    assert got == {"a": 4, "b": 4}
