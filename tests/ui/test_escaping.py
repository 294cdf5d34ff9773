"""Every page shows hostile names escaped: a job, tenant, node and log file whose names hold
`<script>`, tags and both quotes appear as text, never as markup or a broken-out attribute.

Ids from events are validated (no `>`, spaces or quotes), so the names are written into the
projection file directly, as a damaged or hand-edited file could hold them: this checks the
templates (Jinja2, autoescape on), not the id rules."""

from __future__ import annotations

import json
import shutil
import warnings
from urllib.parse import quote

import duckdb
import pytest

from gpuledger.projections.store import rebuild
from gpuledger.projections.ui.app import create_app
from gpuledger.replay.logio import write_log
from tests.projections import scenario

with warnings.catch_warnings():  # Starlette prefers `httpx2`; httpx (a dev dependency) works
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

EVIL_JOB = "tb<script>alert(1)\"'"  # no `/`: a path segment
EVIL_TENANT = "org/b<img src=x onerror=alert(2)>\"'"
EVIL_NODE = "n2\"><svg onload=alert(3)>'"
EVIL_SHARE = "ma<b>'\""  # mig-a: a MIG slice, seen on the cluster's heat map
RENAMES = {"train-b": EVIL_JOB, "org/b": EVIL_TENANT, "n2": EVIL_NODE, "mig-a": EVIL_SHARE}
RAW = ["<script>alert", "<img src=x", "<svg onload", 'n2"', "org/b<img", "ma<b>", "alert(1)\"'"]
"""Fragments of the names that must never reach a page unescaped."""


def escaped(name: str) -> str:
    """How Jinja2's autoescape writes `name` (markupsafe)."""
    return (
        name.replace("&", "&amp;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace('"', "&#34;")
        .replace("'", "&#39;")
    )


def rename_everywhere(path) -> None:
    """Each of RENAMES in every text and JSON column of every table of the projection."""
    con = duckdb.connect(str(path))
    try:
        columns = con.execute(
            "SELECT c.table_name, c.column_name, c.data_type FROM information_schema.columns c"
            " JOIN information_schema.tables t USING (table_schema, table_name)"
            " WHERE t.table_type = 'BASE TABLE' AND c.data_type IN ('VARCHAR', 'JSON')"
            " AND c.table_name <> 'projection_catalog'"
        ).fetchall()
        for table, column, kind in columns:
            for old, new in RENAMES.items():
                value = json.dumps(new)[1:-1] if kind == "JSON" else new
                con.execute(
                    f'UPDATE "{table}" SET "{column}" = replace("{column}", ?, ?)'
                    f' WHERE contains("{column}", ?)',
                    [old, value, old],
                )
    finally:
        con.close()


@pytest.fixture(scope="module")
def evil(tmp_path_factory):
    d = tmp_path_factory.mktemp("uievil")
    messages = scenario.build()
    rebuild(messages, d / "projection.duckdb")
    rename_everywhere(d / "projection.duckdb")
    (d / "logs").mkdir()
    log_name = "a<script>'\".jsonl"
    write_log(d / "logs" / log_name, messages)
    shutil.copy(d / "logs" / log_name, d / "logs" / "b.jsonl")
    return d


def get(d, path: str, **kw):
    app = create_app(d / "projection.duckdb", whatif_dir=d / "logs", **kw)
    r = TestClient(app, base_url="http://127.0.0.1").get(path)
    assert r.status_code == 200, (path, r.text[-500:])
    return r.text


def assert_escaped(text: str, *names: str) -> None:
    for fragment in RAW:
        assert fragment not in text, fragment
    for name in names:
        assert escaped(name) in text, name


@pytest.mark.parametrize(
    "path, names",
    [
        ("/cluster", [EVIL_NODE, EVIL_SHARE]),  # node rows, GPU tooltips and links
        ("/queue", [EVIL_JOB, EVIL_TENANT]),
        ("/jobs", [EVIL_JOB, EVIL_TENANT]),
        ("/jobs/" + quote(EVIL_JOB, safe=""), [EVIL_JOB, EVIL_TENANT]),
        ("/jobs/infer-a", [EVIL_JOB]),  # named in its life: it preempted the evil job
        ("/tenants", [EVIL_TENANT]),
    ],
)
def test_names_are_shown_escaped_on_every_page(evil, path, names):
    assert_escaped(get(evil, path), *names)


def test_the_job_page_links_a_hostile_job_id_percent_encoded(evil):
    text = get(evil, "/jobs/infer-a")
    href = "/jobs/" + quote(EVIL_JOB, safe="")
    assert f'<a class="job" href="{href}">{escaped(EVIL_JOB)}</a>' in text


def test_a_hostile_tenant_header_is_refused_and_shown_escaped(evil):
    app = create_app(evil / "projection.duckdb", tenant_header="X-Tenant")
    client = TestClient(app, base_url="http://127.0.0.1")
    for path in ("/queue", "/whatif"):
        r = client.get(path, headers={"X-Tenant": "<script>alert(4)</script>"})
        assert r.status_code == 403
        assert "<script>alert(4)" not in r.text and "&lt;script&gt;alert(4)" in r.text


def test_whatif_shows_hostile_log_names_escaped(evil):
    name = "a<script>'\".jsonl"
    text = get(evil, "/whatif?" + "a=" + quote(name) + "&b=b.jsonl")
    assert_escaped(text, name)
