"""Fuzz: random and adversarial payloads thrown at the decode/apply path of every service
(admission, quota, scheduler, preemption, node agent, each in its Host) and at the projector.

Whatever arrives, nothing raises past the dead-letter path: a host folds the message (its
sequence advances) and, when the payload is not an event, holds exactly one DeadLettered with
the reason; the projector records it and still commits (issue 11: "no exception from one event
can stop a service, the projector or export").
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import structlog
import yaml
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from gpuledger import events as ev
from gpuledger.projections.store import Projector
from gpuledger.services.domain.inputs.configfile import config_events, node_infos
from gpuledger.services.domain.inputs.jobfile import job_spec
from gpuledger.services.domain.tooling.stamp import submission
from gpuledger.services.roles import ROLES, build
from gpuledger.services.runtime.bus import Delivery
from gpuledger.services.runtime.host import Host
from gpuledger.services.runtime.logging import configure_logging
from tests.properties.profiles import examples

ROOT = Path(__file__).resolve().parents[2]
DOC = yaml.safe_load((ROOT / "examples" / "demo.yaml").read_text())
GOLDEN = ROOT / "tests" / "fixtures" / "golden"


def _golden() -> list[dict[str, Any]]:
    docs = []
    for f in sorted(GOLDEN.glob("*.json")):
        doc = json.loads(f.read_text())
        ev.decode(f.read_bytes())  # only fixtures of known (or upcastable) versions
        docs.append(doc)
    return docs


GOLDEN_DOCS = _golden()
TAGS = sorted({d["type"] for d in GOLDEN_DOCS})


def _setup_events() -> list[ev.Event]:
    """A configured cluster with registered nodes and one submitted job: the fold goes deep."""
    out = config_events(DOC)
    out += [
        ev.NodeRegistered(
            node=n, simulated=True, event_id=f"reg-{n.name}", producer="node-agent/sim"
        )
        for n in node_infos(DOC)
    ]
    spec = job_spec({"id": "j1", "tenant": "research", "class": "train", "gpus": 8, "replicas": 2})
    out.append(submission(spec, now_ms=1_000, producer="test"))
    return out


SETUP = [ev.encode(e) for e in _setup_events()]

# ------------------------------------------------------------------ payload strategies

DEEP = "__DEEP__"
ADVERSARIAL = st.sampled_from(
    [
        10**30,
        -(10**30),
        2**63,
        2**64 + 1,
        2**53,
        -1,
        0,
        1e308,
        -1e308,
        float("nan"),
        float("inf"),
        "a.b*c >d",
        "",
        "x" * 200_000,
        "\u0000",
        "é" * 1000,
        None,
        True,
        [],
        {},
        [[[[]]]],
        DEEP,
        {"type": "JobSubmitted.v1"},
        "GangPlaced.v1",
    ]
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=30),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)


def _paths(obj: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _paths(v, (*prefix, i))
    return out


def _replace(obj: Any, path: tuple, value: Any) -> Any:
    if not path:
        return value
    obj = obj.copy()
    obj[path[0]] = _replace(obj[path[0]], path[1:], value)
    return obj


def _dump(doc: Any, depth: int) -> bytes:
    data = json.dumps(doc, allow_nan=True).encode()
    return data.replace(json.dumps(DEEP).encode(), b"[" * depth + b"]" * depth)


@st.composite
def mutated_golden(draw: st.DrawFn) -> bytes:
    """A real event of some type with one field (or the whole) replaced by something hostile."""
    doc = draw(st.sampled_from(GOLDEN_DOCS))
    paths = _paths(doc)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(paths))
        if path == ("type",) and draw(st.booleans()):
            continue  # keep the tag most of the time: garbage behind a valid tag
        value = draw(ADVERSARIAL | json_values)
        doc = _replace(doc, path, value)
        paths = _paths(doc)
    return _dump(doc, draw(st.sampled_from([70, 2_000, 50_000])))


@st.composite
def tagged_garbage(draw: st.DrawFn) -> bytes:
    """A valid type tag with random fields."""
    doc = draw(st.dictionaries(st.text(max_size=12), ADVERSARIAL | json_values, max_size=6))
    doc["type"] = draw(st.sampled_from(TAGS))
    return _dump(doc, draw(st.sampled_from([70, 50_000])))


@st.composite
def corrupted_bytes(draw: st.DrawFn) -> bytes:
    """A real event's bytes with bytes flipped, inserted or cut (non-UTF-8 included)."""
    data = bytearray(json.dumps(draw(st.sampled_from(GOLDEN_DOCS))).encode())
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(data)))
        match draw(st.sampled_from(["flip", "insert", "cut"])):
            case "flip" if i < len(data):
                data[i] = draw(st.integers(0, 255))
            case "insert":
                data[i:i] = draw(st.binary(min_size=1, max_size=4))
            case _:
                del data[i:]
    return bytes(data)


