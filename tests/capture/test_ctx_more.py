"""More context-manager cases from PyTorch's test_ctx_manager.py (issue 11), differential (eager vs
compiled on fresh inputs, tests/helpers.run_differential) with graph counts.

- NOTE [Grad-mode nodes]: grad-mode switches stay in the graph where the traced code switches, also when
  nothing in the graph requires grad; a context manager records one only where the mode changes, a raw
  `torch._C._set_grad_enabled(b)` where eager calls it.
"""
from __future__ import annotations

import contextlib

import torch

import framejit
from tests.capture.test_contextlib import HandWritten as RawGradSwitch  # raw switches, as user code writes them
from tests.helpers import CountingBackend, run_differential


def grad_switches(gm: torch.fx.GraphModule) -> list[bool]:
    return [n.args[0] for n in gm.graph.nodes if n.op == "call_function" and n.target is torch._C._set_grad_enabled]


@contextlib.contextmanager
def raw_grad_switch(mode):
    prev = torch.is_grad_enabled()
    try:
        yield torch._C._set_grad_enabled(mode)
    finally:
        torch._C._set_grad_enabled(prev)


def _switching(ctx):
    def fn(x):
        with ctx(True):
            y = x * 2
            if torch.is_grad_enabled():
                y = y + 1
            with ctx(False):
                z = y * 3
            y = torch.relu(y)
        return y - 1, z, torch.is_grad_enabled()
    return fn


def test_raw_grad_switches_stay_in_inference_graphs():
    for ctx in (RawGradSwitch, raw_grad_switch):
        fn = _switching(ctx)
        for requires_grad in (False, True):
            with torch.no_grad():
                backend = run_differential(fn, lambda seed: (torch.randn(3, 2, requires_grad=requires_grad),))
            # each raw call is a node where eager makes it: on, off (inner), on (inner exit), off (outer exit)
            assert backend.graph_count == 1
            assert grad_switches(backend.graphs[0]) == [True, False, True, False]
            with torch.enable_grad():
                backend = run_differential(fn, lambda seed: (torch.randn(3, 2, requires_grad=requires_grad),))
            assert backend.graph_count == 1
            assert grad_switches(backend.graphs[0]) == [True, False, True, True]


def test_with_block_grad_switches_only_where_the_mode_changes():
    def fn(x):
        y = x + 1
        with torch.enable_grad():
            y = y * 2
        with torch.no_grad():
            y = y - 3
        return y, y.requires_grad

    make = lambda seed: (torch.randn(4, requires_grad=True),)  # noqa: E731
    with torch.no_grad():
        backend = run_differential(fn, make)
    assert backend.graph_count == 1 and grad_switches(backend.graphs[0]) == [True, False]
    with torch.enable_grad():
        backend = run_differential(fn, make)
    assert backend.graph_count == 1 and grad_switches(backend.graphs[0]) == [False, True]


def test_switch_undone_at_once_is_dropped():
    def fn(x):
        with torch.no_grad():
            pass
        y = x.sin()
        with torch.no_grad():
            y = y * 2
        return y

    backend = run_differential(fn, lambda seed: (torch.randn(3),))
    assert backend.graph_count == 1 and grad_switches(backend.graphs[0]) == [False, True]
    assert [n.target for n in backend.graphs[0].graph.nodes if n.op.startswith("call")][0] == "sin"


def test_inference_graph_ending_inside_inference_mode_does_not_switch_grad():
    def pause(x):
        print("pause", torch.is_grad_enabled(), torch.is_inference_mode_enabled())
        return x

    framejit.disable(pause)

    def fn(x):
        with torch.inference_mode():
            y = pause(x * 2)
            z = y + 1
        return z

    backend = run_differential(fn, lambda seed: (torch.randn(2 + seed),), fullgraph=False)
    assert backend.graph_count == 4  # two calls of different shapes, two graphs each
    assert all(grad_switches(gm) == [] for gm in backend.graphs)


# ---- NOTE [SDPA backend flags] -------------------------------------------------------------------------
from torch.nn.attention import SDPBackend, _cur_sdpa_kernel_backends, sdpa_kernel  # noqa: E402


