"""Whether the code after a graph break may observe the autograd identity of the graph's results.

NOTE [Autograd state observed after a break]: a backend's joint (onnxrt, triton: AOT autograd, one
autograd.Function per graph) hands the Python code after a break new output tensors: their `grad_fn` is the
node of the whole graph (CompiledFunctionBackward / LeanJointBackward, whose inputs are the graph's inputs),
and the graph's own uses of an intermediate inside the graph do not flow through the output tensor. So code
after the break that looks at the autograd graph of a result sees something eager never shows:
`y.grad_fn.register_hook(h)` / `register_prehook` saw the gradients of other tensors (x.grad 78.17 where eager
gives 90.17, review revG G4), `type(y.grad_fn).__name__` named the joint (revE E7), `y.register_hook(h)`,
`y.retain_grad()`, `torch.autograd.grad(loss, y)` and `register_multi_grad_hook((y, z), h)` missed the
gradient of y's uses before the break. None of it can be repaired once the joint ran, so the graph before the
break runs as its own code (its autograd records eager's nodes) when the rest of the frame may do any of that:
`observes_autograd_after` scans the frame's instructions from the break on (from the start of a loop around the
break), the code objects they make (lambdas, nested functions: whole) and the Python functions they load as
globals (whole, a few levels deep). Conservative on purpose: a read of `grad_fn` of any tensor counts. The
decision is taken when the graph is compiled, only for a graph that records autograd
(`tensor_hooks.own_code_reason`); it is logged under `eager_fallback` and counted in
`framejit.stats()["graphs_own_code"]`.

Not seen: reads through attributes of objects (`self.inspect(y)`), closures' cells, and the caller of the
compiled function reading a *returned* tensor's autograd state (the caller is not part of the entry; stock
torch.compile behaves the same there).
"""
from __future__ import annotations

import types

import torch

from .normalize import normalize

# attributes and methods of a tensor (or its node) that show its place in the autograd graph
_OBSERVING_NAMES = frozenset({"grad_fn", "register_hook", "retain_grad", "retains_grad", "register_prehook",
                              "next_functions", "register_multi_grad_hook"})
_AUTOGRAD_CALLS = ("grad", "backward")  # torch.autograd.grad / backward: `inputs` may name a result
_LOADS = ("LOAD_ATTR", "LOAD_METHOD")
_MAX_DEPTH = 3


def _observing_functions() -> tuple:
    return (torch.autograd.grad, torch.autograd.backward, torch.autograd.graph.register_multi_grad_hook)


def observes_autograd_after(fn: types.FunctionType, index: int) -> str | None:
    """Why the code of `fn` from instruction `index` on may observe a result's autograd state, or None."""
    insts = normalize(fn.__code__).insts
    start = min([index] + [i.arg for i in insts if "JUMP" in i.name and isinstance(i.arg, int)
                           and i.arg <= index < i.index])
    seen: set = {fn.__code__}
    previous = None
    for inst in insts[start:]:
        arg = inst.arg[1] if isinstance(inst.arg, tuple) and inst.name == "LOAD_GLOBAL" else inst.arg
        if inst.name in _LOADS and (arg in _OBSERVING_NAMES or (
                arg in _AUTOGRAD_CALLS and previous is not None and previous.arg == "autograd")):
            return f"the code after its break reads .{arg} (line {inst.lineno})"
        if inst.name in ("KW_NAMES", "LOAD_CONST"):
            why = _constant_observes(arg, fn.__globals__, 0, seen)
            if why:
                return f"the code after its break {why} (line {inst.lineno})"
        if inst.name == "LOAD_GLOBAL" and isinstance(arg, str):
            why = _global_observes(fn.__globals__, arg, 0, seen)
            if why:
                return f"the code after its break calls {arg}, which {why} (line {inst.lineno})"
        previous = inst
    return None


def _constant_observes(value, globals_: dict, depth: int, seen: set) -> str | None:
    if isinstance(value, str) and value in _OBSERVING_NAMES:
        return f"names {value!r}"
    if isinstance(value, tuple) and "inputs" in value:
        return "passes inputs= (backward or autograd.grad of chosen tensors)"
    if isinstance(value, types.CodeType):
        return _code_observes(value, globals_, depth + 1, seen)
    return None


def _code_observes(code: types.CodeType, globals_: dict, depth: int, seen: set) -> str | None:
    """The same questions over a whole code object (a lambda, a nested function, a called function)."""
    if code in seen or depth > _MAX_DEPTH:
        return None
    seen.add(code)
    names = set(code.co_names)
    hit = names & _OBSERVING_NAMES
    if hit:
        return f"reads .{min(hit)} ({code.co_qualname})"
    if "autograd" in names and names & set(_AUTOGRAD_CALLS):
        return f"calls torch.autograd ({code.co_qualname})"
    for const in code.co_consts:
        why = _constant_observes(const, globals_, depth, seen)
        if why:
            return why
    for name in code.co_names:
        why = _global_observes(globals_, name, depth, seen)
        if why:
            return why
    return None


def _global_observes(globals_: dict, name: str, depth: int, seen: set) -> str | None:
    value = globals_.get(name)
    if any(value is f for f in _observing_functions()):
        return f"is torch.autograd's {value.__name__}"
    for _ in range(4):  # the function and what it wraps (functools.wraps keeps it in the wrapper's __dict__)
        if not isinstance(value, types.FunctionType):
            return None
        if (value.__module__ or "").split(".")[0] not in ("torch", "framejit"):
            why = _code_observes(value.__code__, value.__globals__, depth + 1, seen)
            if why:
                return why
        value = value.__dict__.get("__wrapped__")
    return None


__all__ = ["observes_autograd_after"]
