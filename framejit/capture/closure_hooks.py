"""One frame hook for the closures of one code that are made anew on each call.

NOTE [Closures made per call share a hook through their cells]: a nested function with free variables is
a new object, over new cells, on every call of the function that makes it; called at a break (3.12 steps an
inlined comprehension at a break and calls `[add(_opaque(x * i)) for i in ...]`'s `add` through
`Hooks.call_through_hook`), one hook per object traced it again on every call (5 frames and 4 graphs over 3
calls where stock makes 3 and 2), until OBJECTS_PER_CODE objects ran as plain Python.

Objects of one code, globals, builtins and defaults (the same objects) differ only in their cells. So they
share one `ClosureHook`, which traces with its root frame's cells read through the object being called
(NOTE [Cells read through the function called] in closure_cells.py): a call sets the hook's thread-local
`current.fn` to its object for the duration of the call, the guards judge that object's cell contents (a
new closure per call hits the same entry when its contents pass the guards), the transformed function reads
the original cells at call time (never values captured at trace time) and replays `nonlocal` stores into
them. Cells that the trace writes are guarded against every other real cell it read (NOTE [Aliased cells
are guarded]). A first attempt (a76a769) ran a twin function over *copies* of the cells; a function that
wrote an original cell during the call (`setter(v): nonlocal t; t = v` called by the closure) left the
twin reading its stale copy (review revC C6): here nothing is copied.

Only entries that capture the whole frame are shared: an entry that breaks calls resume functions made
over the traced object's own cells (NOTE [Resume functions of closures] in hook.py), and an eager entry
runs the traced object itself. Such an entry moves to a hook of the traced object alone (reading its cells
through the same `current`, so the entry stays valid there and a later call of that object is not traced
again), and from then on the code takes the per-object hooks of NOTE [Closures called at breaks]. Generator and coroutine codes are never
shared (their frames outlive the call). The shared hook never reads or writes the frame cache: its entries
name the hook's own `current` object, which no other process has. So it serves only requests that do not
persist (the frame cache off, or a backend without artifacts): with the cache on, the per-object hooks
persist their entries and the next object of the code loads them (3.12, the program above over 4 calls:
3 frames traced, 3 loaded, no retrace), and a closure whose trace breaks (an optimizer's
`profile_hook_step` wrapper) must be persisted for warm processes, which a shared trace cannot be.
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
import types
from typing import Any

from .. import config, logs
from .closure_cells import Current, tracing_through
from .hook import COMPILE_LOCK, FrameHook

_NOT_SHARED_FLAGS = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR | \
    inspect.CO_ITERABLE_COROUTINE


class ClosureHook(FrameHook):
    """A FrameHook whose function is the closure object being called now (per thread)."""

    def __init__(self, fn: types.FunctionType, request, per_object: set, current: Current | None = None) -> None:
        self.current = Current() if current is None else current
        self.first = fn  # keeps the key's code, globals, builtins and defaults alive
        self.per_object = per_object
        self.own = current is not None  # the hook of one object, sharing `current` with the shared hook
        super().__init__(fn, dataclasses.replace(request, artifacts=None))  # never persisted (see the NOTE)
        if not self.own:  # NOTE [The shared hook keeps no cells]
            self.first = _over_empty_cells(fn)

    @property
    def fn(self) -> types.FunctionType:
        current = self.current.fn
        return self.first if current is None else current

    @fn.setter
    def fn(self, value: types.FunctionType) -> None:
        self.first = value

    # NOTE [A shared closure hook runs the object called now]: what runs a call eagerly (past the recompile
    # limit, a graph error's rerun, a disabled code, FX tracing) is the closure object of this call, over its
    # own cells. The first object (FrameHook.__init__'s `eager`) is a dead call's closure: its results came
    # from that call's cells and its appends went to that call's list (review revU U3/U3b).
    @property
    def eager(self) -> types.FunctionType:
        return self.fn

    @eager.setter
    def eager(self, value: types.FunctionType) -> None:
        pass  # always the object called now (above)

    def call(self, fn: types.FunctionType, *args: Any, **kwargs: Any) -> Any:
        current = self.current
        previous, current.fn = current.fn, fn
        try:
            return FrameHook.__call__(self, *args, **kwargs)
        finally:
            current.fn = previous

    def _load_persisted(self, args: tuple, kwargs: dict):
        return None

    def _find_or_compile(self, args: tuple, kwargs: dict):
        with COMPILE_LOCK:
            before = self.entries
            with tracing_through(self.fn, self.current):
                entry = super()._find_or_compile(args, kwargs)
            if self.own or entry is None or any(e is entry for e in before) or _whole_frame(entry, self.code):
                return entry
            self.entries = [e for e in self.entries if e is not entry]
            self.per_object.add(self.code)
            # the entry goes to a hook of this object only, which reads its cells through the same `current`
            fn, hooks = self.fn, self.request.hooks
            own = ClosureHook(fn, self.request, self.per_object, current=self.current)
            own.entries = [entry]
            hooks.by_key[("function", fn)] = functools.partial(own.call, fn)
            hooks.objects_per_code[self.code] = hooks.objects_per_code.get(self.code, 0) + 1
            logs.log("recompiles", "%s: a closure made per call breaks (or runs eagerly); its objects take a hook "
                     "each from now on (NOTE [Closures made per call share a hook through their cells])",
                     self.code.co_qualname)
            return entry


# NOTE [The shared hook keeps no cells]: the shared hook lives as long as its Hooks and kept its first closure
# object, whose cells held that call's variables for good: `k = T(); def get(): return k.n` in a compiled
# function whose call breaks kept the first call's `k` alive after the call returned (its `__del__`, a weakref
# callback never ran; eager frees it when the call returns). What the hook needs of that object outside a call
# is its code, globals and defaults (the key's); every call runs the object called now. So it keeps a copy of
# the first object over empty cells.
def _over_empty_cells(fn: types.FunctionType) -> types.FunctionType:
    copy = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__,
                              tuple(types.CellType() for _ in fn.__closure__))
    copy.__kwdefaults__, copy.__qualname__ = fn.__kwdefaults__, fn.__qualname__
    return copy


def _whole_frame(entry, code: types.CodeType) -> bool:
    return entry.graph_break is None and entry.user_error is None and \
        getattr(entry.fn, "__code__", code) is not code


def closure_hook(hooks, fn: types.FunctionType):
    """The shared hook's call for closure `fn`, or None when its code takes per-object hooks."""
    code = fn.__code__
    per_object = hooks.__dict__.setdefault("per_object_closures", set())
    if code in per_object or code.co_flags & _NOT_SHARED_FLAGS or not fn.__closure__ or \
            hooks.request.artifacts is not None and config.cache_enabled:  # persisted: per-object hooks (above)
        return None
    key = ("closure", code, id(fn.__globals__), id(fn.__builtins__),
           None if fn.__defaults__ is None else tuple(map(id, fn.__defaults__)),
           tuple((k, id(v)) for k, v in (fn.__kwdefaults__ or {}).items()))
    hook = hooks.by_key.get(key)
    if hook is None:
        if (fn.__defaults__ or fn.__kwdefaults__) and objects_exceeded(hooks, fn):
            return None  # NOTE [Functions made per call with their own defaults]: plain Python (for_object)
        hook = hooks.by_key[key] = ClosureHook(fn, hooks.request, per_object)
    return functools.partial(hook.call, fn)


