"""A configuration change that fails validation at runtime is refused and the configuration
in force stays: given a running control plane on a real nats-server, when a raw
PolicyConfigured with `placement_policy: bestfitt` is published (as `nats pub` could), then
it is dead-lettered with its reason and the scheduler goes on placing jobs."""

from __future__ import annotations

from gpuledger import events
from gpuledger.services.domain.inputs.configfile import config_events, node_infos
from gpuledger.services.domain.tooling.stamp import submission
from gpuledger.services.roles import build
from gpuledger.services.runtime.bus import Bus
from gpuledger.services.runtime.host import Host
from tests.runtime.test_host import of_type, running, settle, stream_events

DOC = {
    "cluster": {"nodes": [{"name": "n1", "gpus": 8, "model": "H100-80GB"}]},
    "tenants": [{"name": "a", "guaranteed": 8}],
    "policy": {"placement_policy": "bestfit"},
}
BAD_POLICY = b'{"type":"PolicyConfigured.v1","event_id":"bad-policy","policy":{"placement_policy":"bestfitt"}}'


def job(job_id: str, at_ms: int) -> events.JobSubmitted:
    return submission(
        events.JobSpec(job_id=job_id, tenant="a", resources=events.Resources(gpus=2)),
        now_ms=at_ms,
        producer="test",
    )


async def test_a_raw_bad_policy_is_dead_lettered_and_the_scheduler_keeps_deciding(bus: Bus) -> None:
    for e in config_events(DOC):
        await bus.publish(e)
    for n in node_infos(DOC):
        await bus.publish(
            events.NodeRegistered(
                node=n, simulated=True, event_id=f"reg-{n.name}", producer=f"node-agent/{n.name}"
            )
        )
    hosts = [Host(build(role), bus) for role in ("admission", "quota", "scheduler")]
    async with running(hosts[0]), running(hosts[1]), running(hosts[2]):
        await bus.publish(job("before", 1))
        await settle(*hosts, timeout=15)
        bad_seq = await bus.publish_raw("gl.admin.PolicyConfigured", BAD_POLICY)
        await bus.publish(job("after", 2))
        await settle(*hosts, timeout=15)
        scheduler = hosts[2]
        assert scheduler.state.config.policy.placement_policy == "bestfit", (
            "the policy in force stays"
        )
        assert scheduler.stats.decide_errors == 0

    evs = await stream_events(bus)
    dead = [d for d in of_type(evs, events.DeadLettered) if d.stream_seq == bad_seq]
    assert dead and "placement_policy" in dead[0].reason and "bestfitt" in dead[0].reason
    placed = sorted(p.job_id for p in of_type(evs, events.GangPlaced))
    assert placed == ["after", "before"]
