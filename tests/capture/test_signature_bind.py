"""`inspect.Signature.bind` / `bind_partial` and BoundArguments inside the compiled region.

NOTE [Binding a signature at trace time] (capture/introspection.py): transformers' `select_hidden_states`
decorator (output_capturing.py) binds `inspect.signature(forward)` to the call's arguments and applies the
defaults; that was a graph break at `Signature.bind`, and `apply_defaults` then broke again (its
`param.kind is _VAR_POSITIONAL` identity test of two enum constants, NOTE [Identity of constants]).
"""
from __future__ import annotations

import enum
import functools
import inspect

import pytest
import torch

import framejit


def _counts():
    s = framejit.stats()
    return s["graphs"], s["eager_frames"], s["frames_traced"]


def _select(selection):
    """Like transformers' select_hidden_states."""
    def wrapped_fn(func):
        signature = inspect.signature(func)

        @functools.wraps(func)
        def wrapper(self, *args, **kwargs):
            if not kwargs.get("output_hidden_states"):
                arguments = signature.bind(self, *args, **kwargs)
                arguments.apply_defaults()
                kwargs["output_hidden_states"] = arguments.arguments[selection]
            return func(self, *args, **kwargs)
        return wrapper
    return wrapped_fn


class _Selecting(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    @_select("layers")
    def forward(self, x, y=None, layers=(1,), **kwargs):
        out = self.lin(x) * len(kwargs["output_hidden_states"])
        return out if y is None else out + y


def test_select_hidden_states_pattern_is_one_graph_per_shape():
    framejit.reset()
    torch.manual_seed(0)
    model = _Selecting()
    compiled = framejit.compile(model)
    graphs, eager, traced = _counts()
    calls = [((torch.randn(2, 4),), {}), ((torch.randn(2, 4),), {"layers": (1, 2, 3)}),
             ((torch.randn(3, 4), torch.randn(3, 4)), {}), ((torch.randn(3, 4),), {"y": torch.ones(3, 4)})]
    for args, kwargs in calls:
        torch.testing.assert_close(compiled(*args, **kwargs), model(*args, **kwargs))
    new_graphs, new_eager, _ = _counts()
    assert new_eager == eager
    assert new_graphs - graphs <= len(calls)  # one graph per entry (before: two)
    # before: a break at Signature.bind and one in apply_defaults (2 graphs per kind of call, 3 frames each)
    explained = framejit.explain(model)(torch.randn(5, 4))
    assert explained.graph_break_count == 0, explained.break_reasons
    assert explained.graph_count == 1


def _target(a, b=2, *rest, c, d=4, **extra):
    pass


_SIG = inspect.signature(_target)


def _bind_all(x, args, kwargs):
    bound = _SIG.bind(x, *args, **kwargs)
    before = dict(bound.arguments)
    bound.apply_defaults()
    total = x * 0
    for name, value in bound.arguments.items():
        if isinstance(value, torch.Tensor):
            total = total + value
        elif isinstance(value, tuple):
            total = total + len(value)
        elif isinstance(value, dict):
            total = total + 10 * len(value)
        else:
            total = total + value
    return total, sorted(before), list(bound.arguments), len(bound.args), sorted(bound.kwargs)


@pytest.mark.parametrize("args,kwargs", [
    ((), {"c": 5}),
    ((3, 7, 8), {"c": 1, "e": 2.5}),
    ((3,), {"c": 1, "d": 9, "f": 1, "g": 2}),
])
def test_bind_kinds_args_kwargs_and_defaults(args, kwargs):
    framejit.reset()
    compiled = framejit.compile(_bind_all)
    graphs, eager, _ = _counts()
    for n in (2, 3):
        x = torch.randn(n)
        got, want = compiled(x, args, kwargs), _bind_all(x, args, kwargs)
        torch.testing.assert_close(got[0], want[0])
        assert got[1:] == want[1:]
    assert _counts()[1] == eager
    explained = framejit.explain(_bind_all)(torch.randn(4), args, kwargs)
    assert explained.graph_break_count == 0, explained.break_reasons


def _bind_tensors(x, y):
    bound = _SIG.bind(x, y, x * 2, c=y + 1, z=x - 1)
    bound.arguments["d"] = y * 3
    return bound.args, bound.kwargs


def test_bound_tensors_flow_through_args_and_kwargs():
    framejit.reset()
    compiled = framejit.compile(_bind_tensors)
    for n in (2, 5):
        x, y = torch.randn(n), torch.randn(n)
        (gargs, gkw), (wargs, wkw) = compiled(x, y), _bind_tensors(x, y)
        assert len(gargs) == len(wargs) and sorted(gkw) == sorted(wkw)
        for g, w in zip(gargs, wargs):
            torch.testing.assert_close(g, w)
        for k in wkw:
            torch.testing.assert_close(gkw[k], wkw[k])
        assert gargs[0] is x and gargs[1] is y  # the bound objects are the caller's
    assert framejit.explain(_bind_tensors)(torch.randn(3), torch.randn(3)).graph_break_count == 0


def _bind_partial(x):
    bound = _SIG.bind_partial(b=x)
    bound.apply_defaults()  # `a` and `c` have no default: skipped, as CPython does
    return list(bound.arguments), bound.arguments["b"] + bound.arguments["d"]


def test_bind_partial_skips_parameters_without_defaults():
    framejit.reset()
    compiled = framejit.compile(_bind_partial)
    for n in (2, 3):
        x = torch.randn(n)
        got, want = compiled(x), _bind_partial(x)
        assert got[0] == want[0]
        torch.testing.assert_close(got[1], want[1])
    assert framejit.explain(_bind_partial)(torch.randn(3)).graph_break_count == 0


def _bad_bind(x, which):
    try:
        if which == 0:
            _SIG.bind()  # missing a
        elif which == 1:
            _SIG.bind(x)  # missing keyword-only c
        elif which == 2:
            _SIG.bind(x, a=x, c=1)  # multiple values for a
        else:
            inspect.signature(lambda p, q=1: None).bind(x, 1, 2)  # too many positional
    except TypeError as e:
        return x + 1, str(e)
    return x, "bound"


@pytest.mark.parametrize("which", [0, 1, 2, 3])
def test_bad_calls_raise_cpythons_type_error(which):
    framejit.reset()
    compiled = framejit.compile(_bad_bind)
    for n in (2, 4):
        x = torch.randn(n)
        got, want = compiled(x, which), _bad_bind(x, which)
        torch.testing.assert_close(got[0], want[0])
        assert got[1] == want[1]


class _Kind(enum.Enum):
    A = 1
    B = 2


def _by_kind(x, kind):
    if kind is _Kind.A:
        return x + 1
    return x - 1


def test_identity_of_enum_members_from_outside_and_code():
    framejit.reset()
    compiled = framejit.compile(_by_kind)
    graphs, eager, _ = _counts()
    for kind in (_Kind.A, _Kind.B, _Kind.A, _Kind.B):
        x = torch.randn(3)
        torch.testing.assert_close(compiled(x, kind), _by_kind(x, kind))
    assert _counts()[1] == eager
    assert _counts()[0] - graphs == 2  # one entry per member, no break
