"""The openb trace slices the tests read: tests/fixtures/openb/ (in the repository, so the
suite runs on a fresh clone). Every 12th row of the real trace's files; source, terms and
how to re-create them: tests/fixtures/openb/README.md."""

from pathlib import Path

import pytest

OPENB_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "openb"


@pytest.fixture(scope="session")
def openb_dir() -> Path:
    return OPENB_FIXTURES
