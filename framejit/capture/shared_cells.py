"""One hook for the closures a function makes on every call (`def add(a): return a + t` inside it).

NOTE [Closures made per call share one hook]: a nested function with free variables is a new object with new
cells on every call of the function that makes it. Called at a graph break (3.12+ step an inlined
comprehension at a break: `[add(_opaque(x * i)) for i in range(2)]`), each object got a hook of its own
(NOTE [Closures called at breaks]), traced anew on every call until OBJECTS_PER_CODE objects, then run as
plain Python: 5 graphs over 3 calls where stock torch.compile makes 2. Objects of one code whose code only
reads its free variables run alike but for the cells' contents, so they share one hook over a twin function:
the same code, globals, defaults and name, with cells of its own. A call copies the called object's cell
contents into the twin's cells, runs the twin through its hook (guards read the twin's cells, as for any
closure: a changed value fails a guard and retraces, as in any frame), and empties the twin's cells again
(they must not keep the values alive). So the code is traced once per guard set, not once per object.
Only when that is exact:
- the code never writes, deletes or passes on a free variable (no instruction but LOAD_DEREF names one:
  STORE_DEREF, DELETE_DEREF, LOAD_CLOSURE or 3.13's LOAD_FAST of the cell; an inner closure or a `nonlocal`
  would hold or change the twin's cell, not the object's), and it is
  not a generator or coroutine (its frame would read the cells after the call);
- the objects have the same globals and defaults (the same objects) as the first one;
- one call at a time: a call made while the twin runs takes the object's own hook (Hooks.for_object, one per
  object as before), so it is still captured: transformers stacks wrappers of one code (`can_return_tuple`'s
  wrapper around Gemma3ForConditionalGeneration.forward calls the one around Gemma3Model.forward), and running
  the inner one as plain Python ran the whole inner model uncaptured and uncounted (Gemma3: 1 graph per call
  instead of 4, 0 eager frames reported). Only a call from another thread racing the check runs the object
  itself, as does an object with an empty cell (its read raises NameError in the object's own frame, as eager).
The twin's frame shows the object's code, qualified name, arguments and free variables' values, but it is not
the same function object (a function reading its own identity through a global name sees the object made by
its maker either way).
"""
from __future__ import annotations

import dis
import threading
import types
from typing import Any, Callable

_GENERATOR_FLAGS = 0x20 | 0x80 | 0x100 | 0x200  # CO_GENERATOR, CO_COROUTINE, CO_ITERABLE_COROUTINE, CO_ASYNC_GENERATOR
_SLOT_OPS = ("FAST", "DEREF", "CLOSURE")  # instructions naming a local slot (3.13 passes a cell with LOAD_FAST)
_ELIGIBLE: dict[types.CodeType, bool] = {}


def reads_free_variables_only(code: types.CodeType) -> bool:
    """The code only reads its free variables, and its frame ends with the call (NOTE [Closures made per call
    share one hook])."""
    known = _ELIGIBLE.get(code)
    if known is None:
        free = set(code.co_freevars)
        known = _ELIGIBLE[code] = bool(free) and not code.co_flags & _GENERATOR_FLAGS and not any(
            _uses_cell(inst, free) for inst in dis.get_instructions(code))
    return known


def _uses_cell(inst: dis.Instruction, free: set) -> bool:
    """The instruction writes, deletes or passes on a free variable's cell: anything but LOAD_DEREF."""
    if inst.opname == "LOAD_DEREF" or not any(part in inst.opname for part in _SLOT_OPS):
        return False
    names = inst.argval if isinstance(inst.argval, tuple) else (inst.argval,)
    return any(name in free for name in names)


class SharedCellsHook:
    """The hook of a twin of `first` with cells of its own, called as `shared(target, *args, **kwargs)` for any
    object of the same code that `accepts` (NOTE [Closures made per call share one hook])."""

    def __init__(self, first: types.FunctionType, make_hook: Callable[[types.FunctionType], Any]) -> None:
        self.code, self.globals = first.__code__, first.__globals__
        self.defaults, self.kwdefaults = first.__defaults__, first.__kwdefaults__
        self.cells = tuple(types.CellType() for _ in first.__closure__)
        twin = types.FunctionType(self.code, self.globals, first.__name__, self.defaults, self.cells)
        twin.__kwdefaults__ = self.kwdefaults
        twin.__qualname__, twin.__module__ = first.__qualname__, first.__module__
        self.twin = twin
        self.hook = make_hook(twin)
        self.lock = threading.Lock()

    def accepts(self, fn: types.FunctionType) -> bool:
        from .hook import _same_items
        kw_mine, kw_other = self.kwdefaults or {}, fn.__kwdefaults__ or {}
        return fn.__code__ is self.code and fn.__globals__ is self.globals and \
            _same_items(self.defaults, fn.__defaults__) and kw_mine.keys() == kw_other.keys() and \
            all(kw_mine[k] is kw_other[k] for k in kw_mine) and \
            self.twin.__defaults__ is self.defaults and self.twin.__kwdefaults__ is self.kwdefaults

    def busy(self) -> bool:
        """The twin is running (a call of an object of this code is under way): a nested call must take its
        own hook (Hooks.for_object), not run as plain Python."""
        return self.lock.locked()

    def __call__(self, target: types.FunctionType, *args: Any, **kwargs: Any) -> Any:
        if not self.lock.acquire(blocking=False):
            return target(*args, **kwargs)  # a call inside the twin's own call, or from another thread
        try:
            try:
                for mine, theirs in zip(self.cells, target.__closure__):
                    mine.cell_contents = theirs.cell_contents
            except ValueError:  # an empty cell: its read raises in the object's own frame
                self._empty()
                return target(*args, **kwargs)
            try:
                return self.hook(*args, **kwargs)
            finally:
                self._empty()
        finally:
            self.lock.release()

    def _empty(self) -> None:
        for mine in self.cells:
            try:
                del mine.cell_contents
            except ValueError:
                pass
