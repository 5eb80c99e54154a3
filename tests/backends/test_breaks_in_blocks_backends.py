"""Graphs around breaks in autocast, inference-mode and grad-mode blocks under the lowered backends
(onnxrt, triton): the graphs enter and exit those states inside, which make_fx bakes into the lowered
program, except what backends/state.py says a lowered program cannot do (grad switched on inside, or
inference tensors made inside): those run eagerly. Results, dtypes, requires_grad, is_inference, printed
output and global state after the call must equal eager's."""
from __future__ import annotations

import pytest
import torch

from framejit.backends.state import enters_inference_mode, switches_grad_on
from tests.capture import test_breaks_in_blocks as blocks
from tests.helpers import CountingBackend, run_differential

NAMES = ["ac_print", "ac_branch", "ac_nested_dtypes", "inf_print", "inf_false_inside_no_grad",
         "mix_no_grad_autocast_branch", "mix_set_grad_statement", "mix_enable_grad_in_no_grad", "ac_exception"]
CASES = [c for c in blocks.CASES if c[0].__name__ in NAMES]


@pytest.mark.parametrize("backend", ["onnxrt", "triton"])
@pytest.mark.parametrize("fn,make_args,graphs", CASES, ids=[c[0].__name__ for c in CASES])
def test_lowered_backends_match_eager(backend, fn, make_args, graphs):
    # bf16 matmul chains: a one-ulp difference in an intermediate bf16 value may grow to a few percent
    run_differential(fn, make_args, fullgraph=False, seeds=(0, 1), backend=backend, rtol=0.06, atol=0.2)


def test_state_queries_on_captured_graphs():
    grad_on, inference = CountingBackend(), CountingBackend()
    run_differential(blocks.mix_enable_grad_in_no_grad, blocks.one(3, requires_grad=True), fullgraph=False,
                     backend=grad_on)
    run_differential(blocks.inf_print, blocks.one(3), fullgraph=False, backend=inference)
    assert any(switches_grad_on(gm) for gm in grad_on.graphs)
    assert not any(enters_inference_mode(gm) for gm in grad_on.graphs)
    assert all(enters_inference_mode(gm) for gm in inference.graphs)
    assert not any(switches_grad_on(gm) for gm in inference.graphs)
