"""The live latency bench judges its figures against issue 15's goals: p99 at most 20 ms, a
burst drain of at least 2,000 placements/s (boundaries included)."""

from gpuledger.replay.bench.latency import goals_met


def test_at_the_boundaries_both_goals_are_met():
    assert goals_met({"p99_ms": 20.0, "drain_per_s": 2_000.0}) == {
        "p99_ms": True,
        "drain_per_s": True,
    }


def test_a_slow_tail_or_a_slow_drain_is_reported_as_missed():
    assert goals_met({"p99_ms": 20.01, "drain_per_s": 5_000.0}) == {
        "p99_ms": False,
        "drain_per_s": True,
    }
    assert goals_met({"p99_ms": 3.0, "drain_per_s": 1_999.9}) == {
        "p99_ms": True,
        "drain_per_s": False,
    }
