"""Compiled functions and modules called by the code being traced: their original code is inlined.

NOTE [Compiled callables called while tracing]: a function made by `framejit.compile(f)` is a FrameHook,
and a compiled module is an instance of a generated subclass whose `__call__` calls the module's hook
(NOTE [Compiled modules] in api.py). Called from a traced frame (`def outer(x): return compiled_f(x) + 1`,
a parent module holding a compiled block, `[framejit.compile(b) for b in blocks]` called from a compiled
model), the trace inlined FrameHook.__call__ itself, framejit's own code, and broke at its first identity
test of a code object ("identity comparison of Constant(<code object f>) and Constant(<code object f>)"):
every such call was a graph break, the callee a graph of its own. In eager, calling the compiled form runs
the original function (or the original module's `__call__`, hooks included) with the same arguments, so the
trace inlines that instead, as torch.compile inlines a compiled callee: the callee joins the caller's graph
under the caller's backend and options.
- a FrameHook made by framejit.compile (it carries `__wrapped__`, its function; the hooks framejit makes for
  resume functions and callees at breaks do not, and user code never reaches them): its type is guarded and
  its `fn` is read as the attribute it is, so the function's own guards (its code, defaults) apply;
- a compiled module: its generated class is guarded (TYPE_MATCH, as for any module) and the call is the
  original module's call, read as `compiled._orig_mod` (the class attribute), hooks and all. The compiled
  class's `forward` (NOTE [The forward of a compiled module]) is a FrameHook call as well.

NOTE [torch.compile'd functions called while tracing]: `compiled_flex = torch.compile(flex_attention)` at
a module's top level, called from a traced frame (flex_attention's documented usage), inlined torch's
`compile_wrapper`, which broke at `set_eval_frame`: the call ran as Python, outside the graphs. Eager runs the
original function (compiled by torch, the same values); stock torch.compile inlines it (the wrapper's
`_torchdynamo_inline`). So does framejit: the wrapper is guarded by identity and the function read is its
`_torchdynamo_inline` attribute, when that is the original callable itself (not a wrapper torch made for
error_on_graph_break) and the wrapper is not one of torch.compiler.disable (whose function must run as Python).
A wrapper whose context is strict (fullgraph=True, error_on_graph_break) is not inlined: torch raises where its
function breaks, and framejit's trace of it would not (revAQ MED-1); it runs as Python, as before.
"""
from __future__ import annotations

import sys
from typing import Any

from .sources import AttrSource
from .values import NNModuleValue, ObjectValue
from .values.base import Value


def torch_compiled_original(out, obj: Any, source) -> Value | None:
    """The function a torch.compile wrapper `obj` compiles, read through it; else None."""
    inline = obj.__dict__.get("_torchdynamo_inline")
    if inline is None or inline is not obj.__dict__.get("_torchdynamo_orig_callable") or \
            obj.__dict__.get("_torchdynamo_disable") or not callable(inline) or _strict(obj):
        return None
    from .values.builder import wrap
    out.guard_id(source, obj)
    return wrap(out, inline, AttrSource(source, "_torchdynamo_inline"))


def _strict(wrapper: Any) -> bool:
    """The wrapper's compile context raises where a graph breaks (fullgraph=True, error_on_graph_break, export),
    or cannot be read: inlined, its function would run where eager raises (revAQ MED-1), so it runs as Python."""
    code, cells = getattr(wrapper, "__code__", None), getattr(wrapper, "__closure__", None) or ()
    names = code.co_freevars if code is not None else ()
    context = next((c.cell_contents for n, c in zip(names, cells) if n == "self"), None)
    if context is None or not hasattr(context, "fullgraph"):
        return True
    return bool(context.fullgraph or getattr(context, "error_on_graph_break", False) or
                getattr(context, "export", False))


def compiled_function(tx, fn: Value) -> Value | None:
    """The function a compiled function `fn` wraps, when `fn` is one made by framejit.compile; else None."""
    # hook.py's class, found without importing it: capture imports go one way, hook -> convert (test_import);
    # with hook.py not loaded no FrameHook exists
    frame_hook = getattr(sys.modules.get(f"{__package__}.hook"), "FrameHook", None)
    obj: Any = getattr(fn, "obj", None)
    if not isinstance(fn, ObjectValue) or frame_hook is None or type(obj) is not frame_hook or fn.source is None:
        return None
    if obj.__dict__.get("__wrapped__") is not obj.fn:
        return None
    from .values.builder import wrap
    tx.output.guard_type(fn.source, frame_hook)
    return wrap(tx.output, obj.fn, AttrSource(fn.source, "fn"))


def original_module(tx, mod_value: NNModuleValue) -> Value | None:
    """The original module of a compiled module `mod_value`, read through it; else None."""
    cls = type(mod_value.obj)
    if not cls.__dict__.get("_framejit_compiled") or mod_value.source is None:
        return None
    from .values.builder import wrap
    tx.output.guard_type(mod_value.source, cls)
    return wrap(tx.output, cls._orig_mod, AttrSource(mod_value.source, "_orig_mod"))
