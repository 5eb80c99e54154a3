"""Run-time helpers that generated code calls to rebuild values made while tracing: mappings
(capture/mappings.py), torch grad-mode context managers not yet entered at a graph break, and exceptions.

Kept apart from mappings.py so that the code emitted for a compiled frame imports nothing of the
translator when it runs.
"""
from __future__ import annotations

import collections
import functools
import types
from typing import Any


def make_defaultdict(factory: Any, items: dict) -> collections.defaultdict:
    """The defaultdict a DefaultDictValue stands for."""
    return collections.defaultdict(factory, items)


def view_of(d: dict, kind: str) -> Any:
    """`d.keys()`, `d.values()` or `d.items()` of the rebuilt dict (NOTE [Live dict views])."""
    return getattr(d, kind)()


def view_of_object(obj: dict, ordered: bool, kind: str) -> Any:
    """`dict.keys(obj)` (or OrderedDict's, values, items) of a dict-subclass object from outside: the live
    view of the object itself (NOTE [Views of dict objects from outside] in dict_objects.py)."""
    return getattr(collections.OrderedDict if ordered else dict, kind)(obj)


def make_reordered(cls: type, underlying: dict, linked: tuple) -> collections.OrderedDict:
    """An OrderedDict (subclass) whose underlying dict iterates as `underlying` and whose own order is
    `linked` (NOTE [Reordered OrderedDicts made in the trace] in mappings.py)."""
    od = cls(underlying)
    for key in linked:
        collections.OrderedDict.move_to_end(od, key)  # not a subclass's own
    return od



# NOTE [Exceptions made while tracing]: `ValueError("v")` with constant arguments is folded to a real
# exception object while tracing, but an exception is mutable (`add_note`, `__traceback__`, attributes the
# user sets): loading that one object as a constant handed every call the same exception, whose notes
# piled up from call to call (red team 6). The generated code makes a new one per call from the traced
# object's type, args and instance dict. Only classes CPython makes without running Python code are folded
# (calls.builtin_made): a Python __init__ or __new__ is the user's code (a side effect, attributes computed
# from other arguments that type(e)(*e.args) would not rebuild), so making such an exception is a graph break.
def fresh_exception(template: BaseException) -> BaseException:
    """A new exception equal to `template` (NOTE [Exceptions made while tracing])."""
    cls = type(template)  # NOTE [Exceptions with a Python __init__]: made as CPython's __new__ makes it
    exc = cls.__new__(cls, *template.args) if isinstance(cls.__init__, types.FunctionType) else cls(*template.args)
    for name, value in getattr(template, "__dict__", {}).items():
        setattr(exc, name, value.copy() if type(value) is list else value)
    if template.__cause__ is not None:  # NOTE [StopIteration leaving a generator body] in lazy_generators.py
        exc.__cause__ = exc.__context__ = fresh_exception(template.__cause__)
    return exc


def fresh_exception_raised_at(template: BaseException, line: int | None, callees: tuple = (), members: tuple = (),
                              *obj: Any, _depth: int = 1) -> BaseException:
    """fresh_exception(template) with the traceback eager's would start with: the calling frame (the compiled
    code of the function that caught it) at the user's line `line`, then an entry per inlined callee it was
    raised in (NOTE [Tracebacks of caught exceptions]; none for None: caught in an inlined callee), and eager's
    context; with the members CPython set on it, and an AttributeError's object when given (NOTE [Members of
    caught exceptions] in caught_exceptions.py)."""
    import sys
    exc = fresh_exception(template)
    for name, value in members:
        setattr(exc, name, value)
    if obj:
        exc.obj = obj[0]
    if line is not None:
        tb = None
        for name, qualname, filename, firstlineno, module, lineno in reversed(callees):
            tb = types.TracebackType(tb, made_frame(name, qualname, filename, firstlineno, module), -1, lineno)
        exc.__traceback__ = types.TracebackType(tb, sys._getframe(_depth), -1, line)
    # NOTE [Exceptions raised while handling] (caught_exceptions.py): raised where no handler of the trace was
    # active, its eager context is the exception being handled around the call (a caller's except block)
    context = sys.exc_info()[1]
    if context is not None and context is not exc and exc.__cause__ is None:
        exc.__context__ = context
    return exc


