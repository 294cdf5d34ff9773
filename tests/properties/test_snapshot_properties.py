"""Snapshot + tail == full fold, on random scenarios (the generators of
test_pure_decider_properties): the live ledger of a simulation, caches warm, is snapshotted
at a random sequence through the codec the hosts use (services/runtime/snapshots.py), restored,
and the rest of the log folded into it. Then:

- its digest (replay/checking.py's canonical fingerprint) equals the full fold's and the live
  ledger's;
- every service re-deciding from it, at several instants, publishes byte-identical events to
  the same service deciding from the full fold;
- the node agent's fold (`AgentFold`) round-trips the same way;
- taking the snapshot changed nothing in the run (same log as a run without one).
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuledger import events as ev
from gpuledger.replay.checking import digest
from gpuledger.replay.scenario import from_document
from gpuledger.replay.simulator import Simulator, simulate, standard_services
from gpuledger.services.domain.fold.ledger import Ledger
from gpuledger.services.node_agent.decider import AgentDecider
from gpuledger.services.runtime import snapshots
from tests.properties.test_preemption_properties import SETTINGS
from tests.properties.test_pure_decider_properties import disruption, document, job, limits, policy


def manifest_of(
    data: bytes,
    digest_: str,
    raw_bytes: int,
    *,
    seq: int,
    service: str = "scheduler",
    instance: str = "0",
    config_digest: str = "",
) -> snapshots.Manifest:
    """The manifest of a one-chunk snapshot `data` (`raw_bytes` before compression) taken
    at `seq`, in slot a of a stream created at "t"."""
    return snapshots.Manifest(
        format=snapshots.FORMAT,
        schema=snapshots.schema(),
        service=service,
        instance=instance,
        seq=seq,
        stream_first_seq=1,
        stream_created="t",
        config_digest=config_digest,
        raw_bytes=raw_bytes,
        bytes=len(data),
        digest=digest_,
        slot="a",
        chunks=1,
        chunk_bytes=len(data),
        saved_ms=0,
    )


def round_trip(service, state, seq: int):
    """What a host does: `fold_of`, encode, compress, store, then load, check, `from_fold`."""
    fold = service.fold_of(state)
    raw = snapshots.dumps(fold)
    data, digest_ = snapshots.compress(raw)
    manifest = manifest_of(
        data,
        digest_,
        len(raw),
        seq=seq,
        service=service.name,
        instance=service.instance,
        config_digest=snapshots.config_digest(fold),
    )
    manifest = msgspec.json.decode(msgspec.json.encode(manifest), type=snapshots.Manifest)
    snapshots.check(
        manifest,
        name=service.name,
        instance=service.instance,
        first_seq=1,
        last_seq=seq,
        created="t",
    )
    restored = snapshots.loads(data, manifest)
    snapshots.check_state(manifest, restored)
    return service.from_fold(restored, service.initial_state())


def wire(out) -> list[bytes]:
    return [ev.encode(e) for e in out]


@SETTINGS
@given(
    st.lists(job, min_size=1, max_size=12),
    policy,
    disruption,
    limits,
    st.floats(0, 1),
    st.lists(st.integers(0, 4 * 3600 * 1000), min_size=1, max_size=3),
)
def test_snapshot_plus_tail_is_the_full_fold_and_decides_alike(
    jobs, pol, events_, lim, where, instants
):
    scenario = from_document(document(jobs, pol, events_, lim))
    plain = simulate(scenario).log
    cut = max(1, int(where * len(plain)))
    taken: dict = {}
    sim = Simulator(standard_services(scenario.nodes))

    def at_event(seq, subject, event):
        if seq == cut:  # the live ledger, caches warm from the decides so far
            taken["state"] = round_trip(sim.services[-1], sim.ledger, seq)

    sim.on_event = at_event
    for event in scenario.config:
        sim.publish(event)
    sim.schedule(scenario.inputs)
    sim.run()
    assert sim.log == plain  # snapshotting changed nothing

    restored: Ledger = taken["state"]
    assert restored is not sim.ledger and restored.last_seq == cut
    for seq, _, e in sim.log[cut:]:
        restored.apply(seq, e)
    full = Ledger()
    for seq, _, e in sim.log:
        full.apply(seq, e)
    assert digest(restored) == digest(full) == digest(sim.ledger)
    for now_ms in [sim.now_ms, *instants]:
        for a, b in zip(
            standard_services(scenario.nodes), standard_services(scenario.nodes), strict=True
        ):
            assert wire(a.decide(restored, now_ms)) == wire(b.decide(full, now_ms)), a.producer


@SETTINGS
@given(st.lists(job, min_size=1, max_size=12), policy, disruption, limits, st.floats(0, 1))
def test_the_node_agents_fold_round_trips(jobs, pol, events_, lim, where):
    log = simulate(from_document(document(jobs, pol, events_, lim))).log
    cut = max(1, int(where * len(log)))
    agent = AgentDecider("n1")
    state = agent.initial_state()
    for seq, _, e in log[:cut]:
        agent.evolve(state, seq, e)
    restored = round_trip(agent, state, cut)
    full = agent.initial_state()
    for seq, _, e in log:
        agent.evolve(full, seq, e)
    for seq, _, e in log[cut:]:
        agent.evolve(restored, seq, e)
    assert digest(restored.ledger) == digest(full.ledger)
    assert (restored.ended_ms, restored.cancelled_ms, restored.last_metrics_ms) == (
        full.ended_ms,
        full.cancelled_ms,
        full.last_metrics_ms,
    )
    assert wire(agent.decide(restored, 10**7)) == wire(agent.decide(full, 10**7))


def test_an_incompatible_or_damaged_snapshot_is_unusable() -> None:
    import pytest

    ledger = Ledger()
    raw = snapshots.dumps(ledger)
    data, digest_ = snapshots.compress(raw)
    good = manifest_of(data, digest_, len(raw), seq=5, config_digest=ledger.config.digest)
    ok = {"name": "scheduler", "instance": "0", "first_seq": 1, "last_seq": 9, "created": "t"}
    snapshots.check(good, **ok)
    bad = [
        (msgspec.structs.replace(good, schema="0-x"), ok, "schema"),
        (good, {**ok, "last_seq": 4}, "beyond the stream's last seq"),
        (good, {**ok, "first_seq": 2}, "first seq"),
        (good, {**ok, "created": "u"}, "created"),
        (good, {**ok, "name": "quota"}, "written by"),
    ]
    for manifest, where, why in bad:
        with pytest.raises(snapshots.Unusable, match=why):
            snapshots.check(manifest, **where)
    with pytest.raises(snapshots.Unusable, match="truncated"):
        snapshots.loads(data[:-1], good)
    with pytest.raises(snapshots.Unusable, match="digest"):
        snapshots.loads(data[::-1], good)
    junk, junk_digest = snapshots.compress(b"not a snapshot")
    with pytest.raises(snapshots.Unusable, match="does not decode"):
        snapshots.loads(junk, msgspec.structs.replace(good, bytes=len(junk), digest=junk_digest))
    with pytest.raises(snapshots.Unusable, match="configuration digest"):
        snapshots.check_state(msgspec.structs.replace(good, config_digest="other"), ledger)


def test_the_forked_encoding_is_the_inline_one() -> None:
    log = _small_log(SMALL_A)
    ledger = folded(log)
    encoding = snapshots.Encoding(ledger)
    late = ev.JobSubmitted(
        job=ev.JobSpec(job_id="late", tenant="a", resources=ev.Resources(gpus=1))
    )
    ledger.apply(len(log) + 1, late)  # what changes after the fork is not in the snapshot
    raw_bytes, data, digest_ = encoding.result()
    manifest = manifest_of(data, digest_, raw_bytes, seq=len(log))
    restored = snapshots.loads(data, manifest)
    assert digest(restored) == digest(folded(log)) != digest(ledger)


def test_a_fold_of_another_kind_does_not_fit() -> None:
    import pytest

    from gpuledger.services.scheduler.decider import Scheduler

    agent = AgentDecider("n1")
    with pytest.raises(TypeError):
        Scheduler().from_fold(agent.fold_of(agent.initial_state()), Ledger())
    state = agent.initial_state()
    with pytest.raises(TypeError):
        agent.from_fold(Ledger(), state)
    assert state.ledger.last_seq == 0 and state.ended_ms == {}  # unchanged


SMALL_A = {
    "tenant": "a",
    "class": "train",
    "shape": {"gpus": 2, "replicas": 2},
    "duration_s": 60,
    "at_s": 0,
}
SMALL_B = {"tenant": "b", "class": "train", "shape": {"gpus": 1, "replicas": 1}}
SMALL_B |= {"duration_s": 30, "at_s": 5}
SMALL_POLICY = {
    "preemption_scope": "tenant",
    "min_runtime_s": 0,
    "reservation_after_s": 0,
    "placement_policy": "default",
    "default_grace_s": 30,
}


def _small_log(*jobs: dict) -> list:
    """The simulated log of `jobs` (property-test job dicts) under SMALL_POLICY."""
    return simulate(from_document(document(list(jobs), SMALL_POLICY, [], (None, None)))).log


def folded(log) -> Ledger:
    """A ledger folded from every entry of `log`."""
    ledger = Ledger()
    for seq, _, e in log:
        ledger.apply(seq, e)
    return ledger


def _small_ledger() -> Ledger:
    return folded(_small_log(SMALL_A, SMALL_B))


def _restore(raw: bytes):
    data, digest_ = snapshots.compress(raw)
    manifest = manifest_of(data, digest_, len(raw), seq=1)
    return snapshots.loads(data, manifest)


def test_the_codec_keeps_what_is_shared_shared_and_every_attribute() -> None:
    ledger = _small_ledger()
    job_id = next(iter(ledger.jobs))
    record, alloc = ledger.jobs[job_id], next(iter(ledger.allocations.values()))
    fold = (ledger, record, alloc, record.spec)  # records referenced twice: restored once
    restored, again, alloc_again, spec = _restore(snapshots.dumps(fold))
    assert digest(restored) == digest(ledger)
    assert again is restored.jobs[job_id]
    assert spec == again.spec and again.spec is spec  # shared structs stay shared
    assert alloc_again is restored.allocations[alloc.allocation_id]
    assert list(restored.jobs) == list(ledger.jobs) and vars(again) == vars(record)
    assert type(again.state) is type(record.state) and again.placements == record.placements

    record.stray = 1  # an attribute beyond the record's fields is kept too
    assert _restore(snapshots.dumps(ledger)).jobs[job_id].stray == 1


def test_objects_in_dict_keys_and_values_keep_their_identity() -> None:
    key, value = ev.Resources(gpus=1), [ev.Resources(gpus=2)]
    restored, key_again, value_again = snapshots._decode(
        snapshots.dumps(({key: value}, key, value))
    )
    assert list(restored) == [key] and next(iter(restored)) is key_again
    assert restored[key_again] is value_again and value_again == value


class _Runs:
    """What a pickle payload would run on load."""

    def __reduce__(self):
        return (exec, ("import pathlib; pathlib.Path(__import__('os').environ['RAN']).touch()",))


def test_a_snapshot_that_names_code_is_refused_and_nothing_runs(tmp_path, monkeypatch) -> None:
    import pickle

    ran = tmp_path / "ran"
    monkeypatch.setenv("RAN", str(ran))
    # a pickle (what snapshots were): not a graph, refused, not run
    with pytest.raises(snapshots.Unusable, match="does not decode"):
        _restore(pickle.dumps(_Runs()))
    # a graph naming a class that is not a data class of the fold: refused by name
    for name in ("builtins.exec", "os.system", "subprocess.Popen", "tests.x._Runs"):
        raw = msgspec.msgpack.encode((snapshots.GRAPH_VERSION, [name], [6, 0, "a", 1]))
        with pytest.raises(snapshots.Unusable, match="not a snapshot class"):
            _restore(raw)
    # a graph of another codec version: refused
    raw = msgspec.msgpack.encode((snapshots.GRAPH_VERSION + 1, [], None))
    with pytest.raises(snapshots.Unusable, match="graph version"):
        _restore(raw)
    assert not ran.exists()
    source = Path(snapshots.__file__).read_text()
    assert "import pickle" not in source and "pickle.load" not in source


def test_the_restart_bench_tail_is_the_default_snapshot_interval() -> None:
    from gpuledger.replay.bench.restart import DEFAULT_TAIL

    assert DEFAULT_TAIL == snapshots.SnapshotPolicy().every_events


def test_a_large_restored_fold_is_frozen_out_of_the_collectors_passes(monkeypatch) -> None:
    import gc

    raw = snapshots.dumps(_small_ledger())
    frozen = gc.get_freeze_count()
    _restore(raw)  # small: left to the collector
    assert gc.get_freeze_count() == frozen
    monkeypatch.setattr(snapshots, "FREEZE_ABOVE_BYTES", 1)
    try:
        _restore(raw)
        assert gc.get_freeze_count() > frozen
    finally:
        gc.unfreeze()
