"""Exceptions of classes with their own Python `__init__`, made while tracing.

NOTE [Exceptions with a Python __init__]: `raise MyError(2, b=3)` where `class MyError(Exception)` has
`def __init__(self, a, b=None): self.a = a; self.b = b` was a break ("creating an instance of MyError"):
exceptions made while tracing are folded to real exception objects (NOTE [Exceptions made while tracing]),
and only classes CPython makes without running Python code were folded. Such an `__init__` is now inlined on a
new object standing for the exception; when it returns having done nothing but store constants on that
object (no outside write, no store into any other value, no read of the attributes CPython's exception
keeps in C, such as `args`: those are breaks as before), the exception is made as CPython's own
`cls.__new__(cls, *args)` makes it (BaseException.__new__ keeps the positional arguments as `args`, as
`cls(...)` does when `__init__` does not call the base's) with the stored attributes set on it. Each call
rebuilds it the same way from `args` and its instance dict (mappings_runtime.fresh_exception), without running
`__init__` again. `super().__init__(msg)` (or `Exception.__init__(self, msg)`) inside it, where the base's
`__init__` is CPython's BaseException_init (it only sets `args`: the bases in _PLAIN_INITS), is recorded
and run on the real exception after `__new__`, so `args` is (msg,) as in eager. Only classes made by type.__call__ whose classes define no method or descriptor besides
`__init__` (so `str(e)`, `e.args` are CPython's), and no OSError (its __new__ picks a subclass from errno).
"""
from __future__ import annotations

import types

from . import lookup
from .breaks import BreakKind, Unsupported
from .values import ConstantValue, NewObjectValue, UserFunctionValue, Value

_PLAIN_NAMES = ("__dict__", "__weakref__", "__init__", "__module__", "__qualname__", "__doc__")
# the built-in exceptions whose __init__ is BaseException_init (not AttributeError, NameError, ImportError,
# StopIteration, SyntaxError, OSError, UnicodeError...: theirs set more than `args`)
_PLAIN_INITS = (BaseException, Exception, TypeError, ValueError, RuntimeError, NotImplementedError, LookupError,
                IndexError, KeyError, ArithmeticError, ZeroDivisionError, OverflowError, AssertionError)


def python_init(cls: type) -> bool:
    """An exception class whose only Python code is its `__init__` (NOTE [Exceptions with a Python __init__])."""
    if not issubclass(cls, BaseException) or issubclass(cls, OSError) or type(cls).__call__ is not type.__call__:
        return False
    if not isinstance(lookup.mro_lookup(cls, "__init__")[1], types.FunctionType):
        return False
    return all(k.__module__ == "builtins" or not any(
        hasattr(type(v), "__get__") for name, v in vars(k).items() if name not in _PLAIN_NAMES)
        for k in cls.__mro__)


def make_exception(tx, cls: type, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """`cls(*args, **kwargs)` folded to a real exception, or Unsupported (also for any class that is not such an
    exception class: calls.call_class's last case)."""
    if not python_init(cls):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"creating an instance of {cls.__qualname__}")
    if not all(_immutable(a) for a in args):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"creating an instance of {cls.__qualname__} from values "
                                                      "that are not immutable constants")
    lookup.guard_lookup(tx.output, type(cls), "__call__")
    for name in ("__new__", "__init__"):
        lookup.guard_lookup(tx.output, cls, name)
    obj = NewObjectValue(cls)
    obj.base_inits = []  # the `super().__init__(...)` calls made on it: (the base's __init__, its arguments)
    effects = tx.output.side_effects
    version, n_touched = effects.version, len(effects.touched)
    init = lookup.mro_lookup(cls, "__init__")[1]
    result = tx.inline(UserFunctionValue(init), [obj, *args], kwargs)
    if not (result.is_constant() and result.as_constant() is None):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{cls.__qualname__}.__init__ returned {result.describe()}")
    if effects.version != version or any(v is not obj for v in effects.touched[n_touched:]) or \
            not all(_immutable(v) for v in obj.attrs.values()):
        raise Unsupported(BreakKind.SIDE_EFFECT, f"{cls.__qualname__}.__init__ does more than store constants on "
                                                 "the new exception")
    exc = cls.__new__(cls, *(a.as_constant() for a in args))
    for base_init, base_args in obj.base_inits:
        base_init(exc, *base_args)
    for name, value in obj.attrs.items():
        setattr(exc, name, value.as_constant())
    return ConstantValue(exc)


# NOTE [Immutable exception contents]: the exception is one object folded at trace time and copied per call,
# so what it holds must have no identity a program could see: a list or dict stored on it (or passed as an
# argument, kept in `args`) was shared by every call's exception and a copy of the user's own object (a
# global dict stored as `self.cfg`: writes through `e.cfg` were lost). Numbers, strings, None, classes and
# tuples/frozensets of those made while tracing only; anything else is a break, as before.
_SCALARS = (int, float, complex, str, bytes, bool, type(None))


def _immutable(value: Value) -> bool:
    if not value.is_constant():
        return False
    constant = value.as_constant()  # a tuple read from outside has an identity `e.t is t` would see
    return (type(constant) not in (tuple, frozenset) or getattr(value, "source", None) is None) and \
        _deep_immutable(constant)


def _deep_immutable(obj) -> bool:
    if type(obj) in (tuple, frozenset):
        return all(_deep_immutable(item) for item in obj)
    return isinstance(obj, type) or type(obj) in _SCALARS


def _base_init(base_init):
    def handler(tx, args: list[Value], kwargs: dict[str, Value]) -> Value:
        obj = args[0] if args else None
        if getattr(obj, "base_inits", None) is None or kwargs or not all(_immutable(a) for a in args[1:]):
            raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"call of {base_init.__qualname__}")
        obj.base_inits.append((base_init, tuple(a.as_constant() for a in args[1:])))
        return ConstantValue(None)
    return handler


def _register() -> None:
    from .builtins import BUILTIN_HANDLERS
    for cls in _PLAIN_INITS:
        BUILTIN_HANDLERS[cls.__init__] = _base_init(cls.__init__)


_register()
