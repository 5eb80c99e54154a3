"""Which callees a break calls through a frame hook, and which closures may cross a break.

At a break the step runs in plain Python (graph_break.py); a user function called there is captured as a
frame of its own only when it goes through a FrameHook made for it. `hookable` says when a hook made now
serves every later call, `names_its_caller`/`modelled` when the callee must run directly instead, and
`shared_cells` names the cells a closure made before the break shares and that are assigned again later:
they are passed to the resume function as cells (NOTE [Cells at breaks], [Cells passed to resume functions]).
"""
from __future__ import annotations

import dis
import inspect
import types
from typing import Any

from .normalize import Inst
from .partials import partial_parts
from .values import (BoundMethodValue, CellValue, DictValue, IteratorValue, NewObjectValue, PartialValue,
                     SequenceValue, UserFunctionValue, Value)


def hookable(fn: UserFunctionValue) -> bool:
    """A real function object that can be called through a hook made for it: not a closure made while
    tracing, nor one guarded by its code only (a later call may bring another function object), unless
    that code has no free variables: then every object that passes its guards (the same code and globals,
    no defaults; NOTE [Closures guarded by code]) runs exactly as the traced one, so its hook serves them."""
    if fn.closure is not None or fn.defaults is not None or _by_code_with_defaults(fn):
        return False
    return not fn.by_code or not fn.fn.__code__.co_freevars


def _by_code_with_defaults(fn: UserFunctionValue) -> bool:
    """Guarded by its code with defaults (NOTE [Defaults of closures guarded by code]): a later object may
    bring other defaults, which a call at a break does not read while tracing, so no hook is fixed for it."""
    return fn.by_code and (fn.fn.__defaults__ is not None or fn.fn.__kwdefaults__ is not None)


# NOTE [Callable objects at breaks]: `obj(x)` of a user object (not a module) whose class defines `__call__` in
# Python runs `type(obj).__call__(obj, x)`. At a break the step called the object directly, so no frame hook saw
# `__call__` and its whole body ran eagerly, outside any graph and without an eager-frame record: a compiled
# callable instance (`framejit.compile(Step())`, api._trampoline calls it at its root, where no nested break
# is taken), a callable loss or processor object whose `__call__` prints or calls a torch.compiler.disable'd
# optimizer method, or one called in a loop. Stock Dynamo captures that frame through PEP 523. Such a call now
# goes through a hook made for the class's `__call__`, with the object passed first (as CPython binds it);
# the class lookup is read as the trace reads it (translator.call_special_of: class-dict guards), so another
# `__call__` set on the class later recompiles. Callees that must run directly keep doing so (direct_callee).
def object_call(tx: Any, callee: Value) -> Any:
    """The class's `__call__` function for a call of a user object at a break that should go through a frame
    hook (NOTE above), or None."""
    from . import lookup
    from .values import ClassValue, NNModuleValue, ObjectValue
    if type(callee) is not ObjectValue or callee.source is None or isinstance(callee, NNModuleValue):
        return None
    cls = type(callee.obj)
    call = lookup.mro_lookup(cls, "__call__")[1]
    if not isinstance(call, types.FunctionType) or direct_callee(call) or _framejits_own(call):
        return None
    value = tx.getattr(ClassValue(cls), "__call__")  # the trace's own read of the class: guards the lookup
    if not isinstance(value, UserFunctionValue) or value.fn is not call or not hookable(value):
        return None
    return call


def _framejits_own(fn: types.FunctionType) -> bool:
    """framejit's own callable objects (a compiled function's FrameHook, a compiled module's forward) are called
    directly: hooked, framejit traced its own guards and miss path (revBI MED-1: eager frames in FrameHook.miss)."""
    from .caller_frames import _FRAMEJIT_DIR
    return fn.__code__.co_filename.startswith(_FRAMEJIT_DIR)


def direct_callee(fn: Any) -> bool:
    """Callees that run directly at a break, never through a frame hook (graph_break.BreakCodegen._hooked)."""
    return names_its_caller(fn) or modelled(fn) or makes_generator(fn) or torch_internals(fn) or \
        traceback_module(fn)


def modelled(fn: Any) -> bool:
    """NOTE [Modelled functions at breaks]: a Python library function framejit answers with its own handler
    (`copy.deepcopy`, `inspect.signature`, ...) breaks only where that handler refused the arguments; tracing
    its body as a frame of its own would only break again inside (at `id(x)` in deepcopy) and recompile per
    object, so at a break it runs as plain Python, as a builtin would. So do the `re` module's functions
    (`re.finditer(p, s)` over a string that changes between calls: NOTE [Strings that change between calls]):
    traced as frames, a process whose regex cache lacks the pattern traced re's parser and compiler."""
    from .introspection import introspection_handler
    if getattr(fn, "__module__", None) == "re":
        return True
    try:
        return introspection_handler(fn) is not None
    except TypeError:  # an unhashable callable
        return False


