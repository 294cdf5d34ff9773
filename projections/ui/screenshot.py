"""`gpuledger ui --screenshot DIR`: a PNG of each page, taken by headless Chromium (Debian's
`chromium` package, or $GPULEDGER_CHROMIUM) from the dashboard served on a loopback port."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "chrome")


class NoBrowser(RuntimeError):
    pass


def find_chromium() -> str:
    env = os.environ.get("GPULEDGER_CHROMIUM")
    if env:
        if not Path(env).is_file():
            raise NoBrowser(f"GPULEDGER_CHROMIUM={env}: no such file")
        return env
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    raise NoBrowser(
        "no Chromium found: install Debian's `chromium` package "
        "(apt-get install chromium) or set GPULEDGER_CHROMIUM"
    )


def pages_to_show(con, whatif_logs: list[str] | None = None) -> list[tuple[str, str]]:
    """(file stem, path) of each page: the job page shows the last job preempted, else the
    longest waiter, else the first job; the What-if page compares the first two logs."""
    from urllib.parse import quote, urlencode

    row = (
        con.execute(
            "SELECT victim_job_id FROM preemptions ORDER BY request_seq DESC LIMIT 1"
        ).fetchone()
        or con.execute("SELECT job_id FROM longest_waiters ORDER BY rank LIMIT 1").fetchone()
        or con.execute(
            "SELECT job_id FROM jobs ORDER BY submitted_at_ms, job_id LIMIT 1"
        ).fetchone()
    )
    pages = [("cluster", "/cluster"), ("queue", "/queue")]
    if row:
        pages.append(("job", "/jobs/" + quote(row[0], safe="")))
    logs = whatif_logs or []
    pages += [
        ("tenants", "/tenants"),
        (
            "whatif",
            "/whatif" + ("?" + urlencode({"a": logs[0], "b": logs[1]}) if len(logs) > 1 else ""),
        ),
    ]
    return pages


def shoot(
    base_url: str,
    pages: list[tuple[str, str]],
    out_dir: str | Path,
    *,
    width: int = 1280,
    height: int = 860,
    timeout_s: float = 60.0,
) -> list[Path]:
    browser = find_chromium()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    with tempfile.TemporaryDirectory(prefix="gpuledger-chromium-") as profile:
        for stem, path in pages:
            target = out / f"{stem}.png"
            cmd = [
                browser,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--disable-extensions",
                f"--user-data-dir={profile}",
                f"--window-size={width},{height}",
                f"--screenshot={target}",
                base_url + path,
            ]
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
            if r.returncode != 0 or not target.is_file():
                tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["no output"]
                raise NoBrowser(f"{browser} failed on {path}: {tail[0]}")
            written.append(target)
    return written