deep_raw = st.sampled_from([65, 1_000, 50_000]).map(
    lambda n: b'{"type":"JobSubmitted.v1","x":' + b"[" * n + b"]" * n + b"}"
)
payloads = st.one_of(
    st.binary(max_size=300),
    mutated_golden(),
    tagged_garbage(),
    corrupted_bytes(),
    deep_raw,
    st.binary(min_size=1, max_size=300).map(lambda b: b"\xff" + b),
)

# ------------------------------------------------------------------ targets


def _hosts() -> list[Host]:
    hosts = [Host(build(role, DOC), bus=None) for role in ROLES]  # folding only: no bus needed
    for seq, data in enumerate(SETUP, 1):
        for h in hosts:
            h._apply(Delivery(seq, ev.subject_for(ev.decode(data)), data, 0))
    assert all(h.stats.dead_letters == 0 for h in hosts)
    return hosts


def _is_event(data: bytes) -> bool:
    try:
        ev.decode(data)
    except ev.UndecodableEvent:
        return False
    return True


def _quiet_logs() -> io.StringIO:
    """Real logging configuration (guarded, JSON) into a buffer, so every log call runs."""
    buf = io.StringIO()
    old, sys.stderr = sys.stderr, buf
    try:
        configure_logging()
    finally:
        sys.stderr = old
    return buf


FUZZ = examples(60, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@FUZZ
@given(st.lists(payloads, min_size=1, max_size=4))
def test_no_payload_stops_any_service(batch: list[bytes]) -> None:
    _quiet_logs()
    try:
        hosts = _hosts()
        seq = len(SETUP)
        for data in batch:
            seq += 1
            for h in hosts:
                h._apply(Delivery(seq, "gl.fuzz", data, 0))  # must not raise
                assert h.folded_seq == seq
                if not _is_event(data):
                    dead = h._pending_dead[seq]
                    assert dead.stream_seq == seq
                    assert dead.reason.startswith("UndecodableEvent: ")
                    assert len(dead.reason) > len("UndecodableEvent: ")
    finally:
        structlog.reset_defaults()


@FUZZ
@given(st.lists(payloads, min_size=1, max_size=4))
def test_no_payload_stops_the_projector(batch: list[bytes]) -> None:
    with Projector(":memory:") as pj:
        for seq, data in enumerate(SETUP, 1):
            assert pj.apply_raw(seq, "gl.setup", data)
        seq = len(SETUP)
        for data in batch:
            seq += 1
            assert pj.apply_raw(seq, "gl.fuzz", data)  # recorded, never raises
        assert pj.commit() == seq  # and every row it folded can be written
        con = pj._store().con
        rows = con.execute(
            "SELECT seq, payload->>'error' FROM events WHERE type = 'Undecodable' ORDER BY seq"
        ).fetchall()
    bad = [s for s, data in enumerate(batch, len(SETUP) + 1) if not _is_event(data)]
    assert [s for s, _ in rows] == bad
    assert all(reason for _, reason in rows)
