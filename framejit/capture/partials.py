"""`functools.partial` objects made while tracing: their attributes, and how they are rebuilt.

A PartialValue holds the abstract `func`, positional `args` and `keywords`. Attribute reads answer
what a real partial answers: `func`, `args` (a tuple), `keywords` (a dict), the type's own attributes
(`__class__`, `__module__`, `__doc__`, slot methods bound to the partial), and AttributeError for a
name the type does not have. A partial made while tracing has an empty instance `__dict__`, so absence
needs no guard. A partial from outside (it has a source) answers `keywords` with its real dict read
through that source, so a write through it is replayed, and a call after such a write breaks (NOTE [Reads
past writes through a namespace dict]: the PartialValue's own keywords were taken when it was wrapped).

NOTE [Partials across breaks]: a partial that is live at a graph break (a local, or on the stack) is
rebuilt at run time as `functools.partial(func, *args, **keywords)` from its rebuilt parts
(codegen.Reconstructor); tensors among its arguments are graph outputs like any other live tensor.
"""
from __future__ import annotations

import functools
import types

from .breaks import BreakKind, Unsupported, UserException
from .codegen_runtime import partial_dict_absent as dict_absent
from .values import (BoundMethodValue, BuiltinValue, ClassValue, ConstantValue, DictValue, PartialValue,
                     TupleValue, Value)

_PARTIAL = functools.partial


def partial_attr(tx, p: PartialValue, name: str) -> Value:
    if name == "func":
        return p.func
    if name == "args":
        return TupleValue(list(p.args))
    if name == "keywords":
        if p.keywords is not None:  # a partial from outside: its real dict, so writes through it are replayed
            from .sources import AttrSource
            from .values.builder import wrap
            return wrap(tx.output, p.keywords, AttrSource(p.source, "keywords"))
        d = DictValue({})
        d.items = p.kwargs  # the partial's own dict: a change through it is seen by later calls
        return d
    if name == "__class__":
        return ClassValue(_PARTIAL)
    if name == "__dict__":  # the partial's own (empty when made) instance dict, one object per partial
        if p.source is not None:
            raise Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE, "the __dict__ of a functools.partial from outside")
        if getattr(p, "instance_dict", None) is None:
            p.instance_dict = DictValue({})
        return p.instance_dict
    own = getattr(p, "instance_dict", None)
    if own is not None and name in own.items:  # NOTE [Attributes of partials made while tracing]
        return own.items[name]
    owner = next((k for k in _PARTIAL.__mro__ if name in vars(k)), None)
    if owner is None:  # instances see their type's MRO only (not the metaclass: no `__name__`)
        raise UserException(AttributeError(f"'functools.partial' object has no attribute '{name}'"))
    raw = vars(owner)[name]
    if raw is None or isinstance(raw, str):  # __module__, __doc__: constants of the type
        return ConstantValue(raw)
    if isinstance(raw, (types.WrapperDescriptorType, types.MethodDescriptorType)):
        return BoundMethodValue(BuiltinValue(raw), p)  # e.g. p.__eq__, p.__repr__
    if isinstance(raw, (types.BuiltinFunctionType, types.ClassMethodDescriptorType)):
        return BuiltinValue(getattr(_PARTIAL, name))  # static and class methods (__new__, __init_subclass__)
    raise Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE, f"attribute {name!r} of a functools.partial")