def sdp_flags() -> tuple:
    return tuple(_cur_sdpa_kernel_backends())


@contextlib.contextmanager
def all_sdp_backends_afterwards():
    try:
        yield
    finally:
        for name in ("cudnn", "flash", "mem_efficient", "math"):
            getattr(torch.backends.cuda, f"enable_{name}_sdp")(True)


def _attention(x):
    with sdpa_kernel([SDPBackend.MATH, SDPBackend.MATH]):
        out = torch.nn.functional.scaled_dot_product_attention(x, x, x).to(torch.float32)
        inside = _cur_sdpa_kernel_backends()
    return out * 2, inside, _cur_sdpa_kernel_backends(), torch.backends.cuda.math_sdp_enabled()


def test_sdpa_kernel_is_a_traced_state_block():
    with all_sdp_backends_afterwards():
        backend = run_differential(_attention, lambda seed: (torch.randn(2, 2, 3, 4).to(torch.float16),))
        assert backend.graph_count == 1
        targets = [n.target for n in backend.graphs[0].graph.nodes if n.op == "call_function"]
        assert targets.count(torch._C._set_sdp_use_math) == 2  # entering, and the generator's finally
        assert sdp_flags() == tuple(_cur_sdpa_kernel_backends())
        # the flags at entry are guarded: a change between calls recompiles, and the answers follow it
        compiled = framejit.compile(_attention, backend=backend)
        x = torch.randn(2, 2, 3, 4).to(torch.float16)
        compiled(x)
        torch.backends.cuda.enable_flash_sdp(False)
        before = sdp_flags()
        expected = _attention(x)
        assert sdp_flags() == before
        actual = compiled(x)
        assert actual[1:] == expected[1:] and sdp_flags() == before
        torch.testing.assert_close(actual[0], expected[0])
        assert backend.graph_count == 3


def test_sdp_flags_with_a_break_inside_the_block_and_a_flag_left_changed():
    def pause():
        print("inside", [int(b) for b in _cur_sdpa_kernel_backends()])

    framejit.disable(pause)

    def fn(x, keep):
        with sdpa_kernel(SDPBackend.MATH):
            y = x.sin()
            pause()
            y = y + torch.backends.cuda.flash_sdp_enabled()
        torch.backends.cuda.enable_mem_efficient_sdp(keep)
        return y * 2, torch.backends.cuda.mem_efficient_sdp_enabled(), sdp_flags()

    for keep in (True, False):
        with all_sdp_backends_afterwards():
            run_differential(fn, lambda seed: (torch.randn(3), keep), fullgraph=False)
            after = sdp_flags()
            torch.backends.cuda.enable_mem_efficient_sdp(True)
            fn(torch.randn(3), keep)
            assert sdp_flags() == after  # the compiled call left eager's flags


# ---- contextlib.redirect_stdout / redirect_stderr ------------------------------------------------------
class Sink:
    """A text stream whose contents compare equal (the eager and compiled runs each get a copy)."""

    def __init__(self) -> None:
        self.parts: list[str] = []

    def write(self, text: str) -> int:
        self.parts.append(text)
        return len(text)

    def flush(self) -> None:
        pass

    def __eq__(self, other) -> bool:
        return type(other) is Sink and self.parts == other.parts


def test_redirected_output_and_sys_stream_reads_match_eager():
    import sys

    def fn(t, sink):
        y = t.sin()
        with contextlib.redirect_stdout(sink):
            y = y + t.cos()
            print("inside", sys.stdout is sink)
        redirected_after = sys.stdout is sink
        print("after", redirected_after)
        with contextlib.redirect_stderr(sink):
            print("to stderr", file=sys.stderr)
        return y.tan(), redirected_after, list(sink.parts)

    backend = run_differential(fn, lambda seed: (torch.randn(3 + seed), Sink()), fullgraph=False)
    # per input size: the code up to the first print (the redirect's stores into sys are replayed before
    # it, NOTE [Module attribute stores]) and the code after the last print are captured
    assert backend.graph_count == 4
    ops = [[str(n.target) for n in gm.graph.nodes if n.op.startswith("call")] for gm in backend.graphs]
    assert ops == [["sin", "cos", "<built-in function add>"], ["tan"]] * 2
