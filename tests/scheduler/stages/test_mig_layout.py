"""Stage `mig_layout`: given `mig_regeometry` and a MIG GPU whose layout lacks the profile,
when a job asks for that profile, then it is `MIGPlacementUnavailable` (not `Unschedulable`)
with the number of GPUs that could be re-partitioned."""

from gpuledger.events.reasons import PendingReason
from tests.services.test_pending import fleet, scheduled, why


def test_a_profile_no_layout_offers_is_unavailable_not_unschedulable():
    node = {"name": "m1", "gpus": 1, "sharing": "mig", "mig_layout": ["1g.10gb"] * 7}
    _, out = scheduled(
        fleet(node, mig_regeometry=True), [{"id": "big", "tenant": "a", "mig": "3g.40gb"}]
    )
    e = why(out, "big")
    assert e.reason == PendingReason.MIGPlacementUnavailable
    assert e.details["regeometry_candidates"] == 1
    assert "1 MIG GPUs could be re-partitioned for it" in e.message


def test_without_the_policy_the_placement_reason_stands():
    node = {"name": "m1", "gpus": 1, "sharing": "mig", "mig_layout": ["1g.10gb"] * 7}
    _, out = scheduled(fleet(node), [{"id": "big", "tenant": "a", "mig": "3g.40gb"}])
    assert "regeometry_candidates" not in why(out, "big").details
