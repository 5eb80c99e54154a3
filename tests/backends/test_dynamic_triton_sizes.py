"""Dynamic shapes on the triton backend, issue 13 (h13dyn4): graphs whose size-generic module failed to be
built for some sizes, compared with eager over several sizes, with the number of frontend graphs and of
generated triton modules asserted.

- `x.reshape(-1)[: x.numel() % 7 + 1]`: the modules generated at two probes had different numbers of integer
  literals and fitting them raised IndexError inside the backend; the graph ran eagerly (NOTE [Literal
  counts differ between probes], triton/dynamic.py).
- a size the graph computes that is 1 at some sizes (`x[:, ::3]` for s <= 3, a numel divisible by 7): the
  module generated there folds the dimension away, so the probes' kernels differed in structure and the
  graph compiled per shape (NOTE [Degenerate sizes are not probed], triton/dynamic.py).
- `F.pad(x, (0, y.size(-1) - x.size(-1)))`: the pad is a size relation that is positive at some probes and
  negative (a crop) at others; digits after a minus sign were not literals, so the wrappers differed and the
  graph compiled per shape (NOTE [Literals that change sign], triton/literal_fits.py).
- conv2d with its weight an input under dynamic=True: 7 symbols (the limit was 6); the frontend bounds the
  kernel width to 2..3 (too few sizes to probe) and relates the kernel height to the image's (`kh <= h + 2`),
  which probes in every order broke (NOTE [Symbols with too few sizes to probe], triton/dynamic.py; NOTE
  [Probes within the frontend's relations], triton/probe_relations.py).
- `x[:, 1::3] * 2 + y`: the frontend equates y's width to `(x.size(1) + 1) // 3`; probes gave the two widths
  unrelated values and could not be generated (broadcast), so the graph compiled per shape.
- `x.var(1)`: the kernel divides by `s - 1`, a size of the graph off by a constant, which no candidate fitted
  (NOTE [Sizes off by a constant], triton/size_exprs.py).
- `x[:, x.size(1) % 3:]`: an odd probe where the offset is 0 folds the `+ offset` away, so the kernels
  differed in structure and the graph compiled per shape (NOTE [Degenerate sizes are not probed]).
- cross_entropy of (b, t, V) logits against (b', t') targets: the frontend equates b * t and b' * t', which
  probes of unrelated primes broke (cross_entropy raised), so the graph compiled per shape.
"""
from __future__ import annotations


import pytest
import torch

import framejit
from tests.helpers import RecordingBackend, assert_same




def _run(fn, calls: list, dynamic) -> RecordingBackend:
    backend = RecordingBackend("triton")
    compiled = framejit.compile(fn, backend=backend, dynamic=dynamic)
    for args in calls:
        assert_same(compiled(*args), fn(*args))
    return backend


def _prefix_by_numel(x):
    return x.reshape(-1)[: x.numel() % 7 + 1] * 2


# numels 21 (% 7 == 0: one element), 24, 30, 39, 35 (% 7 == 0 again), 48
_NUMEL_SHAPES = [(3, 7), (3, 8), (3, 10), (3, 13), (5, 7), (4, 12)]


def test_a_slice_by_the_numel_modulo_compiles_without_falling_back_to_eager():
    """The triton lowering raised IndexError (list index out of range) in the probes' fit and the graph
    ran eagerly; it must compile (size-generic or per shape), values equal to eager's."""
    from framejit.backends.triton.runtime import EagerGraph

    backend = _run(_prefix_by_numel, [(torch.randn(*s),) for s in _NUMEL_SHAPES], dynamic=True)
    assert len(backend.compiled) == 2, backend.compiled  # numel % 7 == 0 (one element) and the rest
    assert not any(isinstance(g, EagerGraph) for g in backend.compiled), [getattr(g, "reason", g)
                                                                           for g in backend.compiled]


def _strided_columns_summed(x):
    return x[:, ::3].sum(1)


