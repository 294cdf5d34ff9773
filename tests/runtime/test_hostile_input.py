"""Issue 30: no input gives a 500 or a traceback. The gateway's parser answers a hostile body
with a 400 and a reason (over HTTP too), `check` and `submit` answer with one `error:` line and
exit 2, and documented upper bounds (docs/inputs.md) refuse a node of a billion GPUs before
anything proportional to it is built. Fuzzed with hypothesis (few examples by default; the
`ci` profile of tests/conftest.py derandomizes them)."""

from __future__ import annotations

import json

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from gpuledger.services.cli.main import app
from gpuledger.services.domain.inputs.schema import MAX_GPUS_PER_NODE, MAX_NODES
from gpuledger.services.runtime.documents import MAX_DEPTH, DocumentError, load_document
from gpuledger.services.runtime.gateway import Gateway, HttpError, create_app, job_event, parse_body
from gpuledger.services.runtime.gateway_tokens import Tokens, add_token

FEW = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

DEEP_JSON = b'{"a":' * 5000 + b"1" + b"}" * 5000
DEEP_YAML = b"x: " + b"[" * 5000 + b"]" * 5000
HOSTILE = {
    "deep JSON": (DEEP_JSON, "nested more than 64 levels deep"),
    "deep YAML": (DEEP_YAML, "nested more than 64 levels deep"),
    "aliases": (b"a: &a [1]\nb: *a\n", "aliases are not allowed"),
    "binary": (b"\xff\xfe\x00\x01", "not UTF-8"),
    "huge duration": (
        b'{"id":"j","tenant":"t","gpus":1,"duration":"100000000000000000000000h"}',
        "duration: '100000000000000000000000h' is above the upper bound",
    ),
    "huge duration_s": (
        b'{"id":"j","tenant":"t","gpus":1,"duration_s":99999999999999999999999999999}',
        "duration_s: must be <= 316224000",
    ),
    "infinite duration": (b"id: j\ntenant: t\ngpus: 1\nduration: .inf\n", "duration: must be <="),
    "huge GPUs": (b'{"id":"j","tenant":"t","gpus":10000000000}', "gpus: must be <= 1024"),
    "huge replicas": (
        b'{"id":"j","tenant":"t","gpus":1,"replicas":1e30}',
        "replicas: expected `int`, got `float`",
    ),
    "huge memory": (
        b'{"id":"j","tenant":"t","gpus":1,"memory":"99999999999999999999Ti"}',
        "memory: '99999999999999999999Ti' is above the upper bound",
    ),
    "NaN cpu": (b"id: j\ntenant: t\ngpus: 1\ncpu: .nan\n", "cpu: must be >= 0"),
}


def parsed(body: bytes):
    return job_event(parse_body(body), "t")


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_body_is_a_400_with_its_reason(name):
    body, reason = HOSTILE[name]
    with pytest.raises(HttpError) as err:
        parsed(body)
    assert err.value.status == 400 and err.value.reason == "InvalidSpec"
    assert reason in err.value.message, err.value.message


async def test_over_http_the_gateway_answers_400_never_500(tmp_path):
    path = tmp_path / "tokens.yaml"
    token = add_token(path, "t")
    gateway = Gateway(Tokens(path), bus=object())  # never reached: every body here is refused
    transport = httpx.ASGITransport(app=create_app(gateway), raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as http:
        for name, (body, reason) in HOSTILE.items():
            r = await http.post(
                "/v1/tenants/t/jobs", content=body, headers={"Authorization": f"Bearer {token}"}
            )
            assert r.status_code == 400, (name, r.text)
            assert r.json()["reason"] == "InvalidSpec" and reason in r.json()["message"], name


@FEW
@given(st.binary(max_size=2000))
def test_any_bytes_are_a_job_or_a_4xx(body):
    try:
        parsed(body)
    except HttpError as err:
        assert err.status in (400, 403) and err.message


_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=30)
    | st.sampled_from(["2h", "500m", "36Gi", "1e400", "99999999999999999999h", "-1", "a.b*c"])
)
_KEYS = st.sampled_from(
    ["id", "tenant", "gpus", "gpu", "replicas", "min_members", "duration", "duration_s", "cpu",
     "memory", "checkpoint", "interval", "command", "kind", "spread", "models", "x"]
)  # fmt: skip
_DOCS = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_KEYS, inner, max_size=6),
    max_leaves=30,
)


