"""Test-session setup: lowered-source and JAX caches go to a temporary directory, not ~/.cache."""

import os
import tempfile


def pytest_configure(config):
    if "SYMCOST_CACHE_DIR" not in os.environ:
        os.environ["SYMCOST_CACHE_DIR"] = tempfile.mkdtemp(prefix="symcost-test-cache-")
