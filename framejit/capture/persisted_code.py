"""Transformed code persisted instruction by instruction: warm starts for frames that break.

Role: the frame cache (frame_cache.py) rebuilds an ordinary entry's transformed function from a small
plan (graph inputs, return value). A frame that graph-breaks has a transformed function no plan
describes: it calls the graph, replays side effects, runs the breaking instruction and calls a resume
function through its frame hook. This module saves that function's instruction list as it was
generated, with every constant it loads replaced by a description that finds the same object in a new
process, and rebuilds it there.

# NOTE [Persisted break code]
# The constants of generated code are (a) the compiled graph, (b) objects framejit made for this frame:
# the frame hook of a resume function (Hooks.resume: rebuilt from (index, stack layout, live names,
# hooked), which regenerates the same resume code, whose own entries the frame cache finds by its code
# hash), the frame hook of a user function called at the break (Hooks.function), the module-call and
# call-through-hook helpers, and (c) plain values and importable objects (`locators.locate`). A
# `Recorder` wraps the hooks BreakCodegen uses and remembers what each call returned, so that (b) is
# recognised by identity (a break in a try block: NOTE [Persisted try-block successors]). Anything else (a
# resume of another code object, an object with no importable name) makes the entry NotPersistable: it is
# then kept in memory only, as before. Guards, graph and artifact are persisted as for any entry.

Main names: `Recorder`, `dump_code(fn, cg, compiled, recorder) -> bytes`,
`load_code(fn, data, compiled, hooks) -> Codegen`.
"""
from __future__ import annotations

import enum
import pickle
import types
from typing import Any

import bytecode
from bytecode import CellVar, FreeVar, Instr, Label

from .codegen import Codegen
from .sources import with_prologue
from .locators import NotPersistable, _import_locator, code_hash, code_locator, locate, resolve


class Recorder:
    """The hooks BreakCodegen uses (convert._BoundHooks), remembering what each call made."""

    def __init__(self, hooks) -> None:
        self.hooks = hooks
        self.made: dict[int, tuple] = {}
        self._keep: list = []  # the made objects stay alive, so their ids stay theirs

    def _note(self, obj: Any, description: tuple) -> Any:
        self.made[id(obj)] = description
        self._keep.append(obj)
        return obj

    def function(self, fn: types.FunctionType):
        return self._note(self.hooks.function(fn), ("hook", fn))

    def module_call(self):
        return self._note(self.hooks.module_call(), ("module_call",))

    def module_forward(self, forward: types.FunctionType):
        return self._note(self.hooks.module_forward(forward), ("module_forward", forward))

    def call_through_hook(self):
        return self._note(self.hooks.call_through_hook(), ("call_through_hook",))

    def comprehension_call(self):  # NOTE [Comprehensions called at breaks] in python_loops.py
        from .python_loops import comprehension_caller
        return self._note(comprehension_caller(self.hooks.hooks.call_hooked()), ("comprehension_call",))

    def checkpoint_through_hook(self):
        # NOTE [Reentrant checkpoint at a break] (hook.py); self.hooks is convert._BoundHooks
        return self._note(self.hooks.hooks.checkpoint_through_hook, ("checkpoint_through_hook",))

    def apply_through_hook(self):  # NOTE [Custom Function forwards at breaks] in apply_at_break.py
        return self._note(self.hooks.hooks.apply_through_hook, ("apply_through_hook",))

    def resume(self, code, index, layout, names, hooked=True, successors=(), python_loop=None, cells=()):
        # NOTE [Persisted loops run as Python]: the tail function of a loop run as Python is described by
        # its loop (FOR_ITER index, the hooked resume function after the loop, that one's stack layout);
        # the hook after the loop was made through this recorder too, so it is found by identity; its live
        # names, where they are not the tail's (an inlined comprehension's result, 3.12+), are described too
        loop = None
        if python_loop:
            loop_index, after_hook, after_layout = python_loop
            after = self.made.get(id(after_hook))
            loop = (loop_index, after, after_layout, after_hook) if after and after[0] == "resume" else False
        # NOTE [Persisted cells passed on]: the names of the locals passed as cells (NOTE [Cells passed to
        # resume functions] in resume.py) are described with the live names, as (names, cells)
        return self._note(self.hooks.resume(code, index, layout, names, hooked, successors, python_loop, cells),
                          ("resume", code, index, layout, (names, cells) if cells else names, hooked, successors,
                           loop))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.hooks, name)