# NOTE [Attributes of partials made while tracing]: `p.name = v` on a partial made in the trace
# (functools.partialmethod.__get__ sets `result.__self__` on the partial it returns) goes into its instance
# dict, as CPython's generic setattr does for a name the type has no data descriptor for; `func`, `args` and
# `keywords` are read-only members (eager's AttributeError) and `__dict__`/`__class__` assignments break. A
# later read finds the entry before the type's methods, as in CPython; a partial with entries that outlives
# the graph is a break (check_rebuildable).
def store_partial_attr(tx, p: PartialValue, name: str, value: Value) -> None:
    if name in ("func", "args", "keywords"):
        raise UserException(AttributeError("readonly attribute"))
    if name in ("__dict__", "__class__"):
        raise Unsupported(BreakKind.SIDE_EFFECT, f"assignment to {name} of a functools.partial")
    if getattr(p, "instance_dict", None) is None:
        p.instance_dict = DictValue({})
    if getattr(p, "escape_at", None) is None:
        from .lazy_combinators import _root_index
        p.escape_at = _root_index(tx)  # a break at the first store if the partial outlives the graph
    p.instance_dict.items[name] = value
    tx.output.side_effects.bump(p)  # NOTE [Eager generators]: a fresh object changed


# NOTE [Partials of partials]: CPython's partial_new flattens `functools.partial(p, *args, **kw)` when p is
# called as a partial and has no instance dict yet: the new partial's func is p.func, its args p.args + args,
# its keywords a copy of p.keywords updated with kw (so `q.func is scale`, not `q.func is p`). Reading
# `p.__dict__` (or vars(p)) makes the dict, for good (it cannot be deleted), and p is no longer flattened by
# any later call, eager or compiled: so framejit never reads the dict of a partial it observes (builder's
# _has_identity tests the partial type before `hasattr(obj, "__dict__")`), and `dict_absent` looks at the
# dict's slot without making it. A partial made in the trace has no dict unless the trace stored into it
# (instance_dict); a partial from outside is guarded on the state of its slot. A partial subclass as func
# (its object is not a PartialValue; 3.11 and 3.13 differ on one with its own __call__) is a break.
def new_partial(tx, args: list, kwargs: dict) -> PartialValue:
    """`functools.partial(*args, **kwargs)` while tracing (NOTE [Partials of partials])."""
    func, rest = args[0], list(args[1:])
    if not isinstance(func, PartialValue):
        obj = getattr(func, "obj", getattr(func, "value", None))
        if isinstance(obj, _PARTIAL) and type(obj) is not _PARTIAL:  # type(): no __class__ read
            raise Unsupported(BreakKind.UNSUPPORTED_CALL, "functools.partial of an instance of a partial subclass")
        return PartialValue(func, rest, dict(kwargs))
    if not _flattened(tx, func):
        return PartialValue(func, rest, dict(kwargs))
    if func.keywords is not None:  # NOTE [Reads past writes through a namespace dict], as a call of func
        tx.output.side_effects.check_namespace_read(func.keywords, "keywords")
    return PartialValue(func.func, [*func.args, *rest], {**func.kwargs, **kwargs})


def _flattened(tx, p: PartialValue) -> bool:
    if getattr(p, "instance_dict", None) is not None:  # the trace stored into it or read its __dict__
        return False
    if p.source is None or p.real is None:
        return True
    absent = dict_absent(p.real)
    out, e = tx.output, p.source.expr(tx.output.names)
    check = f"{out.name_of(dict_absent, 'partial_dict_absent')}({e})"
    out.add_guard("CONSTANT_MATCH", f"{check} is {absent}", p.source, expected=str(absent), actual=check)
    return absent


def check_rebuildable(p: PartialValue) -> None:
    """A partial whose `__dict__` got entries while traced is not rebuilt by make_partial."""
    if getattr(p, "instance_dict", None) is not None and p.instance_dict.items:
        e = Unsupported(BreakKind.UNSUPPORTED_VALUE, "a functools.partial whose __dict__ was changed")
        e.root_index = getattr(p, "escape_at", None)
        raise e


def make_partial(func, args: tuple, keywords: dict) -> functools.partial:
    """Run time: the partial a PartialValue stands for (NOTE [Partials across breaks])."""
    return functools.partial(func, *args, **keywords)


def partial_parts(p: PartialValue) -> list[Value]:
    """The values a partial holds (for traversals over live values)."""
    return [p.func, *p.args, *p.kwargs.values()]


__all__ = ["check_rebuildable", "dict_absent", "make_partial", "new_partial", "partial_attr", "partial_parts"]
