"""Stage `spread`: given a spread group at its limit on a node, when another member of the
group is tried, then that node is excluded, and when only the limit keeps the job out its
message names the nodes at the limit; a bind counts its members in the group."""

from gpuledger import events as ev
from gpuledger.services.scheduler.stages import spread
from tests.scheduler.stages.helpers import limits, round_at
from tests.services.test_pending import fleet, scheduled, why

NODES = ({"name": "n1", "gpus": 8}, {"name": "n2", "gpus": 2})
WEB = {"group": "web", "max_per_node": 1}


def test_a_node_at_the_groups_limit_is_excluded_and_named():
    ledger, out = scheduled(
        fleet(*NODES),
        [{"id": "big", "tenant": "a", "gpus": 2}],  # fills n2
        [{"id": "w1", "tenant": "a", "gpus": 1, "spread": WEB}],  # on n1
        [{"id": "w2", "tenant": "a", "gpus": 1, "spread": WEB}],
    )
    assert not [e for e in out if isinstance(e, ev.GangPlaced)]
    e = why(out, "w2")
    assert e.message.startswith("spread group 'web' allows at most 1 per node")
    assert "(n1)" in e.message
    assert e.details["spread"] == {"group": "web", "max_per_node": 1, "nodes_at_limit": 1}
    rnd = round_at(ledger, 5)
    lim = limits(rnd, "w2")
    assert lim.excluded["spread"] == {"n1"} == lim.spread_full


def test_a_bind_counts_its_members_in_the_group():
    ledger, _ = scheduled(fleet(*NODES), [{"id": "w1", "tenant": "a", "gpus": 1, "spread": WEB}])
    rnd = round_at(ledger, 5)
    before = dict(spread.counts(rnd, "web"))
    members = ledger.allocations["w1#1"].members
    spread.book(rnd, ledger.jobs["w1"], members)
    node = members[0].node
    assert rnd.spread["web"][node] == before[node] + 1