__all__ = ["ClosureHook", "closure_hook", "objects_exceeded"]


# NOTE [Functions made per call with their own defaults]: `fns.append(lambda r=r, s=s: r * s)` in a loop, then
# `[f() for f in fns]` (or a loop over them) run as Python with its calls routed (NOTE [Callees routed in
# loops run as Python] in python_loops.py): each lambda has defaults of its own, so each got a hook of its own
# (Hooks._same_code_hook), traced once and never hit again: one compile per call for ever, every object kept
# alive by the hook table. As for closures called at breaks (NOTE [Closures called at breaks] in hook.py), a
# code gets at most OBJECTS_PER_CODE hooks of its own objects; past that its new objects run as plain Python
# (the `recompiles` log says so once). The same for closures with defaults of their own (`lambda i=i: x[i] * i`
# over range(x.size(0))): the shared hook of NOTE [Closures made per call share a hook through their cells] is
# keyed by its defaults' ids, so each new default value made a new shared hook, traced again for good (graphs
# grew by about two per call over growing lengths); a new such hook counts as one object of its code.
def objects_exceeded(hooks, fn: types.FunctionType) -> bool:
    """True when `fn` would be a hook of its own past OBJECTS_PER_CODE for its code; else counts it."""
    counts, code = hooks.objects_per_code, fn.__code__
    if counts.get(code, 0) < hooks.OBJECTS_PER_CODE:
        counts[code] = counts.get(code, 0) + 1
        return False
    if counts[code] == hooks.OBJECTS_PER_CODE:
        counts[code] += 1
        logs.log("recompiles", "%s: more than %d function objects of this code were called through hooks; the "
                 "others run as plain Python", code.co_qualname, hooks.OBJECTS_PER_CODE)
    return True