def makes_generator(fn: Any) -> bool:
    """NOTE [Generator functions at breaks]: calling a generator (or coroutine) function runs none of its
    code, it only makes the generator object; a frame hook would trace that code only to find a generator
    frame it cannot capture and run it wholly eagerly (an eager frame counted for every such call: a caller
    driving a generator with `send()`). Such a callee is called directly, as CPython would."""
    code = getattr(fn, "__code__", None)
    return code is not None and bool(code.co_flags & (inspect.CO_GENERATOR | inspect.CO_COROUTINE |
                                                      inspect.CO_ASYNC_GENERATOR))


def names_its_caller(fn: Any) -> bool:
    """logging's calls record their caller's file, line and function (Logger.findCaller), and functions that
    read frames name their caller's: called through a frame hook, they would name framejit's hook. They run
    directly (NOTE [The break's line], [Callees that read their caller's frame])."""
    import logging
    from .import_calls import import_machinery
    code = getattr(fn, "__code__", None)
    return code is not None and (code.co_filename == logging.__file__ or _reads_frames(code)
                                 or import_machinery(fn))  # NOTE [Import machinery at breaks]


# NOTE [Torch internals at breaks]: a callee at a break goes through a frame hook so that its code is captured
# as a frame of its own. torch's own Python code outside its model libraries (the profiler, serialization, jit,
# onnx, cuda and distributed plumbing, fx, testing, ...) holds no model ops to capture: traced, it breaks again
# at nearly every line (`time.perf_counter_ns()`, C objects of the profiler) and each piece recompiles per
# value until the recompile limit (`with torch.profiler.profile() as p: ...; p.key_averages()`: 76 s of
# tracing on the first call against 4.8 s eager, and "hit the recompile limit" for torch's
# FunctionEventAvg.add). Stock Dynamo skips these files too (its skip files), inlining only the model
# libraries. Such a callee is called directly, as a builtin would be; the libraries users' models are made of
# (torch.nn, torch.optim, torch.distributions, functorch's transforms, higher-order ops, pytree, checkpoint,
# amp, autograd.Function, the wrapper `@torch.no_grad()` and the other grad-mode decorators put around a user
# function) still go through a hook.
_TORCH_LIBRARIES = ("nn/", "optim/", "distributions/", "_functorch/", "func/", "_higher_order_ops/", "amp/",
                    "ao/", "sparse/", "masked/", "utils/checkpoint.py", "utils/_pytree.py", "functional.py",
                    "utils/_contextlib.py",  # the wrapper of a function decorated with @torch.no_grad() & co.
                    "_tensor.py", "autograd/function.py", "autograd/__init__.py", "autograd/functional.py",
                    "random.py", "overrides.py")
_TORCH_DIR: list[str] = []


