"""Differential tests of the triton backend, one per op or pattern (see triton_cases.py).

Each case is traced with torch.fx, compiled on the inputs of seed 0 and compared with eager PyTorch on
seeds 0 and 1 (float32: atol=rtol=1e-5; float16: 2e-3; bfloat16: 2e-2; exact for integers and bools).
Kernels run in Triton's interpreter on CPU tensors (TRITON_INTERPRET=1, set in conftest.py).
"""
import pytest

from tests.backends.triton_cases import CASES
from tests.backends.triton_util import compile_and_compare


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_matches_eager(case):
    compiled = compile_and_compare(case.fn, case.make_inputs, options=case.options,
                                   allow_fallbacks=case.allow_fallbacks)
    if case.allow_fallbacks:
        assert compiled.extern_count >= 1


def test_case_count():
    assert len(CASES) >= 80
