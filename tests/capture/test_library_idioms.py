"""Library idioms real model code uses, captured whole (issue 11).

Small self-contained programs in the style of transformers' decorators and torch.nn internals: function
and code objects introspected at trace time (`__code__.co_varnames`, `__wrapped__`, `__func__`),
imports inside functions, compile-aware state queries (`torch.compiler.is_compiling()`), dict-subclass
registries read through `super().get`, function identity. Each runs eagerly and compiled on fresh inputs,
several calls, with the state the code reads changed between calls, and asserts the graph count.
"""
from __future__ import annotations

import functools

import torch

import framejit
from tests.helpers import CountingBackend, run_differential


def _x(seed):
    return (torch.randn(3, 4),)


# ---- function and code objects are values --------------------------------------------------------------
def config_defaults(func):
    """transformers' merge_with_config_defaults, reduced: find an argument's position from the code."""
    @functools.wraps(func)
    def wrapper(x, *args, **kwargs):
        index = None
        if "scale" in func.__code__.co_varnames:
            index = func.__code__.co_varnames.index("scale") - 1
        if index is not None and len(args) > index:
            kwargs["scale"] = args[index] * 2
            args = args[:index]
        return func(x, *args, **kwargs)
    return wrapper


@config_defaults
def scaled(x, scale=1.0):
    return x * scale


def test_code_varnames_in_wrapper():
    backend = run_differential(lambda x: scaled(x, 3.0), _x)
    assert backend.graph_count == 1


def test_function_metadata_reads():
    def inner(a, b=2, *, c=3):
        return a + b + c

    def fn(x):
        code = inner.__code__
        names = (inner.__name__, inner.__qualname__.split(".")[-1], inner.__module__, code.co_name)
        return x * code.co_argcount + len(names[0]) + inner.__defaults__[0] + inner.__kwdefaults__["c"], names

    backend = run_differential(fn, _x)
    assert backend.graph_count == 1


def test_wrapped_and_bound_method_parts():
    class Model(torch.nn.Module):
        def scale(self, x):
            return x * 2

    model = Model()

    def fn(x):
        method = model.scale
        unwrapped = scaled.__wrapped__
        return method.__func__(method.__self__, x) + unwrapped(x, 5.0), method.__name__

    backend = run_differential(fn, _x)
    assert backend.graph_count == 1


def test_code_reassigned_between_calls_recompiles():
    def target(x):
        return x + 1

    def other(x):
        return x - 1

    def fn(x):
        return x * len(target.__code__.co_varnames) + (1 if target.__code__.co_name == "target" else 0)

    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend)
    x = torch.randn(3)
    try:
        torch.testing.assert_close(compiled(x), fn(x))
        target.__code__ = other.__code__
        torch.testing.assert_close(compiled(x), fn(x))
    finally:
        target.__code__ = target.__code__
    assert backend.graph_count == 2


def test_missing_function_attribute_raises_attribute_error():
    def helper(x):
        return x

    def fn(x):
        try:
            return helper.__wrapped__(x)
        except AttributeError:
            return x + 1

    backend = run_differential(fn, _x)
    helper.__wrapped__ = lambda x: x * 3
    try:
        run_differential(fn, _x, backend=backend, compiled=framejit.compile(fn, backend=backend))
    finally:
        del helper.__wrapped__


def test_function_identity():
    def wrap(f):
        @functools.wraps(f)
        def wrapped(self, x):
            outermost = type(self).forward is wrapped
            return f(self, x) + (1 if outermost else 0)
        return wrapped

    class Layer(torch.nn.Module):
        def forward(self, x):
            return x * 2

    Layer.forward = wrap(Layer.forward)
    layer = Layer()
    backend = run_differential(layer, _x)
    assert backend.graph_count == 1


# ---- imports inside functions --------------------------------------------------------------------------
def test_import_inside_function():
    def fn(x):
        import torch.nn.functional as F
        from torch.nn import functional
        import math
        from operator import add
        return add(F.relu(x), functional.gelu(x) * math.pi)

    backend = run_differential(fn, _x)
    assert backend.graph_count == 1


def test_import_not_yet_imported_breaks_and_matches():
    def fn(x):
        y = x + 1
        import framejit_no_such_module_xyz  # noqa: F401
        return y

    backend = run_differential(fn, _x, fullgraph=False)
    assert backend.graph_count == 1


# ---- compile-aware library paths -----------------------------------------------------------------------
def is_torchdynamo_compiling():
    try:
        import torch
        return torch.compiler.is_compiling()
    except Exception:
        return False


def test_is_compiling_takes_the_compiled_path():
    def fn(x):
        if is_torchdynamo_compiling() and torch.compiler.is_dynamo_compiling() and not torch.compiler.is_exporting():
            return x + 1
        return x - 1

    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend, fullgraph=True)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), x + 1)
    assert fn(x).equal(x - 1)
    assert backend.graph_count == 1


def test_state_queries_are_guarded():
    import torch.fx._symbolic_trace
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    def fn(x):
        if torch.jit.is_scripting() or torch.jit.is_tracing() or torch.fx._symbolic_trace.is_fx_tracing():
            return x - 1
        if torch.backends.mha.get_fastpath_enabled():
            x = x * 2
        return x + len(_get_current_dispatch_mode_stack())

    backend = run_differential(fn, _x)
    assert backend.graph_count == 1
    compiled = framejit.compile(fn, backend=backend)
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        run_differential(fn, _x, backend=backend, compiled=compiled)
    finally:
        torch.backends.mha.set_fastpath_enabled(True)
    assert backend.graph_count == 2


# ---- dict subclasses -------------------------------------------------------------------------------------
class Registry(dict):
    def __setitem__(self, key, value):
        super().__setitem__(key.lower(), value)

    def get(self, key):
        return super().get(key.lower()) or {}


REGISTRY = Registry()
REGISTRY["Linear"] = {"scale": 2}


def test_dict_subclass_read_through_super():
    def fn(x):
        entry = REGISTRY.get("LINEAR")
        return x * entry.get("scale", 1) + len(REGISTRY.get("missing"))

    backend = run_differential(fn, _x)
    REGISTRY["Linear"] = {"scale": 5}
    run_differential(fn, _x, backend=backend, compiled=framejit.compile(fn, backend=backend))
    REGISTRY["Linear"] = {"scale": 2}
    assert backend.graph_count == 2
