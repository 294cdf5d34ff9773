"""Scaling a service live (issue 17): a real nats-server (authentication on), every service
as its own process with its own identity, simulated node agents. A tenant's CI identity runs
`gpuledger scale` and the new replicas are placed; training is evicted with checkpoint for
them (seed 003: "scale inference to 6 replicas, training is evicted")."""

from __future__ import annotations

import pytest
import yaml

from gpuledger import events as ev
from gpuledger.replay import live_player
from gpuledger.replay.scenario import load
from tests.integration.cluster import EXAMPLES, Processes, cli
from tests.waiting import eventually_async

pytestmark = pytest.mark.integration
SCALE = EXAMPLES / "inference-scale.yaml"


async def log_until(bus, done, procs, timeout_s: float = 40.0):

    async def folded():
        ledger, log = await live_player.fold(bus)
        return (ledger, log) if done(ledger, log) else None

    try:
        return await eventually_async(folded, timeout_s, "the log to hold it", interval_s=0.2)
    except AssertionError as exc:
        raise AssertionError(procs.logs()) from exc


def running(ledger, prefix):
    return sorted(
        j.job_id
        for j in ledger.jobs.values()
        if j.job_id.startswith(prefix) and j.state == "running"
    )


async def test_scaling_a_service_from_the_cli_places_its_replicas_and_evicts_training(
    server, bus, tmp_path
):
    doc = yaml.safe_load(SCALE.read_text())
    doc["policy"] = {**doc["policy"], "min_runtime_s": 0}  # live, training is seconds old
    config = tmp_path / "inference-scale.yaml"
    config.write_text(yaml.safe_dump(doc))
    await live_player.publish_config(bus, load(config))
    procs = Processes(server, config, tmp_path)
    try:
        procs.start_all(["gpu-1", "gpu-2"])
        jobs = [e["submit"] for e in doc["timeline"] if "submit" in e]
        for i, job in enumerate(jobs):
            path = tmp_path / f"job{i}.yaml"
            path.write_text(
                yaml.safe_dump(
                    {**job, "checkpoint": {"interval": "10m", "save": "1s"}}
                    if "resnet" in job["id"]
                    else job
                )
            )
            r = cli("submit", str(path), "--nats-url", server.url)
            assert r.returncode == 0, r.stderr
        svc = "bert-sentiment-inference"
        await log_until(
            bus,
            lambda led, log: len(running(led, svc + "~")) == 3 and len(running(led, "resnet")) == 5,
            procs,
        )

        server.add_principals("ci:ml-inference")
        r = cli(
            "scale",
            svc,
            "--replicas",
            "6",
            "--nats-url",
            server.url,
            "--creds",
            str(server.creds("ci:ml-inference")),
        )
        assert r.returncode == 0, r.stderr
        assert "scale of bert-sentiment-inference to 6 replicas requested" in r.stdout
        ledger, log = await log_until(
            bus, lambda led, log: len(running(led, svc + "~")) == 6, procs
        )
        assert running(ledger, svc + "~") == [f"{svc}~{i}" for i in range(6)]
        evicted = [e for _, _, e in log if isinstance(e, ev.GangEvicted)]
        assert len(evicted) == 3 and all(
            e.job_id.startswith("resnet") and e.checkpointed for e in evicted
        )
        assert len(running(ledger, "resnet")) == 2

        # another tenant's CI identity may not scale it: the server refuses the publish
        server.add_principals("ci:ml-training")
        r = cli(
            "scale",
            svc,
            "--replicas",
            "1",
            "--tenant",
            "ml-inference",
            "--nats-url",
            server.url,
            "--creds",
            str(server.creds("ci:ml-training")),
        )
        assert r.returncode != 0
    finally:
        procs.stop()
