"""Progress, not roles (issue 44, item 5): `gpuledger status` says `stalled` for a running
service that has folded nothing for a minute with messages to fold, whatever its lease, and
the `gpuledger_service_stalled_seconds` gauge says how long."""

from __future__ import annotations

from gpuledger.services.runtime.metrics import ServiceCollector
from gpuledger.services.runtime.supervisor import STALLED_AFTER_S, ServiceState, progress

NOW = 1_000_000_000


def leader(folded: int, moved_s_ago: int, behind_s_ago: int = 600) -> ServiceState:
    st = ServiceState("scheduler", "scheduler", state="running", lease="leader")
    st.folded_seq = folded
    st.progress_at_ms = NOW - moved_s_ago * 1000
    st.behind_since_ms = NOW - behind_s_ago * 1000
    return st


def test_a_leader_that_folds_nothing_for_a_minute_is_stalled_not_running():
    row = progress(leader(41, moved_s_ago=STALLED_AFTER_S + 5), 200_000, NOW)
    assert row["state"] == "stalled" and row["idle_s"] == STALLED_AFTER_S + 5
    assert row["detail"].startswith("no progress for 65s at seq 41 with 200000 to fold")


def test_a_service_that_moves_or_has_nothing_to_fold_stays_running():
    assert progress(leader(41, moved_s_ago=5), 200_000, NOW) == {"idle_s": 5}
    assert progress(leader(41, moved_s_ago=3600), 0, NOW) == {"idle_s": 0}


def test_idle_counts_from_the_oldest_message_it_has_not_folded():
    """Caught up for an hour, then an event arrives 10 s ago: idle 10 s, not an hour."""
    row = progress(leader(41, moved_s_ago=3600, behind_s_ago=10), 1, NOW)
    assert row == {"idle_s": 10}


def test_the_stalled_gauge_grows_while_the_folded_sequence_stands_and_resets_when_it_moves():
    metrics = ServiceCollector()
    assert metrics._stalled_s(("scheduler", ""), 41, 200_000) == 0.0
    metrics._progress[("scheduler", "")] = (41, metrics._progress[("scheduler", "")][1] - 90)
    assert metrics._stalled_s(("scheduler", ""), 41, 200_000) >= 90
    assert metrics._stalled_s(("scheduler", ""), 42, 199_999) == 0.0  # it moved
    assert metrics._stalled_s(("scheduler", ""), 42, 0) == 0.0  # caught up