class _NoArg:
    """Stands for bytecode.UNSET (a singleton that does not unpickle)."""


def _instr(name: str, arg: Any, lineno: Any) -> tuple:
    """An Instr as a plain (name, operand, lineno) tuple (labels stay Label objects)."""
    return (name, arg, lineno if type(lineno) is int else None)


class _Const:
    """Stands for a LOAD_CONST operand in the persisted instruction list."""

    def __init__(self, description: tuple) -> None:
        self.description = description


# NOTE [Persisted handed calls]: the tail call into a hooked resume function loads the plain function
# `lifetimes.caller(hook, n)` made for that hook (NOTE [The handed call's hit path] in lifetimes.py). It is
# described by the hook's description and n, and made again for the loaded hook on load.
def _describe(value: Any, fn: types.FunctionType, compiled: Any, recorder: Recorder | None) -> tuple:
    if compiled is not None and value is compiled:
        return ("graph",)
    handed = getattr(value, "__framejit_handed__", None) if isinstance(value, types.FunctionType) else None
    if handed is not None:
        return ("handed", _describe(handed[0], fn, compiled, recorder), handed[1])
    from .nested_persist import describe
    nested = describe(value, fn, _dynamic_state)  # NOTE [Nested breaks persisted] in nested_persist.py
    if nested is not None:
        return nested
    made = recorder.made.get(id(value)) if recorder is not None else None
    if made is not None:
        kind = made[0]
        if kind in ("hook", "module_forward"):  # a nested break's Rk by what made it (review revI LOW-3)
            return (kind, locate(made[1], fn) if hasattr(made[1], "__framejit_nested__") else _import_locator(made[1]))
        if kind == "resume":
            _, code, index, layout, names, hooked, successors, loop = made
            if loop is False:
                raise NotPersistable("the loop run as Python resumes in a function made elsewhere")
            tail = _describe_successors(recorder, code, names, successors) if successors else None
            if loop is not None:  # NOTE [Persisted loops run as Python]
                loop_index, after, after_layout, after_hook = loop
                _, after_code, exit_index, _, after_names, after_hooked, _, _ = after
                if after_code is not code or not after_hooked:
                    raise NotPersistable("the loop run as Python resumes in another function after it")
                # the function after an inlined comprehension (3.12+) takes its result as a local too
                loop = (loop_index, exit_index, after_layout, _dynamic_state(after_hook)) + \
                    ((after_names,) if after_names != names else ())
            if tail is not None:  # NOTE [Persisted try-block successors]
                loop = None
            extra = (loop or None, tail, _dynamic_state(value))  # NOTE [Persisted dynamic state of resume hooks]
            if code is fn.__code__:
                return ("resume", index, layout, names, hooked) + extra
            # a break inside a resume function resumes in the original function's code: found by name, and
            # its hash checked on load (a change before the break leaves this resume code as it was)
            # (NOTE [Nested code by its enclosing function], NOTE [Functions under their decorators])
            locator = code_locator(code, [fn.__module__])
            if locator is None:
                raise NotPersistable(f"the break resumes in {code.co_qualname}, which cannot be found by name")
            return ("resume_in", locator, code_hash(code), index, layout, names, hooked) + extra
        return (kind,)
    if type(value) is tuple and all(isinstance(v, (bool, int, float, str, bytes, type(None))) for v in value):
        return ("value", value)
    if isinstance(value, types.CodeType):  # NOTE [Functions made per call, persisted]
        locator = code_locator(value, [fn.__module__])
        if locator is None:
            raise NotPersistable(f"the code of {value.co_qualname} cannot be found by name")
        return ("locate", ("hashed", locator, code_hash(value)))
    return ("locate", locate(value, fn))


# NOTE [Persisted try-block successors]: a break inside a try block resumes in a plain tail function whose
# edges out of the break instruction trampoline into hooked resume functions of the same code (NOTE [Breaks
# inside try blocks] in graph_break.py); torch's optimizers break there on every step (`step` runs inside
# `_use_grad_for_differentiable`'s try/finally). Those resume functions were made through the Recorder,
# so each is described by its (index, stack layout) and made again on load, in the same order, before the
# tail that trampolines into them; anything else among the successors keeps the entry in memory only.
def _describe_successors(recorder: Recorder, code: types.CodeType, names: tuple, successors: tuple) -> tuple:
    described = []
    for edge, hook, after in successors:
        made = recorder.made.get(id(hook))
        if made is None or made[0] != "resume" or made[1] is not code or made[4] != names or not made[5] \
                or made[6] or made[7] is not None or made[3] != after:
            raise NotPersistable("the break has try-block successors that are no resume functions of its code")
        described.append((edge, made[2], after, _dynamic_state(hook)))
    return tuple(described)


