"""Shared fixtures: the real WikiText-2 copy in ../shared/data and quiet TF."""

import os
import pathlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest

PROJECT_ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED_DATA = PROJECT_ROOT.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> pathlib.Path:
    """Directory holding wikitext-2/ and wikitext-2-raw/ (never downloaded)."""
    if not (SHARED_DATA / "wikitext-2" / "wiki.valid.tokens").exists():
        pytest.fail(f"real WikiText-2 expected in {SHARED_DATA}; see its SOURCES.md")
    return SHARED_DATA


@pytest.fixture(scope="session")
def project_root() -> pathlib.Path:
    return PROJECT_ROOT
