"""Shared test fixtures: the read-only data folder beside the repository."""

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


@pytest.fixture(scope="session")
def shared() -> Path:
    """../shared, or skip the test when it is absent (a user's clone does not have it)."""
    if not (SHARED / "weights" / "yolov5n.pt").is_file():
        pytest.skip(f"shared test data not found at {SHARED}")
    return SHARED
