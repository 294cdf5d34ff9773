"""Placement scenarios through the simulator (issue 3): given a cluster and a timeline, when
it runs, then members land where the topology and isolation rules say."""

from gpuledger.replay.scenario import from_document
from gpuledger.replay.simulator import simulate


def run(nodes, jobs, tenants=({"name": "a", "guaranteed": 64}, {"name": "b", "guaranteed": 64})):
    """Jobs are submitted one second apart, in the order given."""
    doc = {
        "cluster": {"nodes": nodes},
        "tenants": list(tenants),
        "timeline": [{"at": i, "submit": j} for i, j in enumerate(jobs)],
    }
    sim = simulate(from_document(doc), until_ms=10_000)
    return sim.ledger


def gpus_of(ledger, job_id):
    (at, members), *_ = ledger.jobs[job_id].placements
    return members


def test_a_tp8_member_lands_inside_one_nvlink_clique():
    ledger = run(
        [{"name": "split", "gpus": 8, "cliques": 2}, {"name": "whole", "gpus": 8, "cliques": 1}],
        [{"id": "tp8", "tenant": "a", "gpus": 8, "duration": 60}],
    )
    (member,) = gpus_of(ledger, "tp8")
    node = ledger.nodes[member.node].info
    assert member.node == "whole"
    assert len({node.gpus[i].clique for i in member.gpus}) == 1


def test_a_16_gpu_gang_on_12_free_gpus_binds_nothing_and_says_why():
    ledger = run(
        [{"name_prefix": "n", "count": 2, "gpus": 8}],
        [
            {"id": "small", "tenant": "a", "gpus": 4, "duration": 600},
            {"id": "gang", "tenant": "b", "gpus": 4, "replicas": 4, "duration": 60},
        ],
    )
    gang = ledger.jobs["gang"]
    assert gang.state == "pending" and gang.placements == []
    assert gang.reason == "GangIncomplete"
    assert "3 of 4 members fit" in gang.message
    assert ledger.fleet.free_gpus() == 12


def test_a_mig_request_lands_on_a_free_slice_of_a_mig_gpu():
    ledger = run(
        [
            {"name": "plain", "gpus": 2},
            {
                "name": "mig",
                "gpus": 1,
                "model": "A100-40GB",
                "gpu_memory": "40Gi",
                "sharing": "mig",
            },
        ],
        [
            {"id": "m1", "tenant": "a", "mig": "3g.20gb", "duration": 60},
            {"id": "m2", "tenant": "a", "mig": "3g.20gb", "duration": 60},
        ],
    )
    starts = sorted(gpus_of(ledger, j)[0].mig_start for j in ("m1", "m2"))
    assert {gpus_of(ledger, j)[0].node for j in ("m1", "m2")} == {"mig"}
    assert starts == [0, 4]  # two 3g instances: memory slices {0,4}, no overlap


def test_two_tenants_fractional_jobs_never_share_an_mps_gpu():
    ledger = run(
        [{"name": "shared", "gpus": 2, "sharing": "mps"}],
        [
            {"id": "a1", "tenant": "a", "gpu": "300m", "duration": 60},
            {"id": "b1", "tenant": "b", "gpu": "300m", "duration": 60},
            {"id": "a2", "tenant": "a", "gpu": "300m", "duration": 60},
            {"id": "b2", "tenant": "b", "gpu": "300m", "duration": 60},
            {"id": "c1", "tenant": "b", "gpu": "300m", "duration": 60, "class": "train"},
        ],
    )
    by_gpu: dict[int, set[str]] = {}
    for job in ledger.jobs.values():
        if job.placements:
            (m,) = job.placements[0][1]
            by_gpu.setdefault(m.gpus[0], set()).add(job.tenant)
    assert all(len(tenants) == 1 for tenants in by_gpu.values()), by_gpu
    assert len(by_gpu) == 2
