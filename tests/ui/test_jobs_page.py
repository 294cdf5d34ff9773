"""Issue 32: the dashboard's Jobs page over HTTP (no browser).

Given the hand-built scenario's projection (six jobs of org/a and org/b), when /jobs is asked
with filters and a sort, then it lists exactly the matching jobs in that order, each linking to
its job page; a tenant view lists its own jobs only; a bad parameter is a 400 naming it; and
every value is escaped by the template (Jinja2, autoescape on).
"""

from __future__ import annotations

import re
import shutil
import warnings

import duckdb
import pytest

from gpuledger.projections.store import rebuild
from gpuledger.projections.ui.app import create_app
from tests.projections import scenario

with warnings.catch_warnings():  # Starlette prefers `httpx2`; httpx (a dev dependency) works
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    path = tmp_path_factory.mktemp("jobspage") / "projection.duckdb"
    rebuild(scenario.build(), path)
    return path


def get(db, path: str):
    return TestClient(create_app(db), base_url="http://127.0.0.1").get(path)


def listed(text: str) -> list[str]:
    """The job ids of the table, top to bottom (from their links)."""
    body = text.split('<table class="jobs"', 1)[1]
    return re.findall(r'<a class="job" href="/jobs/([^"]+)">', body)


def test_all_jobs_newest_first_each_linking_to_its_page(db):
    r = get(db, "/jobs")
    assert r.status_code == 200
    # newest submission first; equal times (small-a, mig-a) by id in the same direction
    assert listed(r.text) == ["big-b", "infer-a", "bad-a", "small-a", "mig-a", "train-b"]
    assert '<b id="jobs-count">6</b> jobs' in r.text
    assert '<a href="/jobs" class=active>Jobs</a>' in r.text  # in the navigation
    assert "script-src 'self'" in r.headers["content-security-policy"]


@pytest.mark.parametrize(
    "query, expected",
    [
        ("tenant=org/b", ["big-b", "train-b"]),
        ("class=inference", ["infer-a"]),
        ("state=pending", ["big-b", "train-b"]),
        ("tenant=org/a&state=running", ["infer-a", "mig-a"]),
        ("state=cancelled", []),
    ],
)
def test_filters_by_tenant_class_and_state(db, query, expected):
    r = get(db, "/jobs?" + query)
    assert r.status_code == 200
    assert listed(r.text) == expected
    assert f'<b id="jobs-count">{len(expected)}</b>' in r.text
    if not expected:
        assert '<td colspan="7" class="muted">none</td>' in r.text


def test_sorting_by_a_column_and_flipping_it(db):
    r = get(db, "/jobs?sort=job&dir=asc")
    assert listed(r.text) == sorted(listed(r.text)) and len(listed(r.text)) == 6
    # the sorted column's header flips the direction, the others sort by themselves
    assert 'aria-sort="ascending"' in r.text
    assert 'href="/jobs?sort=job&amp;dir=desc"' in r.text
    assert 'href="/jobs?sort=tenant&amp;dir=asc"' in r.text
    r = get(db, "/jobs?sort=job&dir=desc")
    assert listed(r.text) == sorted(listed(r.text), reverse=True)
    r = get(db, "/jobs?sort=state&dir=asc&tenant=org/a")  # completed, rejected, running
    assert listed(r.text) == ["small-a", "bad-a", "infer-a", "mig-a"]
    # filters stay in the links
    assert 'href="/jobs?tenant=org%2Fa&amp;sort=job&amp;dir=asc"' in r.text


def test_a_bad_parameter_is_a_400_that_names_it(db):
    for query, word in [("sort=priority", "sort"), ("dir=up", "dir"), ("state=lost", "state")]:
        r = get(db, "/jobs?" + query)
        assert r.status_code == 400, query
        assert f"{word}: expected" in r.text


def test_a_tenant_view_lists_its_own_jobs_and_offers_no_tenant_filter(db):
    app = create_app(db, tenant_header="X-Tenant")
    c = TestClient(app, base_url="http://127.0.0.1")
    r = c.get("/jobs", headers={"X-Tenant": "org/b"})
    assert r.status_code == 200
    assert listed(r.text) == ["big-b", "train-b"]
    assert 'name="tenant"' not in r.text
    r = c.get("/jobs?tenant=org/a", headers={"X-Tenant": "org/b"})  # not a way out of the view
    assert listed(r.text) == []


def test_every_value_is_escaped_by_the_template(db, tmp_path):
    evil = tmp_path / "projection.duckdb"
    shutil.copy(db, evil)
    con = duckdb.connect(str(evil))
    con.execute(
        "UPDATE jobs SET job_id = 'x<img>', reason = '<script>alert(1)</script>',"
        " message = '\"><b>' WHERE job_id = 'big-b'"
    )
    con.close()
    r = get(evil, "/jobs?state=pending")
    main = r.text.split("<main", 1)[1]
    assert "<script>alert" not in main and "<img>" not in main and '"><b>' not in main
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in main
    assert 'href="/jobs/x%3Cimg%3E">x&lt;img&gt;</a>' in main
