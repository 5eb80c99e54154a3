"""In-place bitwise operators (`m[0] |= v`, `t &= u`, `a ^= b`, shifts) lower to ONNX Runtime instead of
running the whole graph in torch (NOTE [In-place bitwise operators while lowering] in backends/onnxrt/
lowering.py); results and inputs written in place equal eager's."""
import pytest
import torch

import framejit
from tests.helpers import RecordingBackend


def mask_item(x):
    m = x.sum(-1) > 0
    m[0] |= ~torch.any(m)
    return torch.relu(x * 2 + 1) * m[:, None]


def and_xor(x, y):
    a = x > 0
    b = y > 0
    a &= b
    a ^= x < -1
    return x.where(a, y * 2)


def shifts(x):
    n = (x.abs() * 10).to(torch.int64)
    n <<= 2
    n[1:] >>= 1
    return n + 1


def input_written(m, x):
    m |= x > 0
    return x * m


@pytest.mark.parametrize("fn,make", [
    (mask_item, lambda n: (torch.randn(n, 4),)),
    (and_xor, lambda n: (torch.randn(n, 3), torch.randn(n, 3))),
    (shifts, lambda n: (torch.randn(n, 2),)),
    (input_written, lambda n: (torch.randn(n) > 1, torch.randn(n))),
])
def test_in_place_bitwise_operators_run_in_onnxrt(fn, make):
    backend = RecordingBackend("onnxrt")
    compiled = framejit.compile(fn, backend=backend)
    for i, n in enumerate((3, 3, 5)):
        torch.manual_seed(i)
        args = make(n)
        mine = [a.clone() for a in args]
        want, got = fn(*args), compiled(*mine)
        assert torch.equal(got, want) and all(torch.equal(a, b) for a, b in zip(args, mine))
    rows = [r for c in backend.compiled for r in c.summary()]
    assert rows and not any(r["eager_graph"] for r in rows) and sum(r["ort_nodes"] for r in rows) > 0
