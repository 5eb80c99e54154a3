"""Test setup for tests/soundness: Triton kernels run through Triton's interpreter (no GPU in CI), which
must be chosen before any kernel module is imported (as in tests/backends/conftest.py)."""
import os

os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