@FEW
@given(st.dictionaries(_KEYS, _DOCS, max_size=10))
def test_any_job_document_is_a_job_or_a_4xx(doc):
    doc.setdefault("tenant", "t")
    try:
        parsed(json.dumps(doc, allow_nan=True).encode())
    except HttpError as err:
        assert err.status in (400, 403) and err.message


def check(tmp_path, text: str | bytes):
    path = tmp_path / "doc.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return CliRunner().invoke(app, ["check", str(path)]), path


def one_error_line(result, path) -> str:
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert lines and all(ln.startswith(f"error: {path}: ") for ln in lines), lines
    return lines[0]


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_check_answers_a_hostile_file_with_one_line(tmp_path, name):
    body, reason = HOSTILE[name]
    if name == "aliases":  # a file may use anchors; only request bodies refuse them
        return
    result, path = check(tmp_path, body)
    line = one_error_line(result, path)
    if name != "binary":
        assert reason in line, line


def test_a_config_node_of_a_billion_gpus_is_refused_by_its_bound(tmp_path):
    doc = {"cluster": {"nodes": [{"name": "n1", "gpus": 1_000_000_000}]}}
    result, path = check(tmp_path, json.dumps(doc))
    line = one_error_line(result, path)
    assert f"cluster.nodes[0].gpus: must be <= {MAX_GPUS_PER_NODE}" in line
    doc = {"cluster": {"nodes": [{"name_prefix": f"p{i}-", "count": 90_000} for i in range(5)]}}
    line = one_error_line(*check(tmp_path, json.dumps(doc)))
    assert f"at most {MAX_NODES:,} nodes" in line


def test_a_file_of_aliases_that_would_expand_without_end_is_refused(tmp_path):
    laughs = "a: &a [1,1,1,1,1,1,1,1,1,1]\n" + "".join(
        f"{n}: &{n} [{', '.join([f'*{p}'] * 10)}]\n"
        for p, n in zip("abcdefg", "bcdefgh", strict=True)
    )
    line = one_error_line(*check(tmp_path, laughs))
    assert "expands to more than" in line
    with pytest.raises(DocumentError):
        load_document(laughs)
    assert load_document("base: &b {gpus: 1}\njobs: [*b, *b]\n")["jobs"] == [{"gpus": 1}] * 2


def test_nesting_at_the_bound_is_read(tmp_path):
    assert load_document("[" * MAX_DEPTH + "]" * MAX_DEPTH) is not None
    with pytest.raises(DocumentError, match="nested more than"):
        load_document("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1))


@FEW
@given(doc=st.dictionaries(_KEYS, _DOCS, max_size=10))
def test_check_of_any_job_document_is_ok_or_one_line_per_problem(tmp_path_factory, doc):
    doc.setdefault("tenant", "t")
    result, path = check(tmp_path_factory.mktemp("f"), json.dumps(doc, allow_nan=True))
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    if result.exit_code == 0:
        assert result.output.startswith(f"ok {path}")
    else:
        one_error_line(result, path)


@FEW
@given(text=st.text(max_size=400))
def test_check_of_any_text_is_ok_or_one_line_per_problem(tmp_path_factory, text):
    result, path = check(tmp_path_factory.mktemp("f"), text)
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code in (0, 2), result.output
    if result.exit_code == 2:
        one_error_line(result, path)


def test_submit_answers_a_hostile_file_with_one_line_and_exit_2(tmp_path):
    for name, (body, _) in HOSTILE.items():
        if name == "aliases":
            continue
        path = tmp_path / "job.yaml"
        path.write_bytes(body)
        result = CliRunner().invoke(app, ["submit", str(path), "--nats-url", "nats://127.0.0.1:1"])
        assert result.exit_code == 2, (name, result.output)
        assert "Traceback" not in result.output
        lines = [ln for ln in result.output.splitlines() if ln.strip()]
        assert len(lines) == 1 and str(path) in lines[0], (name, lines)
