"""The UI shows a waiting job's preemption outlook exactly as `gpuledger why` does (issue 29):
the excluded victims counted by reason (`excluded: 4 WithinGuarantee`), on the job page and in
the Queue page, instead of "preemption would help: -" / "unknown"."""

from __future__ import annotations

import html
import re
import warnings

import typer
from typer.testing import CliRunner

from gpuledger.projections.store import rebuild
from gpuledger.projections.ui.app import create_app
from gpuledger.replay.scenario import from_document
from gpuledger.replay.simulator import simulate
from gpuledger.services.cli.audit import register

with warnings.catch_warnings():  # Starlette prefers `httpx2`; httpx (a dev dependency) works
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

app = typer.Typer()
register(app)

# tenant b runs 4 one-GPU jobs within its guarantee of 4; a's interactive job outranks them
# but may not take a tenant's guarantee: preemption is declined, every candidate excluded
SCENARIO = {
    "cluster": {"nodes": [{"name": "n1", "gpus": 4}]},
    "tenants": [{"name": "a", "guaranteed": 0}, {"name": "b", "guaranteed": 4}],
    "until": "20m",
    "timeline": [
        *[
            {"at": 0, "submit": {"id": f"b{i}", "tenant": "b", "class": "train", "gpus": 1,
                                 "duration": "1h"}}
            for i in range(4)
        ],
        {"at": "10m", "submit": {"id": "a1", "tenant": "a", "class": "interactive", "gpus": 1,
                                 "duration": "1h"}},
    ],
}  # fmt: skip


def text(page: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "\n", page))


def test_the_job_and_queue_pages_say_what_why_says_about_preemption(tmp_path):
    db = tmp_path / "projection.duckdb"
    rebuild(simulate(from_document(SCENARIO)).log, db)
    why = CliRunner().invoke(app, ["why", "a1", "--db", str(db)])
    assert why.exit_code == 0, why.output
    outlook = [line for line in why.output.splitlines() if line.startswith("Preemption")]
    assert outlook == [
        "Preemption declined: NoVictims: no eligible victims; excluded: 4 WithinGuarantee"
    ]
    client = TestClient(create_app(db), base_url="http://127.0.0.1")
    job_page = text(client.get("/jobs/a1").text)
    queue_page = text(client.get("/queue").text)
    for page in (job_page, queue_page):
        assert outlook[0] in page.splitlines()
        assert "unknown" not in page and "preemption would help" not in page
