"""Test setup for tests/backends.

Triton kernels run on CPU tensors through Triton's interpreter here (no GPU in CI): TRITON_INTERPRET
must be set before any kernel module is imported, which is why it is set at conftest import time.
The offline sm_90 compile test (test_triton_sm90.py) compiles every kernel the other triton tests
generated, so it is moved to the end of the run.
"""
import os

os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # silences a triton 3.9 deprecation warning


def pytest_collection_modifyitems(session, config, items):
    last = [item for item in items if "test_triton_sm90" in item.nodeid]
    items[:] = [item for item in items if item not in last] + last
