from __future__ import annotations

import pytest

from gpuledger.projections.mappers import ALL_TABLES
from tests.projections import scenario


@pytest.fixture(scope="session")
def messages():
    return scenario.build()


def dump(con) -> dict[str, list[tuple]]:
    """Every projected table's content, in a canonical order (plus the last seq)."""
    out = {t: con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall() for t in ALL_TABLES}
    out["projector_meta"] = con.execute("SELECT last_seq FROM projector_meta").fetchall()
    return out