_DEGENERATE = {
    # the first sizes have one column in three (s <= 3), the later ones more
    "strided_sum": (_strided_columns_summed, [(torch.randn(3, s),) for s in [2, 3, 4, 5, 7, 10]]),
    "strided_sum_rows_too": (_strided_columns_summed, [(torch.randn(s, s + 1),) for s in [2, 3, 4, 6, 9]]),
    "prefix_by_numel": (_prefix_by_numel, [(torch.randn(*s),) for s in _NUMEL_SHAPES]),
}


def _one_module_per_graph(backend, triton_modules, graphs: int) -> None:
    from framejit.backends.triton.dynamic import DynamicGraph

    assert len(backend.compiled) == graphs, backend.compiled
    assert all(isinstance(g, DynamicGraph) for g in backend.compiled), [getattr(g, "reason", g)
                                                                        for g in backend.compiled]
    assert all(g.specialised.compiled == {} for g in backend.compiled), backend.compiled
    assert sum(triton_modules.values()) == graphs, dict(triton_modules)


@pytest.mark.parametrize("name", list(_DEGENERATE))
def test_sizes_computed_as_one_at_the_first_call_are_one_module_with_dynamic_true(name, triton_modules):
    """dynamic=True: 1 frontend graph (2 for prefix_by_numel: numel % 7 == 0 is its own graph) and one
    size-generic module each; before, every shape compiled its own module (6 for 6 sizes)."""
    fn, calls = _DEGENERATE[name]
    backend = _run(fn, calls, dynamic=True)
    _one_module_per_graph(backend, triton_modules, 2 if name == "prefix_by_numel" else 1)


def test_automatic_dynamic_serves_the_later_sizes_with_one_module(triton_modules):
    """dynamic=None: the first call is static (3, 2), the second (3, 3) makes the columns symbolic with an
    example whose strided slice has one column; every later size is served by that module."""
    from framejit.backends.triton.dynamic import DynamicGraph
    from framejit.backends.triton.runtime import CompiledGraph

    calls = [(torch.randn(3, s),) for s in [2, 3, 4, 5, 7, 10, 6]]
    backend = _run(_strided_columns_summed, calls, dynamic=None)
    assert [type(g) for g in backend.compiled] == [CompiledGraph, DynamicGraph], backend.compiled
    assert backend.compiled[1].specialised.compiled == {}, backend.compiled[1].reason
    assert sum(triton_modules.values()) == 2, dict(triton_modules)


def _padded_to_the_width_of(x, y):
    return torch.nn.functional.pad(x, (0, y.size(-1) - x.size(-1))) + y


# y wider than x (padded), equal (pad 0) and narrower (a negative pad crops x)
_PAD_CALLS = [(torch.randn(3, s), torch.randn(3, s + d)) for s, d in [(5, 2), (7, 3), (8, 1), (10, 4), (6, 0), (9, -2)]]


@pytest.mark.parametrize("dynamic", [True, None])
def test_padding_by_a_size_relation_is_one_module(dynamic, triton_modules):
    """Before: 6 modules for 6 size pairs (dynamic=True), 1 static + 5 per shape (dynamic=None)."""
    backend = _run(_padded_to_the_width_of, _PAD_CALLS, dynamic=dynamic)
    if dynamic:
        _one_module_per_graph(backend, triton_modules, 1)
    else:
        from framejit.backends.triton.dynamic import DynamicGraph
        from framejit.backends.triton.runtime import CompiledGraph

        assert [type(g) for g in backend.compiled] == [CompiledGraph, DynamicGraph], backend.compiled
        assert backend.compiled[1].specialised.compiled == {}, backend.compiled[1].reason
        assert sum(triton_modules.values()) == 2, dict(triton_modules)


def _conv_relu(x, w):
    return torch.nn.functional.conv2d(x, w, padding=1).relu()