def _plain_arg(arg: Any) -> bool:
    """Operands other than constants: names, numbers, jump targets, cells, enums (no live objects)."""
    if arg is bytecode.UNSET or isinstance(arg, (str, int, Label, CellVar, FreeVar, enum.Enum)):
        return True
    return type(arg) is tuple and all(isinstance(a, (bool, int, str)) for a in arg)


def dump_code(fn: types.FunctionType, cg: Codegen, compiled: Any, recorder: Recorder | None) -> bytes:
    """The persisted form of the instructions `cg` holds (raises NotPersistable)."""

    insts, graph_call, call = [], None, getattr(cg, "graph_call", None)
    at = {id(inst): k for k, inst in enumerate(with_prologue(cg))}
    for inst in with_prologue(cg):  # NOTE [Referents loaded once, at entry]
        if call is not None and inst is call:
            graph_call = len(insts)
        if not isinstance(inst, Instr):
            insts.append(inst)  # labels, try-block markers
        elif inst.name == "LOAD_CONST":
            insts.append(_instr(inst.name, _Const(_describe(inst.arg, fn, compiled, recorder)), inst.lineno))
        elif not _plain_arg(inst.arg):
            raise NotPersistable(f"{inst.name} has an operand of type {type(inst.arg).__name__}")
        else:
            insts.append(_instr(inst.name, _NoArg if inst.arg is bytecode.UNSET else inst.arg, inst.lineno))
    try:
        # NOTE [Rebuilt floats that raise]: which instructions are the prologue's and the rebuilt floats'
        floats = [(at[id(first)], at[id(last)]) for first, last in getattr(cg, "float_spans", ())]
        return pickle.dumps((insts, graph_call, len(getattr(cg, "prologue", ())), floats))
    except Exception as e:
        raise NotPersistable(f"the transformed code cannot be pickled: {type(e).__name__}: {e}") from None


def load_code(fn: types.FunctionType, data: bytes, compiled: Any, hooks) -> Codegen:
    """A Codegen holding the persisted instructions with their constants found again (raises on failure);
    `hooks` is the request's Hooks."""

    insts, graph_call, prologue, floats = pickle.loads(data)
    cg = Codegen()
    for item in insts:
        if not isinstance(item, tuple):
            cg.insts.append(item)
            continue
        name, arg, lineno = item
        if isinstance(arg, _Const):
            arg = _load_const(arg.description, fn, compiled, hooks)
        inst = Instr(name, lineno=lineno) if arg is _NoArg else Instr(name, arg, lineno=lineno)
        cg.insts.append(inst)
    if graph_call is not None:
        cg.graph_call = cg.insts[graph_call]
    cg.float_spans = [(cg.insts[first], cg.insts[last]) for first, last in floats]  # NOTE [Rebuilt floats that raise]
    cg.prologue, cg.insts = cg.insts[:prologue], cg.insts[prologue:]
    return cg


def _load_const(d: tuple, fn: types.FunctionType, compiled: Any, hooks) -> Any:
    """The object a LOAD_CONST operand's description `d` (`_describe`) finds in this process."""
    kind = d[0]
    if kind == "graph":
        if compiled is None:
            raise NotPersistable("the code calls a graph the entry does not have")
        return compiled
    if kind == "handed":  # NOTE [Persisted handed calls]
        from .lifetimes import caller
        return caller(_load_const(d[1], fn, compiled, hooks), d[2])
    if kind == "hook":
        return hooks.function(resolve(d[1], fn))
    if kind == "module_call":
        return hooks.module_call()
    if kind == "module_forward":
        return hooks.module_forward(resolve(d[1], fn))
    if kind == "call_through_hook":
        return hooks.call_through_hook
    if kind == "checkpoint_through_hook":
        return hooks.checkpoint_through_hook
    if kind == "apply_through_hook":
        return hooks.apply_through_hook
    if kind == "comprehension_call":
        from .python_loops import comprehension_caller
        return comprehension_caller(hooks.call_hooked())
    if kind == "resume":
        return _load_resume(hooks, fn, fn.__code__, *d[1:])
    if kind == "resume_in":
        code = resolve(d[1], fn)
        code = code if isinstance(code, types.CodeType) else code.__code__
        if code_hash(code) != d[2]:
            raise NotPersistable(f"{code.co_qualname} changed since it was cached")
        return _load_resume(hooks, fn, code, *d[3:])
    if kind == "value":
        return d[1]
    if kind in ("nested", "nested_step"):  # NOTE [Nested breaks persisted] in nested_persist.py
        from .nested_persist import load
        return load(d, fn, hooks, _restore_dynamic_state)
    return resolve(d[1], fn)


