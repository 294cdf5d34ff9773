"""The fleet benchmark's workload and a small run (numbers are measured, not asserted)."""

from collections import Counter

from gpuledger.replay.fleet_bench import fleet_nodes, job_queue, run, typical_of


def test_fleet_shape_and_job_mix():
    nodes = fleet_nodes()
    assert len(nodes) == 500 and sum(len(n.gpus) for n in nodes) == 4000
    assert all(len({g.clique for g in n.gpus}) == 1 for n in nodes)
    assert Counter(n.gpus[0].sharing for n in nodes) == {"exclusive": 400, "mps": 50, "mig": 50}
    queue = job_queue(10_000)
    kinds = Counter(g.member.kind for g, _ in queue)
    assert set(kinds) == {"whole", "milli", "mig", "cpu"}
    gangs = [g.replicas for g, _ in queue if g.replicas > 1]
    assert min(gangs) == 2 and max(gangs) == 32
    assert typical_of(queue)[0].weight >= typical_of(queue)[-1].weight


def test_lifetimes_scale_with_the_fleet_and_nothing_else_does():
    small, large = job_queue(2_000, 7), job_queue(2_000, 7, lifetime_scale=10)
    assert [g for g, _ in small] == [g for g, _ in large]
    assert [round(life * 10) for _, life in small] == [life for _, life in large]
    assert min(life for _, life in small) >= 35 and max(life for _, life in small) <= 600


def test_scaled_run_reports_its_occupancy():
    report = run(["bestfit"], n_nodes=100)  # 2,000 jobs, lifetimes x 0.2
    assert report.jobs == 2_000 and report.lifetime_scale == 0.2
    r = report.results[0]
    assert 40 < r.occupancy_pct < 85 and r.failed == r.decisions - r.placed


def test_small_run_places_and_explains():
    report = run(["bestfit", "default"], n_nodes=40, n_jobs=400)
    for r in report.results:
        assert r.decisions == 400 and 0 < r.placed < 400
        assert sum(r.reasons.values()) == 400 - r.placed
        assert r.p99_ms >= r.p50_ms > 0
        assert r.cpu_p99_ms >= r.cpu_p50_ms > 0 and r.cpu_decisions_per_s > 0
