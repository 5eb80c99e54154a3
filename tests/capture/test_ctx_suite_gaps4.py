"""`with torch.device(d):` inside the compiled region (issue 11: device contexts), differential (eager vs
compiled on fresh inputs, tests/helpers.run_differential).

NOTE [Device blocks] (framejit/capture/context.py): the block gives the torch factories inside it the
device the DeviceContext would give them, as a frame called under `torch.set_default_device` does; across
a graph break the block is re-entered as a DeviceBlock. The meta device is the one a CPU-only machine can
tell apart from the default, so the factories here make meta tensors and the programs return their
metadata (meta tensors hold no values to compare).
"""
from __future__ import annotations

import torch

import framejit
from tests.helpers import CountingBackend, run_differential


def meta_info(t: torch.Tensor) -> tuple:
    return str(t.device), tuple(t.shape), t.dtype


def factories_in_device_block(x, dev):
    y = x * 2
    with dev as bound:
        a = torch.ones(2, 3)
        b = torch.zeros(4, dtype=torch.float64)
        c = torch.full((2,), 1.5, device="cpu")  # an explicit device stays as written
        inside = torch.get_default_device()
        depth = torch._C._len_torch_function_stack(), torch._C._is_torch_function_mode_enabled()
        y = y + x.sum()  # ops on tensors from outside are unchanged
    after = torch.empty(3)
    return y + 1, meta_info(a), meta_info(b), c, str(inside), str(bound), meta_info(after), \
        torch._C._len_torch_function_stack(), depth


def test_device_block_is_traced_into_one_graph():
    # before: a graph break at the with ("with-block over Constant(device(type='meta'))"), so fullgraph raised
    for dev in (torch.device("meta"), torch.device("cpu"), torch.device("meta")):
        backend = run_differential(factories_in_device_block, lambda seed: (torch.randn(3), dev))
        assert backend.graph_count == 1
        assert torch._C._len_torch_function_stack() == 0


def test_device_block_given_as_an_argument_recompiles_per_device():
    backend = CountingBackend()
    compiled = framejit.compile(factories_in_device_block, backend=backend, fullgraph=True)
    for dev in ("meta", "cpu", "meta", "cpu"):  # what the code reads changes between calls
        x = torch.randn(3)
        expected = factories_in_device_block(x, torch.device(dev))
        actual = compiled(x, torch.device(dev))
        assert actual[1:3] == expected[1:3] and actual[4:] == expected[4:]
        torch.testing.assert_close(actual[0], expected[0])
        torch.testing.assert_close(actual[3], expected[3])
    assert backend.graph_count == 2


def break_in_device_block(x):
    y = x + 1
    with torch.device("meta"):
        a = torch.ones(2)
        print("break")
        b = torch.zeros(3, 2)
        inside = torch.get_default_device()
        y = y * 3
    c = torch.ones(1)
    return y - 1, meta_info(a), meta_info(b), str(inside), meta_info(c), torch._C._len_torch_function_stack()


def test_break_inside_device_block_resumes_in_a_graph_under_the_device():
    # before: one graph (x + 1); everything from the with on ran as plain Python
    backend = run_differential(break_in_device_block, lambda seed: (torch.randn(4),), fullgraph=False)
    assert backend.graph_count == 2
    # the resumed graph makes the block's factories on the block's device and the one after it on the default
    devices = [n.kwargs.get("device") for n in backend.graphs[1].graph.nodes
               if n.op == "call_function" and n.target in (torch.zeros, torch.ones)]
    assert devices == [torch.device("meta"), None]
    assert torch._C._len_torch_function_stack() == 0


def nested_device_blocks(x):
    with torch.device("meta"):
        a = torch.ones(2)
        with torch.device("cpu"):
            b = torch.ones(2)
            print("break")
            c = torch.ones(2)
        d = torch.ones(2)
    return x + b.sum() + c.sum(), meta_info(a), meta_info(b), meta_info(c), meta_info(d)


def test_nested_device_blocks_across_a_break():
    backend = run_differential(nested_device_blocks, lambda seed: (torch.randn(2),), fullgraph=False)
    assert backend.graph_count == 2


def mode_queries(x):
    return x.sum() + 1, torch._C._len_torch_function_stack(), torch._C._is_torch_function_mode_enabled(), \
        str(torch.get_default_device())


def test_mode_stack_length_under_a_default_device_mode():
    # before: the trace ran with the DeviceContext popped and answered 0 where eager answers 1
    torch.set_default_device("meta")
    try:
        backend = run_differential(mode_queries, lambda seed: (torch.randn(3, device="cpu"),))
    finally:
        torch.set_default_device(None)
    assert backend.graph_count == 1
    run_differential(mode_queries, lambda seed: (torch.randn(3),))  # and 0 without it
