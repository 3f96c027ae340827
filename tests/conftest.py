"""Shared fixtures. The real default model and Ray cluster are session-scoped (loaded once)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():  # absent data, like absent hardware: say what is missing
        pytest.skip(
            f"benchmark data not found at {SHARED_DATA}: the project reads ../shared/data "
            "(or $MARTI_DATA_DIR); copy the benchmark files there to run this test"
        )
    return SHARED_DATA
