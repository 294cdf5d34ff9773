"""`gpuledger export --format parquet DIR` from a real nats-server (JetStream, authentication
on): a second export asks the stream only for what is above the high-water mark."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuledger.replay import parquet
from gpuledger.replay.logio import encode_lines
from gpuledger.replay.scenario import load
from gpuledger.replay.simulator import simulate
from gpuledger.services.cli.main import app
from gpuledger.services.runtime.nats_server import EmbeddedNats
from tests import natsauth
from tests.natsauth import as_admin

pytestmark = pytest.mark.integration

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_a_second_live_export_appends_only_the_new_messages(tmp_path, monkeypatch):
    messages = simulate(load(EXAMPLES / "demo.yaml")).log
    out = tmp_path / "history"
    with EmbeddedNats(tmp_path / "js") as server:
        as_admin(monkeypatch, server)
        asyncio.run(natsauth.publish_log(server.url, messages[:30]))
        args = ["export", "--format", "parquet", str(out), "--nats-url", server.url, "--no-tables"]
        first = CliRunner().invoke(app, args)
        assert first.exit_code == 0, first.output
        assert "appended 30 events" in first.output
        asyncio.run(natsauth.publish_log(server.url, messages[30:]))
        second = CliRunner().invoke(app, args)
        assert second.exit_code == 0, second.output
        assert "appended 18 events" in second.output and "48 rows in all" in second.output
        stored = asyncio.run(natsauth.stored_log(server.url))
    assert b"".join(encode_lines(parquet.read_history(out))) == b"".join(encode_lines(stored))
