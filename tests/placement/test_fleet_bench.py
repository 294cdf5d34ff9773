"""The fleet benchmark's workload and a small run (numbers are measured, not asserted)."""

from collections import Counter

import pytest
from typer.testing import CliRunner

from gpuledger.replay.bench.fleet import (
    OPENB_NODE_MIX,
    fleet_nodes,
    job_queue,
    openb_nodes,
    openb_queue,
    run,
    typical_of,
)
from gpuledger.services.cli.bench import bench_app


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


def test_openb_mix_repeats_the_openb_node_types_in_proportion():
    nodes = openb_nodes(1213)
    assert sum(len(n.gpus) for n in nodes) == 6212  # the openb GPU node list's GPUs
    types = Counter((n.cpu_milli, n.memory_mib, len(n.gpus), n.gpus[0].model) for n in nodes)
    assert types == {(cpu, mem, g, model): c for c, cpu, mem, g, model in OPENB_NODE_MIX}
    twice = openb_nodes(2426)
    assert [(n.cpu_milli, len(n.gpus)) for n in twice[1213:]] == [
        (n.cpu_milli, len(n.gpus)) for n in nodes
    ]
    # spread, not in blocks: the first 100 nodes hold the common types
    first = Counter(n.gpus[0].model for n in nodes[:100])
    assert first["G2"] >= 40 and first["T4"] >= 25
    assert all(len({g.clique for g in n.gpus}) == 1 for n in nodes)
    assert Counter(n.gpus[0].sharing for n in nodes[:1000]) == {"exclusive": 900, "mps": 100}


def test_openb_queue_keeps_the_stream_without_mig():
    queue = job_queue(2_000, 7)
    openb = openb_queue(queue, 7)
    assert [(g.job_id, g.replicas, life) for g, life in openb] == [
        (g.job_id, g.replicas, life) for g, life in queue
    ]
    assert {g.member.kind for g, _ in openb} == {"whole", "milli", "cpu"}
    for (g, _), (o, _) in zip(queue, openb, strict=True):
        if g.member.kind == "whole":
            assert o.member.cpu_milli == 8_000 * g.member.gpus
            assert o.member.memory_mib == 32_768 * g.member.gpus


def test_openb_mix_run_scales_lifetimes_by_gpus_and_reports_rss():
    report = run(["bestfit", "default"], n_nodes=60, n_jobs=400, mix="openb")
    assert report.mix == "openb" and report.gpus == sum(len(n.gpus) for n in openb_nodes(60))
    assert report.lifetime_scale == report.gpus / 4000
    assert report.max_rss_mib > 0
    for r in report.results:
        assert r.decisions == 400 and 0 < r.placed <= 400
        assert sum(r.reasons.values()) == 400 - r.placed
    with pytest.raises(ValueError, match="unknown node mix 'a100'"):
        run(["bestfit"], n_nodes=10, mix="a100")


def test_cli_unknown_mix_is_one_line_exit_2():
    res = CliRunner().invoke(bench_app, ["fleet", "--mix", "a100", "--nodes", "10"])
    assert res.exit_code == 2
    assert res.output.strip() == "error: --mix a100: unknown node mix; known: h100, openb"
