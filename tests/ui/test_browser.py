"""The dashboard in a real headless browser (Debian's `chromium` driven through
`chromium-driver` by selenium): each page against a projection of the audit scenario
(tests/projections/scenario.py), asserting on what a person sees, and the click from a
pending job to the job that preempted it. One browser for the module."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import threading
from pathlib import Path

import duckdb
import pytest

from gpuledger.projections.store import rebuild
from gpuledger.projections.ui.app import create_app
from gpuledger.replay.logio import write_log
from tests.projections import scenario
from tests.waiting import eventually

ROOT = Path(__file__).resolve().parents[2]

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.common.by import By  # noqa: E402

CHROMEDRIVER = shutil.which("chromedriver")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    not (CHROMEDRIVER and CHROMIUM) and not os.environ.get("CI"),  # in CI a missing browser fails
    reason="needs Debian's chromium and chromium-driver (.ci/run installs them)",
)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serving(app):
    """The app on a loopback port, in a thread; yields its base URL."""
    import uvicorn

    port = _port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    )
    t = threading.Thread(target=server.run, daemon=True)
    t.start()
    eventually(lambda: server.started, what="the dashboard's server to start")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        t.join(10)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    d = tmp_path_factory.mktemp("ui")
    messages = scenario.build()
    rebuild(messages, d / "projection.duckdb")
    logs = d / "logs"
    logs.mkdir()
    write_log(logs / "a.jsonl", messages)
    write_log(logs / "b.jsonl", messages[:40])
    with serving(create_app(d / "projection.duckdb", whatif_dir=logs)) as url:
        yield url, d


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """examples/demo.yaml simulated to t=8 s: serve has reclaimed pretrain's GPUs, pretrain
    waits (GangIncomplete), notebook holds half of a shared GPU."""
    from gpuledger.replay.scenario import load
    from gpuledger.replay.simulator import simulate

    d = tmp_path_factory.mktemp("demo")
    sim = simulate(load(ROOT / "examples" / "demo.yaml"), until_ms=8000)
    rebuild(sim.log, d / "projection.duckdb")
    with serving(create_app(d / "projection.duckdb")) as url:
        yield url, d / "projection.duckdb"


@pytest.fixture(scope="module")
def browser():
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1280,900",
    ):
        opts.add_argument(a)
    drv = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=opts)
    drv.implicitly_wait(3)
    yield drv
    drv.quit()


def text(browser) -> str:
    return browser.find_element(By.TAG_NAME, "main").text


def test_cluster_heatmap_counts_and_fragmentation(site, browser):
    url, _ = site
    browser.get(url + "/")
    assert browser.current_url.endswith("/cluster")
    count = {
        el.get_attribute("data-count"): el.text
        for el in browser.find_elements(By.CSS_SELECTOR, "[data-count]")
    }
    # n1: 8 GPUs held by infer-a at 20 % SM activity; n3: one MIG slice of mig-a; n2: free
    assert count["gpus"] == "17" and count["allocated"] == "8" and count["partial"] == "1"
    assert count["idle"] == "8" and count["free"] == "8" and count["active"] == "0"
    cells = browser.find_elements(By.CSS_SELECTOR, "g.gpu")
    assert len(cells) == 17
    kinds = [c.get_attribute("data-kind") for c in cells]
    assert kinds.count("idle") == 8 and kinds.count("free") == 8
    # the MIG GPU draws one slice of seven
    mig = browser.find_element(By.CSS_SELECTOR, 'g.gpu[data-node="n3"]')
    assert len(mig.find_elements(By.CSS_SELECTOR, "rect.part")) == 1
    assert "mig-a (org/a): 1g.10gb" in mig.find_element(By.TAG_NAME, "title").get_attribute(
        "textContent"
    )
    assert "leaf switch leaf-1" in text(browser)
    browser.find_element(By.CSS_SELECTOR, 'g.gpu[data-node="n3"] a').click()  # a part opens its job
    assert browser.find_element(By.ID, "job-name").text == "mig-a"
    browser.back()
    frag = browser.find_element(By.ID, "fragmentation").text
    assert "n2-nvl0" in frag and "n2-nvl1" in frag


def test_queue_shows_reasons_and_filters(site, browser):
    url, _ = site
    browser.get(url + "/queue")
    rows = browser.find_elements(By.CSS_SELECTOR, "#queue tbody tr")
    cells = [[td.text for td in r.find_elements(By.TAG_NAME, "td")] for r in rows]
    assert [c[1] for c in cells] == ["train-b", "big-b"]
    assert cells[0][6] == "Resources" and "largest free clique has 4" in cells[0][7]
    assert cells[0][0] == "1" and cells[0][8] == "Preemption would help: no"  # as `why` says
    assert cells[0][9] == "infer-a"
    browser.get(url + "/queue?class=inference")
    assert browser.find_element(By.ID, "pending-count").text == "0"


def test_click_from_a_pending_job_to_the_job_that_preempted_it(site, browser):
    url, _ = site
    browser.get(url + "/queue")
    browser.find_element(By.LINK_TEXT, "train-b").click()
    assert browser.find_element(By.ID, "job-name").text == "train-b"
    page = text(browser)
    assert "Preempted #1 by infer-a" in page
    assert "lost work: 40 GPU-seconds" in page
    life = browser.find_element(By.ID, "life").text
    for fact in (  # the sentences of `gpuledger simulate`'s timeline, seen from this job
        "submitted (org/b, train, 1x 8 GPU)",
        "admitted (train, priority 50, preemptible)",
        "placed on n1[0,1,2,3,4,5,6,7]",
        "checkpoint rank 0 saved step 1200",
        "preempt for infer-a (Reclaim), checkpoint within",
        "evicted (Reclaim by infer-a), checkpointed, lost 40 GPU-s",
        "requeued, resumes from step 1200",
        "pending: Resources - needs 8 GPUs",
    ):
        assert fact in life, fact
    assert browser.find_element(By.CSS_SELECTOR, "#life .life-evicted a.job").text == "infer-a"
    assert len(browser.find_elements(By.CSS_SELECTOR, "#timeline rect")) >= 3
    browser.find_element(By.CSS_SELECTOR, ".card.preempted a.job").click()
    assert browser.find_element(By.ID, "job-name").text == "infer-a"
    assert "Preempted train-b (Reclaim, lost 40 GPU-seconds)" in text(browser)


def test_tenants_page(site, browser):
    url, _ = site
    browser.get(url + "/tenants")
    rows = {
        r.find_elements(By.TAG_NAME, "td")[0].text: [
            td.text for td in r.find_elements(By.TAG_NAME, "td")
        ]
        for r in browser.find_elements(By.CSS_SELECTOR, "#tenants tbody tr")
    }
    assert rows["org/b"][1:4] == ["4", "16", "8"]  # guaranteed, limit, fair share
    assert len(browser.find_elements(By.CSS_SELECTOR, "svg.chart")) == 2
    assert "1970-01-01" in browser.find_element(By.ID, "daily").text


def test_whatif_compares_two_logs_side_by_side(site, browser):
    url, _ = site
    browser.get(url + "/whatif?a=a.jsonl&b=b.jsonl")
    table = browser.find_element(By.ID, "compare").text
    assert "GPU allocation % (time-weighted)" in table and "preemptions" in table
    imgs = browser.find_elements(By.CSS_SELECTOR, ".charts img")
    assert len(imgs) == 2 and all(i.get_attribute("naturalWidth") != "0" for i in imgs)


def test_a_tenant_view_shows_only_that_tenant(site, browser):
    _, d = site
    with serving(create_app(d / "projection.duckdb", tenant="org/b")) as base:
        browser.get(base + "/jobs/train-b")
        page = text(browser)
        assert "Preempted #1 by a job of another tenant" in page and "infer-a" not in page
        browser.get(base + "/jobs/infer-a")
        assert "Unknown job" in text(browser)
        browser.get(base + "/cluster")
        assert "infer-a" not in browser.page_source


def test_the_demo_scenario_page_by_page(demo, browser):
    demo, demo_db = demo
    browser.get(demo + "/cluster")
    count = {
        el.get_attribute("data-count"): el.text
        for el in browser.find_elements(By.CSS_SELECTOR, "[data-count]")
    }
    assert (count["gpus"], count["allocated"], count["partial"], count["free"]) == (
        "18",
        "4",
        "1",
        "13",
    )
    shared = browser.find_element(By.CSS_SELECTOR, 'g.gpu[data-node="shared-1"][data-gpu="0"]')
    assert "notebook (product): 0.5 GPU" in shared.find_element(By.TAG_NAME, "title").get_attribute(
        "textContent"
    )
    assert (
        float(shared.find_element(By.CSS_SELECTOR, "rect.part").get_attribute("width")) == 12.0
    )  # half of a 24-px cell
    browser.get(demo + "/queue")
    row = [td.text for td in browser.find_elements(By.CSS_SELECTOR, "#queue tbody tr td")]
    assert row[1] == "pretrain" and row[6] == "GangIncomplete" and row[9] == "serve"
    browser.find_element(By.LINK_TEXT, "pretrain").click()
    assert "Preempted #1 by serve" in text(browser)
    browser.find_element(By.CSS_SELECTOR, ".card.preempted a.job").click()
    assert browser.find_element(By.ID, "job-name").text == "serve"
    assert "Preempted pretrain (Reclaim" in text(browser)
    with serving(create_app(demo_db, tenant="research")) as base:  # research sees no job of product
        browser.get(base + "/jobs/pretrain")
        page = text(browser)
        assert "Preempted #1 by a job of another tenant" in page and "another tenant's job" in page
        assert "serve" not in browser.page_source
    browser.get(demo + "/tenants")
    assert {"research", "product"} <= {
        td.text for td in browser.find_elements(By.CSS_SELECTOR, "#tenants td b")
    }


def test_the_page_follows_the_projector_live(site, browser):
    url, d = site
    from gpuledger import events as ev
    from gpuledger.projections.reading import ProjectionBusy
    from gpuledger.projections.store import Projector

    browser.get(url + "/queue")
    assert browser.find_element(By.ID, "pending-count").text == "2"
    seq = int(browser.find_element(By.TAG_NAME, "body").get_attribute("data-seq"))
    cancel = ev.JobCancelled(
        job_id="big-b",
        tenant="org/b",
        occurred_at_ms=1_261_000,
        event_id="live-cancel",
        producer="cli",
    )

    def write_the_cancel() -> bool:  # the projector writes while the page is open
        with Projector(d / "projection.duckdb") as pj:
            pj.apply(seq + 1, ev.subject_for(cancel), cancel)
            pj.commit()
        return True

    # the page's live reads open the file read-only in this process (the UI runs in a thread
    # here), and DuckDB refuses a writer beside an open reader: write between two reads
    eventually(
        write_the_cancel,
        10,
        "a moment between the page's reads to write in",
        ignoring=(duckdb.ConnectionException, ProjectionBusy),
    )
    eventually(lambda: _text(browser, "pending-count") == "1", 10, "the page to show 1 pending")


def _text(browser, element_id: str) -> str:
    """An element's text read in one script call: a live page may replace the element between
    a `find_element` and a read of it (StaleElementReferenceException)."""
    return browser.execute_script(
        "return document.getElementById(arguments[0]).innerText.trim()", element_id
    )


def test_screenshot_writes_a_png_of_each_page(site, tmp_path):
    from typer.testing import CliRunner

    from gpuledger.services.cli.main import app

    _, d = site
    r = CliRunner().invoke(
        app,
        [
            "ui",
            "--data",
            str(d),
            "--whatif-dir",
            str(d / "logs"),
            "--screenshot",
            str(tmp_path / "shots"),
        ],
    )
    assert r.exit_code == 0, r.output
    names = sorted(p.name for p in (tmp_path / "shots").iterdir())
    assert names == ["cluster.png", "job.png", "queue.png", "tenants.png", "whatif.png"]
    for p in (tmp_path / "shots").iterdir():
        head = p.read_bytes()[:24]
        assert head[:8] == b"\x89PNG\r\n\x1a\n"
        assert int.from_bytes(head[16:20], "big") == 1280  # the window's width
