"""Names a torch Python function kept whole as a graph node reads when it runs, guarded by identity.

NOTE [Names read by whole torch functions]: a torch Python function recorded as one call_function node
(`F.silu`, `F.relu`, `torch.einsum`: calls._is_graph_op) looks its C function up by name each time it runs:
`F.silu` calls `torch._C._nn.silu(input)`, `F.relu` calls `torch.relu(input)`. Eager, and the eager backend
(which runs the node), follow a patch of that name made after the trace; onnxrt, triton and the joint path
traced the function into aten once, so a later patch (or undoing an earlier one) was ignored: with
`torch._C._nn.silu = lambda t: silu(t) + 100` set after two calls, eager added 100 and onnxrt did not, for
good (revC C3's family; NOTE [Patched torch functions while lowering] in backends/torch_methods.py is the
other half: the lowering sees the names as the user set them). So when a trace records such a node, each
name the function's code reads (`co_names`, nested code objects too) that is a callable attribute of an
op namespace the code also names (`torch`, `torch._C._nn`, `_fft`, `_linalg`, `_special`, `_nested`,
`_sparse`), or a callable global of the function's own module, is guarded by identity (a line per name;
reading the attribute of a fixed module object, as NOTE [Library modules] guards `F.gelu`). Python functions
of torch it reads that way are followed one level further (`F.interpolate`'s helpers). Modules, classes and
the __torch_function__ protocol's helpers (`has_torch_function*`, `handle_torch_function`, torch.overrides)
are not guarded: `F.silu` adds two lines, `torch._C._nn.silu` and `silu_`. A replaced module alias
(`torch.functional._VF = ...`, which `torch.einsum` reads) is not seen. Over-approximate by design: a name matched in `co_names` that the code never reads costs a
guard line, never a wrong result.
"""
from __future__ import annotations

import functools
import sys
import types
from typing import Any

_NAMESPACES = ("torch", "torch._C._nn", "torch._C._fft", "torch._C._linalg", "torch._C._special",
               "torch._C._nested", "torch._C._sparse")
_DEPTH = 2
_PROTOCOL = frozenset({"has_torch_function", "has_torch_function_unary", "has_torch_function_variadic",
                       "handle_torch_function"})


def guard_reads(output, fn: types.FunctionType) -> None:
    """Guards (on `output`, an OutputGraph) each name `fn` reads when it runs (NOTE [Names read by whole
    torch functions])."""
    from .sources import AttrSource, ObjectSource, Ref
    for module, name in _reads(fn):
        value = module.__dict__.get(name)
        if value is None:
            continue
        label = (module.__name__ or "module").replace(".", "_")
        output.guard_id(AttrSource(ObjectSource(Ref(module, label)), name), value)


def is_whole_torch_function(target: Any) -> bool:
    """A Python function of a torch module: by its `__module__` and by the module whose globals it runs in (a
    user function wrapped by `functools.update_wrapper(fn, torch.mean)`, a `@implements(torch.mean)` entry of a
    __torch_function__ table, has torch's `__module__` but runs the user's code)."""
    return type(target) is types.FunctionType and (getattr(target, "__module__", None) or "").startswith("torch") \
        and str(target.__globals__.get("__name__", "")).startswith("torch")


@functools.lru_cache(maxsize=1024)
def _reads(fn: types.FunctionType) -> tuple:
    """((module, name), ...) for `fn`, following torch Python functions to _DEPTH (the values are read
    when guarded: a patch made later is what the guard must see)."""
    found: dict = {}
    _collect(fn, found, _DEPTH, set())
    return tuple(found.values())


def _collect(fn: types.FunctionType, found: dict, depth: int, seen: set) -> None:
    if fn in seen or depth == 0:
        return
    seen.add(fn)
    names = _code_names(fn.__code__)
    namespaces = [sys.modules[m] for m in _NAMESPACES if m in sys.modules and m.rsplit(".", 1)[-1] in names]
    home = sys.modules.get(getattr(fn, "__module__", None) or "")
    for name in sorted(names):
        for module in [*namespaces, home]:
            value = _callable_attr(module, name)
            if value is None:
                continue
            found[(id(module), name)] = (module, name)
            if is_whole_torch_function(value):
                _collect(value, found, depth - 1, seen)


def _callable_attr(module: Any, name: str) -> Any:
    if not isinstance(module, types.ModuleType):
        return None
    value = module.__dict__.get(name)
    if value is None or isinstance(value, (type, types.ModuleType)) or not callable(value):
        return None
    if name in _PROTOCOL or (getattr(value, "__module__", None) or "") == "torch.overrides":
        return None  # the __torch_function__ protocol's helpers: dispatch, not the function's computation
    return value


def _code_names(code: types.CodeType) -> frozenset:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return frozenset(names)