def test_a_conv_whose_weight_is_a_dynamic_input_is_one_module(triton_modules):
    """Channels, image size, output channels and the kernel height change: before, one module per call ('7
    symbols (1 to 6 are made size-generic)'); now 1 frontend graph and 1 size-generic module for kernel width 3.
    The width is fixed in that module (the frontend allows 2..3): a width of 2 compiles its own module."""
    from framejit.backends.triton.dynamic import DynamicGraph

    calls = [(torch.randn(2, c, h, h + 1), torch.randn(o, c, kh, 3))
             for c, h, o, kh in [(3, 6, 4, 3), (2, 7, 5, 5), (4, 5, 3, 3), (3, 8, 6, 5)]]
    backend = RecordingBackend("triton")
    compiled = framejit.compile(_conv_relu, backend=backend, dynamic=True)
    for args in calls:
        assert_same(compiled(*args), _conv_relu(*args))
    _one_module_per_graph(backend, triton_modules, 1)
    x, w = torch.randn(2, 3, 7, 6), torch.randn(4, 3, 3, 2)
    assert_same(compiled(x, w), _conv_relu(x, w))
    assert len(backend.compiled) == 1 and isinstance(backend.compiled[0], DynamicGraph), backend.compiled
    assert len(backend.compiled[0].specialised.compiled) == 1, backend.compiled[0].specialised.compiled
    assert sum(triton_modules.values()) == 2, dict(triton_modules)


def _strided_columns_plus(x, y):
    return x[:, 1::3] * 2 + y


def test_a_size_the_frontend_equates_to_an_expression_of_another_is_one_module(triton_modules):
    """dynamic=True over 6 widths of x (y's width follows): before, 6 modules; now 1."""
    calls = [(torch.randn(3, s), torch.randn(3, (s + 1) // 3)) for s in [5, 7, 8, 11, 6, 9]]
    backend = _run(_strided_columns_plus, calls, dynamic=True)
    _one_module_per_graph(backend, triton_modules, 1)


def _standardised(x):
    return (x - x.mean(1, keepdim=True)) / (x.var(1, keepdim=True) + 1) + x.std(1, keepdim=True)


def test_variance_over_a_symbolic_row_is_one_module(triton_modules):
    """dynamic=True over 4 shapes: before, 4 modules ('a size in a kernel is neither a product of symbols nor
    a size expression of the graph'); now 1."""
    calls = [(torch.randn(b, t),) for b, t in [(2, 5), (3, 7), (4, 6), (2, 9)]]
    backend = _run(_standardised, calls, dynamic=True)
    _one_module_per_graph(backend, triton_modules, 1)


def _from_the_remainder(x):
    return x[:, x.size(1) % 3:] * 2


def test_an_offset_that_is_zero_at_a_probe_is_one_module(triton_modules):
    """dynamic=True over 6 widths (offsets 2, 1, 2, 1, 0, 0): 2 frontend graphs (offset 0 and not); before, 6
    per-shape modules ('a kernel body depends on a symbolic size beyond integer literals'); now 2."""
    calls = [(torch.randn(2, s),) for s in [5, 7, 8, 10, 6, 9]]
    backend = _run(_from_the_remainder, calls, dynamic=True)
    _one_module_per_graph(backend, triton_modules, 2)


def _token_loss(logits, targets):
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


def test_a_loss_whose_inputs_have_equal_numels_is_one_module(triton_modules):
    """dynamic=True, 5 calls; in two of them the targets' batch and length differ from the logits' (same
    product): before, 5 modules ('Expected input batch_size ... to match target batch_size'); now 1."""
    calls = [(torch.randn(b, t, 5), torch.randint(0, 5, (b2, t2)))
             for b, t, b2, t2 in [(2, 3, 2, 3), (3, 5, 3, 5), (2, 6, 3, 4), (4, 3, 2, 6), (5, 4, 5, 4)]]
    backend = _run(_token_loss, calls, dynamic=True)
    _one_module_per_graph(backend, triton_modules, 1)
