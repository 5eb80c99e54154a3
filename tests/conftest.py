"""Session-wide test settings: the persistent cache lives in a temporary directory, never in the user's
~/.cache, and is off unless a test turns it on (tests of the cache run their processes with
FRAMEJIT_CACHE=1, or enable it with monkeypatch); every test starts with framejit's compiled state
forgotten."""
from __future__ import annotations

import os
import sys
import tempfile

import pytest

_CACHE_DIR = tempfile.mkdtemp(prefix="framejit-test-cache-")
os.environ["FRAMEJIT_CACHE_DIR"] = _CACHE_DIR

import framejit  # noqa: E402  (after the environment is set)

framejit.config.cache_dir = _CACHE_DIR
framejit.config.cache_enabled = False


@pytest.fixture(autouse=True)
def _fresh_framejit():
    framejit.reset()
    yield


def pytest_sessionfinish(session, exitstatus):
    helpers = sys.modules.get("tests.helpers")
    if helpers is not None:
        helpers.close_program_servers()  # NOTE [Programs in forked children]
