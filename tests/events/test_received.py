"""The time of an external input: given a client's `occurred_at_ms` and the stream's receive
time, the folded time is the client's only when present and within 5 minutes."""

import pytest

from gpuledger import events as ev
from tests.fold.story import admission

RECEIVED = 1_777_500_000_000
SPEC = ev.JobSpec(job_id="ci-7", tenant="team-a")


@pytest.mark.parametrize(
    "client_ms, folded_ms",
    [
        (0, RECEIVED),  # the README's CI payload: no occurred_at_ms at all
        (RECEIVED - 1_500, RECEIVED - 1_500),  # a sane client clock is kept
        (RECEIVED + ev.MAX_CLIENT_SKEW_MS, RECEIVED + ev.MAX_CLIENT_SKEW_MS),
        (RECEIVED - ev.MAX_CLIENT_SKEW_MS - 1, RECEIVED),  # a slow clock is corrected
        (RECEIVED + 3_600_000, RECEIVED),  # a clock an hour ahead is corrected
        (-5, RECEIVED),
    ],
)
def test_a_client_time_is_kept_only_when_present_and_near_the_receive_time(client_ms, folded_ms):
    for event in (
        ev.JobSubmitted(job=SPEC, occurred_at_ms=client_ms),
        ev.JobCancelled(job_id="ci-7", tenant="team-a", occurred_at_ms=client_ms),
        ev.TenantConfigured(tenant="team-a", occurred_at_ms=client_ms),
    ):
        assert ev.at_receipt(event, RECEIVED).occurred_at_ms == folded_ms


def test_services_own_events_and_reads_without_a_receive_time_are_unchanged():
    decision = admission("j", "t", occurred_at_ms=5)
    assert ev.at_receipt(decision, RECEIVED) is decision
    submitted = ev.JobSubmitted(job=SPEC)
    assert ev.at_receipt(submitted, 0) is submitted  # a file or the simulator: no stream time