# NOTE [Persisted dynamic state of resume hooks]: a break hands the resume function's hook what is dynamic
# there from its first trace (NOTE [Dynamic ints formatted into strings], NOTE [Symbols carried into resume
# functions], NOTE [Loops over sequences of changing length]: `d` of `d = {i: x[i] for i in ...}` is opaque, so
# a loop over it runs as Python). That happens while the breaking frame is traced: in a warm process whose
# breaking frame is loaded from the frame cache, a resume function that is not served from the cache (an entry
# kept in memory only, a new size) was traced with nothing marked: the loop over the dict was unrolled per
# size, or stepped into the dict's mutation (8 eager frames, review revX F3). The hook's marks (dynamic ints,
# floats, dims) are persisted with the code that calls it and given back to the hook when that code is loaded.
# They only make values symbolic or opaque, each still guarded by type or relation, so they are never unsound.
def _dynamic_state(hook: Any) -> tuple | None:
    state = tuple(getattr(hook, name, None) for name in ("dynamic_ints", "dynamic_floats", "dynamic_dims"))
    if None in state or not any(state):
        return None
    ints, floats, dims = state
    return (frozenset(ints), frozenset(floats), {source: frozenset(d) for source, d in dims.items()})


def _restore_dynamic_state(hook: Any, state: tuple | None) -> Any:
    if state is not None and hasattr(hook, "dynamic_dims"):
        ints, floats, dims = state
        hook.dynamic_ints = hook.dynamic_ints | (ints - hook.__dict__.get("never_opaque", frozenset()))
        hook.dynamic_floats = hook.dynamic_floats | floats
        merged = dict(hook.dynamic_dims)
        for source, d in dims.items():
            merged[source] = merged.get(source, frozenset()) | d
        hook.dynamic_dims = merged
    return hook


def _load_resume(hooks, fn: types.FunctionType, code: types.CodeType, index: int, layout: tuple, names: tuple,
                 hooked: bool, loop: tuple | None = None, tail: tuple | None = None, state: tuple | None = None):
    """The resume (or tail) function described by `_describe` (NOTE [Persisted loops run as Python], NOTE
    [Persisted try-block successors]), with its hook's dynamic `state` (NOTE [Persisted dynamic state of resume
    hooks]): the hooked resume functions a tail trampolines into, or the one after a loop run as Python, are
    made first, as BreakCodegen made them."""
    return _restore_dynamic_state(_made_resume(hooks, fn, code, index, layout, names, hooked, loop, tail), state)


def _made_resume(hooks, fn, code, index, layout, names, hooked, loop, tail):
    cells: tuple = ()
    if names and type(names[0]) is tuple:  # NOTE [Persisted cells passed on]
        names, cells = names
    if tail is not None:
        successors = tuple((edge, _restore_dynamic_state(hooks.resume(code, at, after, names, fn, cells=cells),
                                                         state[0] if state else None), after)
                           for edge, at, after, *state in tail)
        return hooks.resume(code, index, layout, names, fn, hooked, successors, cells=cells)
    if loop is None:
        return hooks.resume(code, index, layout, names, fn, hooked, (), cells=cells)
    loop_index, exit_index, after_layout, *rest = loop
    after_names, after_cells = names, cells
    if len(rest) > 1:  # NOTE [Persisted loops run as Python]: other live names after the loop
        after_names, after_cells = rest[1] if rest[1] and type(rest[1][0]) is tuple else (rest[1], ())
    after = _restore_dynamic_state(hooks.resume(code, exit_index, after_layout, after_names, fn, cells=after_cells),
                                   rest[0] if rest else None)
    return hooks.resume(code, index, layout, names, fn, hooked, (), (loop_index, after, after_layout), cells=cells)


__all__ = ["Recorder", "dump_code", "load_code"]
