"""Fixtures for the cache tests: a fresh store per test, reset counters, the `cache` log captured."""
from __future__ import annotations

import logging

import pytest

from framejit import config, logs
from framejit.cache import Store, counters


@pytest.fixture(autouse=True)
def _fresh_counters():
    counters.reset()
    yield
    counters.reset()


@pytest.fixture
def store(tmp_path) -> Store:
    return Store(tmp_path / "cache")


@pytest.fixture
def cache_log(caplog):
    """The messages logged on the `cache` artifact during the test."""
    logs.set_logs("cache")
    caplog.set_level(logging.INFO, logger="framejit.cache")
    yield lambda: [r.getMessage() for r in caplog.records if r.name == "framejit.cache"]
    logs.set_logs(config.logs)
