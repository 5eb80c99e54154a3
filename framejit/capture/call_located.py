"""Functions and code objects of a persisted entry found through the arguments of the call that loads it.

NOTE [Code found through the call's arguments]: an entry names the functions it inlined and the code objects
its guards compare (`L['module']._modules['0']._forward_pre_hooks[0].__code__ is ___c27`) by locators that a
new process resolves from the function alone: an importable name, a closure path, the enclosing function's
constants. A lambda made at a script's top level (`m.register_forward_hook(lambda mod, args, out: out + 1)`)
has none: its code is a constant of the module's top-level code, which nothing keeps. Such entries were kept
in memory only (tools/warm_gaps.py module_hooks traced 1 frame in every warm process). When a guard of the
entry reads the function's code through a source rooted at the frame's own arguments, the code is saved as
that source with its code hash, and the loading call evaluates the source over its own arguments: the code
found there must hash as the traced one did (bytecode, constants, names: `locators.code_hash`), else the entry
is not used. The guard then compares that very object at every later call, so a call whose function has
another code object (even an equal one) fails it and is traced; the entry holds only for code equal to what
was traced. A source the loading call cannot read (the hook is gone) leaves the entry unused.
"""
from __future__ import annotations

import inspect
import types
from typing import Any

from .locators import NotPersistable, code_hash
from .sources import AttrSource, LocalSource, NameTable


def _rooted_in_arguments(source: Any) -> bool:
    while hasattr(source, "base"):
        source = source.base
    return isinstance(source, LocalSource)


def record_code_source(output, function: types.FunctionType, source: Any) -> None:
    """Called where a function read through `source` is guarded by its code (NOTE [Closures guarded by
    code]): the first source rooted at the frame's arguments that reads each code object."""
    if _rooted_in_arguments(source):
        output.__dict__.setdefault("code_sources", {}).setdefault(id(function.__code__), (function.__code__, source))


def _code_source(output, code: Any):
    """The source, rooted at the frame's arguments, of a function whose code the entry guards by identity."""
    code_object, source = output.__dict__.get("code_sources", {}).get(id(code), (None, None))
    return AttrSource(source, "__code__") if code_object is code and code is not None else None


def code_by_call(code: types.CodeType, output, fn: types.FunctionType) -> tuple | None:
    """("call_code", encoded source, hash) for a code object a guard reads through the arguments, or None."""
    from .frame_cache import encode_source
    source = _code_source(output, code)
    return None if source is None else ("call_code", encode_source(source, fn), code_hash(code))


def function_by_call(f: Any, output, fn: types.FunctionType) -> tuple | None:
    """("call_function", encoded source) for an inlined function whose code a guard reads through the
    arguments (its hash is the callee's digest, checked by `restore`), or None."""
    from .frame_cache import encode_source
    source = _code_source(output, getattr(f, "__code__", None))
    return None if source is None else ("call_function", encode_source(source.base, fn))


def call_locals(fn: types.FunctionType, args: tuple, kwargs: dict) -> dict[str, Any] | None:
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except TypeError:
        return None
    bound.apply_defaults()
    return dict(bound.arguments)


def resolve_by_call(locator: tuple, fn: types.FunctionType, frame_locals: dict | None,
                    namespace: dict[str, Any]) -> Any:
    """The object a "call_code" or "call_function" locator names in this call (NOTE [Code found through the
    call's arguments]), or NotPersistable."""
    from .frame_cache import decode_source
    if frame_locals is None:
        raise NotPersistable("the loading call's arguments do not bind")
    names = NameTable()
    names.by_id = {id(obj): name for name, obj in namespace.items()}
    try:
        found = eval(decode_source(locator[1], fn).expr(names), dict(namespace), dict(frame_locals))
    except Exception as e:
        raise NotPersistable(f"the loading call has no object at a cached source: {type(e).__name__}") from None
    if locator[0] == "call_code" and (not isinstance(found, types.CodeType) or code_hash(found) != locator[2]):
        raise NotPersistable("a code object read through the call's arguments changed since it was cached")
    if locator[0] == "call_function" and not isinstance(found, types.FunctionType):
        raise NotPersistable("a function read through the call's arguments is no function")
    return found

