"""An integer longer than Python converts (4,300 digits) is bad input like any other: the
gateway answers 400 with the reason, `check` and `submit` print one line and exit 2 (issue 44,
item 8)."""

from __future__ import annotations

import httpx
import pytest

from gpuledger.services.runtime.gateway import Gateway, create_app
from gpuledger.services.runtime.gateway_tokens import Tokens, add_token
from tests.integration.cluster import cli

DIGITS = "9" * 5000
BODIES = {
    "JSON": f'{{"id":"j","tenant":"t","gpus":{DIGITS}}}'.encode(),
    "YAML": f"id: j\ntenant: t\ngpus: {DIGITS}\n".encode(),
}


@pytest.mark.parametrize("kind", sorted(BODIES))
async def test_the_gateway_answers_400_for_a_5000_digit_integer(tmp_path, kind):
    path = tmp_path / "tokens.yaml"
    token = add_token(path, "t")
    gateway = Gateway(Tokens(path), bus=object())  # never reached: the body is refused first
    transport = httpx.ASGITransport(app=create_app(gateway), raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as http:
        r = await http.post(
            "/v1/tenants/t/jobs", content=BODIES[kind], headers={"Authorization": f"Bearer {token}"}
        )
    assert r.status_code == 400, r.text
    assert r.json()["reason"] == "InvalidSpec"
    assert "a number of more than 4,300 digits" in r.json()["message"]


def test_check_answers_a_5000_digit_integer_with_one_line_and_exit_2(tmp_path):
    job = tmp_path / "job.yaml"
    job.write_bytes(BODIES["YAML"])
    out = cli("check", str(job))
    assert out.returncode == 2, out.stderr
    assert len(out.stderr.splitlines()) == 1 and "more than 4,300 digits" in out.stderr