def torch_internals(fn: Any) -> bool:
    """NOTE [Torch internals at breaks]: whether `fn`'s code is torch's own plumbing, called directly at a break."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return False
    if not _TORCH_DIR:
        import os
        import torch
        _TORCH_DIR.append(os.path.join(os.path.dirname(torch.__file__), ""))
    name = code.co_filename
    return name.startswith(_TORCH_DIR[0]) and not name[len(_TORCH_DIR[0]):].replace("\\", "/").startswith(
        _TORCH_LIBRARIES)


# NOTE [Traceback formatting at breaks]: `traceback.format_exc()` (and the module's other functions) holds no
# tensor op; traced, it breaks deep inside (`id(exc_value)` of the exception being formatted, `sys.exc_info()`)
# and, at each break, the callee there went through a frame hook of its own: 6 frames traced on the first call
# where stock traces 1 (/tmp/hsound6/rc4.py fmt_exc). A callee of the traceback module is called directly at a
# break, as a builtin would be (eager's code, so nothing it reads needs a guard).
def traceback_module(fn: Any) -> bool:
    import traceback
    code = getattr(fn, "__code__", None)
    return code is not None and code.co_filename == traceback.__file__


# NOTE [Callees that read their caller's frame]: `sys._getframe(1)` / `inspect.currentframe().f_back` in a
# callee at a break names the frame that called it; through a frame hook that is framejit's hook.py frame
# (its locals are `args`/`kwargs`, its name `__call__`), where eager gives the user's frame. A callee whose
# code reads frames is therefore called directly from the transformed function (which stands for the user's
# frame, NOTE [The break's line]; every local the user's frame has bound is stored in it under its name first:
# NOTE [Breaks at calls that read frames] in frame_locals.py); it is not captured.
def _reads_frames(code: types.CodeType) -> bool:
    from .frame_locals import reads_frames
    return reads_frames(code)


def closure_from_outside(fn: UserFunctionValue) -> bool:
    """A function object read through a source and guarded by its code, with free variables: the object
    at run time is reloaded from that source and may be another one (NOTE [Closures called at breaks])."""
    return fn.closure is None and fn.defaults is None and fn.by_code and fn.source is not None \
        and (bool(fn.fn.__code__.co_freevars) or _by_code_with_defaults(fn))


def shared_cells(cells: dict, values: list, insts: list[Inst], index: int, loop: Inst | None = None) -> set[str]:
    """The names of the frame's `cells` (name -> CellValue) that a closure reachable from `values` shares
    and that may be written once the frame resumes: by the frame at or after instruction `index` (or by a
    loop back over an earlier store), or by any closure's code (`nonlocal`). For the others the old and
    the new cell always hold the same value (NOTE [Cells at breaks]). A cell empty at the break is shared too.

    NOTE [Closures over cells not set yet]: a closure made before the break over a variable that is not set
    there and assigned later (3.11's `<listcomp>` over its walrus target `[y for i in r if (y := f(i))]`,
    called at the break; `get = lambda: k` before a print, `k = 1` after it) shares the cell like any other:
    the break builds the cell empty, once (Reconstructor._preload_cells), rebuilds the closure over it and
    passes it on to the resume function as the cell itself, so the later assignment (by the frame or by the
    closure) is seen by both, and a read before it raises eager's NameError. Before, such a frame ran wholly
    eagerly.

    NOTE [Closures made by a loop run as Python]: where the break runs the rest of a loop as Python (`loop`,
    NOTE [Loops run as Python] in python_loops.py), the closures its body makes in the later steps do not exist
    yet: `k = 1.0; for i in range(2): x.sum().item(); f = lambda: x * k` then `k = 3.0; return f()`. The loop's
    trampoline closed them over its own cell and the code after the loop got k's value in a new cell, so f
    read the old k (review revM HIGH-2: x * 1, eager x * 3). A cell the loop's body closes over (LOAD_CLOSURE
    between the FOR_ITER and its exit) and that is written in or after the loop, or by a nested function
    (`nonlocal`), is shared too."""
    shared: set[str] = set()
    if not cells:
        return shared
    if loop is not None and loop.name == "FOR_ITER":
        for n in cells:
            if any(i.name == "LOAD_CLOSURE" and i.arg == n and loop.index <= i.index < loop.arg for i in insts) \
                    and (_written_after(insts, n, loop.index) or any(
                        isinstance(i.arg, types.CodeType) and _code_writes(i.arg, n) for i in insts)):
                shared.add(n)
    seen: set[int] = set()
    todo = list(values)
    while todo:
        v = todo.pop()
        if not isinstance(v, Value) or id(v) in seen:
            continue
        seen.add(id(v))
        if isinstance(v, UserFunctionValue):
            for name, cell in zip(v.fn.__code__.co_freevars, v.closure or ()):
                own = next((n for n, c in cells.items() if c is cell), None)
                if own is not None and (_code_writes(v.fn.__code__, name) or _written_after(insts, own, index)):
                    shared.add(own)  # also when not set yet (NOTE [Closures over cells not set yet])
                todo.append(getattr(cell, "contents", None))
            todo.extend([*(v.defaults or ()), *(v.kwdefaults or {}).values(), *v.attr_values()])
        elif isinstance(v, SequenceValue):
            todo.extend(v.items)
        elif isinstance(v, DictValue):
            todo.extend(v.items.values())
        elif isinstance(v, NewObjectValue):
            todo.extend(v.attrs.values())
        elif isinstance(v, IteratorValue):
            todo.extend(v.items)
        elif isinstance(v, BoundMethodValue):
            todo.extend([v.func, v.self_value])
        elif isinstance(v, PartialValue):
            todo.extend(partial_parts(v))
        elif isinstance(v, CellValue):
            todo.append(v.contents)
    return shared


_WRITES = ("STORE_DEREF", "DELETE_DEREF")
_JUMPS = {"JUMP", "POP_JUMP_IF_FALSE", "POP_JUMP_IF_TRUE", "POP_JUMP_IF_NONE", "POP_JUMP_IF_NOT_NONE",
          "JUMP_IF_FALSE_OR_POP", "JUMP_IF_TRUE_OR_POP"}


def _written_after(insts: list[Inst], name: str, index: int) -> bool:
    stores = [i.index for i in insts if i.name in _WRITES and i.arg == name]
    if any(store >= index for store in stores):
        return True
    last = max(stores, default=-1)
    return any(i.index >= index and i.name in _JUMPS and isinstance(i.arg, int) and i.arg <= last for i in insts)


def _code_writes(code: types.CodeType, name: str) -> bool:
    for inst in dis.get_instructions(code):
        if inst.opname in _WRITES and inst.argval == name:
            return True
    return any(isinstance(c, types.CodeType) and name in c.co_freevars and _code_writes(c, name)
               for c in code.co_consts)