def fresh_exception_with_context(template: BaseException, line: int | None, callees: tuple, members: tuple,
                                 context: BaseException, *obj: Any) -> BaseException:
    """fresh_exception_raised_at(...) raised while `context` was handled (NOTE [Contexts of exceptions raised
    while handling] in caught_exceptions.py)."""
    exc = fresh_exception_raised_at(template, line, callees, members, *obj, _depth=2)  # the caller's frame, not ours
    exc.__context__ = context
    return exc


def fresh_exception_with_cause(template: BaseException, line: int | None, callees: tuple, members: tuple,
                               context: BaseException, cause: BaseException, *obj: Any) -> BaseException:
    """fresh_exception_with_context(...) raised `from` the handled exception (NOTE [New exceptions leaving callees'
    handlers] in caught_exceptions.py): `cause` is its `__cause__` too, which sets `__suppress_context__`."""
    exc = fresh_exception_raised_at(template, line, callees, members, *obj, _depth=2)  # the caller's frame, not ours
    exc.__context__ = context
    exc.__cause__ = cause
    return exc


def _made():  # the code of made_frame's frames: a generator's, so its frame exists before it runs
    yield


@functools.lru_cache(maxsize=256)
def _made_code(name: str, qualname: str, filename: str, firstlineno: int) -> types.CodeType:
    return _made.__code__.replace(co_name=name, co_qualname=qualname, co_filename=filename,
                                  co_firstlineno=firstlineno)


def made_frame(name: str, qualname: str, filename: str, firstlineno: int, module: str | None) -> types.FrameType:
    """A frame standing for an inlined callee's in a traceback (NOTE [Tracebacks of caught exceptions]): its
    code has the callee's names, file and first line, its globals are the callee's module's (where the
    traceback module looks for the source), and it holds no locals."""
    import sys
    found = sys.modules.get(module) if module else None
    f_globals = found.__dict__ if isinstance(getattr(found, "__dict__", None), dict) else {"__name__": module}
    return types.FunctionType(_made_code(name, qualname, filename, firstlineno), f_globals)().gi_frame


def grad_mode_manager(cls: type, mode: Any, prev: Any, entered_prev: Any = None) -> Any:
    """A `no_grad()`/`enable_grad()`/`set_grad_enabled(b)`/`inference_mode(b)`/`autocast(...)` object as the traced code
    made it. `set_grad_enabled` acted on the grad mode when it was made (the code after the break runs in
    that mode already), so it is built without running its __init__: its `prev` is the mode it saw."""
    import torch
    if issubclass(cls, torch.set_grad_enabled):
        obj = cls.__new__(cls)
        obj.prev, obj.mode = prev, mode
        return obj
    if issubclass(cls, torch.inference_mode):
        return cls(mode)
    if cls is torch.autocast:  # mode: (device_type, dtype, enabled, cache_enabled), its positional order
        return cls(*mode)
    obj = cls()
    if entered_prev is not None and cls.__enter__ in (torch.no_grad.__enter__, torch.enable_grad.__enter__):
        obj.prev = entered_prev  # NOTE [Prev of managers made here] in context.py
    return obj


def dict_of_view(view: Any) -> dict:
    """The dict a real dict view (`d.keys()`, ...) shows: the one object its `mapping` proxy refers to."""
    import gc
    return gc.get_referents(view.mapping)[0]


def proxied_dict(proxy: types.MappingProxyType) -> dict:
    """The dict a mappingproxy shows: the one object it refers to (NOTE [Mappingproxies] in mappings.py)."""
    import gc
    return gc.get_referents(proxy)[0]


VIEW_KINDS = {type({}.keys()): "keys", type({}.values()): "values", type({}.items()): "items",
              type(collections.OrderedDict().keys()): "keys", type(collections.OrderedDict().values()): "values",
              type(collections.OrderedDict().items()): "items"}


__all__ = ["VIEW_KINDS", "dict_of_view", "grad_mode_manager", "make_defaultdict", "proxied_dict", "view_of", "view_of_object"]
