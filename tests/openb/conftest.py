"""Locate the openb trace: a ``shared/data/alibaba-openb`` folder beside some ancestor of
this checkout (``../shared`` from the repository root in CI and in worktrees)."""

from pathlib import Path

import pytest


def find_openb() -> Path:
    here = Path(__file__).resolve()
    for parent in here.parents:
        candidate = parent / "shared" / "data" / "alibaba-openb"
        if (candidate / "openb_pod_list_default.csv").is_file():
            return candidate
    raise FileNotFoundError(
        "openb trace not found: expected shared/data/alibaba-openb/ (with "
        "openb_pod_list_default.csv and openb_node_list_gpu_node.csv) beside an ancestor "
        f"of {here}; the tests need the real trace and do not skip without it"
    )


@pytest.fixture(scope="session")
def openb_dir() -> Path:
    return find_openb()
