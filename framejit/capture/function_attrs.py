"""Attributes of functions, bound methods and code objects, answered at trace time.

Library decorators introspect the functions they wrap (`func.__code__.co_varnames`, `__wrapped__`,
`__name__`, `__defaults__`, `method.__func__`), so these reads must be values, not graph breaks.

NOTE [Function attributes are guarded through the function's source]: a function read from outside is
already guarded by identity or, for closures, by code (NOTE [Closures guarded by code]). Its writable
attributes (`__code__`, `__defaults__`, `__kwdefaults__`, `__name__`, `__dict__` entries such as
`__wrapped__`) can still be reassigned between calls, so each one read is guarded through
`AttrSource(function, name)`, as TorchDynamo guards a function's code by `___check_obj_id`. A function
without a source (a method found on a guarded class, a function made while tracing) answers from the
object the trace inlines, which is exactly what the inlined call will run. An attribute that is absent
from the function's `__dict__` raises AttributeError, guarded by that absence.
"""
from __future__ import annotations

import types
from typing import Any

from .breaks import BreakKind, Unsupported, UserException
from .sources import AttrSource, ItemSource, ObjectSource, Ref
from .values import (BoundMethodValue, BuiltinValue, ClassValue, ConstantValue, DictValue, TupleValue, UserFunctionValue,
                     Value)
from .values.builder import wrap

# Read-only or immutable-enough attributes of every function: their value is a constant of the object.
_PLAIN = ("__name__", "__qualname__", "__module__", "__doc__")
# Attributes whose real value is a Python object we can model (wrapped and guarded through the source).
_WRAPPED = ("__defaults__", "__kwdefaults__", "__dict__", "__annotations__") + \
    (("__type_params__",) if hasattr(types.FunctionType, "__type_params__") else ())  # 3.12+, update_wrapper reads it
_UNSUPPORTED = ("__globals__", "__closure__", "__builtins__", "__call__")


def function_attr(tx, fn: UserFunctionValue, name: str) -> Value:
    """`fn.name` for a Python function value."""
    real = fn.fn
    if name == "__get__":  # the descriptor protocol by hand (`func.__get__(obj, cls)`, lr_scheduler's wrapper)
        return BoundMethodValue(BuiltinValue(_function_get), fn)
    if name == "__class__":  # fixed for the object: CPython refuses `__class__` stores on functions
        return ClassValue(type(real))
    if made_in_trace(fn):
        return _traced_function_attr(tx, fn, name)
    if name == "__dict__" and tx.output.side_effects.stores_on(real):  # NOTE [Attributes stored on functions
        raise Unsupported(BreakKind.SIDE_EFFECT,  # from outside]: the real dict lacks the pending stores
                          f"the __dict__ of {fn.describe()} read while stores to its attributes are not replayed yet")
    stored = tx.output.side_effects.attr(real, name)
    if stored is not None:  # NOTE [Attributes stored on functions from outside] (side_effects.py)
        return stored
    if type(real.__dict__) is dict:  # NOTE [Reads past writes through a namespace dict]: `vars(fn)[k] = v`
        tx.output.side_effects.check_namespace_read(real.__dict__, name)
    if name in _UNSUPPORTED:
        raise Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE, f"{name} of {fn.describe()}")
    if name == "__code__":
        if fn.source is not None and not fn.by_code:
            tx.output.guard_id(AttrSource(fn.source, "__code__"), real.__code__)
        return ConstantValue(real.__code__)
    if name in _PLAIN or name in _WRAPPED:
        return _read(tx, fn, name, getattr(real, name))
    if name in real.__dict__:
        return _read(tx, fn, name, real.__dict__[name])
    if hasattr(types.FunctionType, name):
        raise Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE, f"{name} of {fn.describe()}")
    _guard_absent(tx, fn, name)
    raise UserException(AttributeError(f"'function' object has no attribute '{name}'"))


def _function_get(func, obj, cls=None):
    """Stands for `func.__get__` (a method-wrapper) in the graph builder's tables; handled while tracing, and
    called only when the code of a graph break runs the call itself (`f.__get__(None, None)`, which raises,
    is the instruction a frame breaks before: it must raise eager's TypeError)."""
    return func.__get__(obj, cls)


def _bind(tx, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """`func.__get__(obj[, cls])`: a method bound to obj, or func itself when obj is None (CPython 3)."""
    if kwargs or not 2 <= len(args) <= 3:
        raise UserException(TypeError(f"expected 1 or 2 arguments, got {len(args) - 1}"))
    func, obj = args[0], args[1]
    if obj.is_constant() and obj.as_constant() is None:
        if len(args) == 2 or args[2].is_constant() and args[2].as_constant() is None:
            raise UserException(TypeError("__get__(None, None) is invalid"))
        return func
    return BoundMethodValue(func, obj)


def _register_bind() -> None:
    from .builtins import BUILTIN_HANDLERS
    BUILTIN_HANDLERS[_function_get] = _bind


_register_bind()


# NOTE [Attributes of functions reached without a source]: a function from outside that the trace holds without a
# source (`M.forward` read through its class, whose dict guards pin the function) had its attribute reads folded
# unguarded: `x * M.forward.scale` kept the first call's scale after `M.forward.scale = 5` (eager 5, framejit 2).
# Reads (and the absence of a name) are guarded through the function object itself, named by identity (the path
# that led to it is guarded where it was read), and stores on it are replayed on that object
# (NOTE [Attributes stored on functions from outside]).
def function_source(fn: UserFunctionValue):
    """Where `fn`, a function from outside, is found: its source, or the object itself by identity."""
    if fn.source is not None:
        return fn.source
    real = fn.fn
    return ObjectSource(Ref(real, "fn_" + getattr(real, "__qualname__", "f").replace(".", "_").replace("<", "_")
                            .replace(">", "_")))


def _read(tx, fn: UserFunctionValue, name: str, value: Any) -> Value:
    return wrap(tx.output, value, AttrSource(function_source(fn), name))


# NOTE [Defaults of closures guarded by code]: a nested function with defaults (`def g(a, b=3)`,
# `def g(y: int, *, c: float = 2.5)`) made before a graph break and read in the resume function was guarded
# by identity: a new object on every call, so the resume function recompiled on every call and ran eagerly
# from the recompile limit on (9 graphs and an eager frame over 12 calls where stock makes 2; on 3.11, 3.12
# and 3.13). Like a closure without defaults it is guarded by its code and globals; which defaults it has
# (None, or a tuple of that length; None, or a dict with those keys) is guarded here, and each default the
# trace reads (binding a call that leaves the parameter out: Translator._wrap_defaults, or `__defaults__`
# read as an attribute) is guarded through its source like any value.
def guard_defaults_shape(out, source, obj: types.FunctionType) -> None:
    """Guard `__defaults__` and `__kwdefaults__` of the function at `source` to be None as now, or of the
    same length / keys (NOTE above)."""
    for name, value in (("__defaults__", obj.__defaults__), ("__kwdefaults__", obj.__kwdefaults__)):
        _guard_shape(out, AttrSource(source, name), value)


def _guard_shape(out, attr, value: tuple | dict | None) -> None:
    if value is None:
        out.guard_constant(attr, None)
        return
    out.guard_type(attr, type(value))
    e = attr.expr(out.names)
    if isinstance(value, tuple):
        out.add_guard("LENGTH", f"___len({e}) == {len(value)}", attr, expected=str(len(value)),
                      actual=f"___len({e})")
    else:
        out.add_guard("DICT_KEYS", f"___list({e}) == {list(value)!r}", attr, expected=repr(list(value)),
                      actual=f"___list({e})")


# NOTE [Defaults a call's binding consults]: binding a call of a function from outside that leaves parameters
# out reads its defaults through `__defaults__[i]` / `__kwdefaults__[name]`, each guarded as a value; but
# which parameters have defaults at all (`__kwdefaults__` None, a key absent, a shorter or longer
# `__defaults__`, which moves every index) was not guarded: after `h.__kwdefaults__ = None` the trace bound
# h(x) to the TypeError "missing 1 required keyword-only argument" and kept raising it when the user set
# `{"k": 4.0}` again (eager returned x * 4). Where the call leaves a positional (keyword-only) parameter out,
# the shape of `__defaults__` (`__kwdefaults__`) is guarded: None as now, or the same length (keys).
def wrap_defaults(out, fn: types.FunctionType, base, nargs: int | None) -> tuple:
    """The positional defaults of `fn` a call binding `nargs` positional arguments sees, read through
    `base` (the function's source; None: a library function or one made in the frame, unguarded)."""
    from .values.builder import wrap_unguarded
    defaults = fn.__defaults__ or ()
    if base is None:
        return tuple(wrap_unguarded(d) for d in defaults)
    base = AttrSource(base, "__defaults__")
    if nargs is None or nargs < fn.__code__.co_argcount:
        _guard_shape(out, base, fn.__defaults__)
    return tuple(wrap(out, d, ItemSource(base, i)) for i, d in enumerate(defaults))


def wrap_kwdefaults(out, fn: types.FunctionType, base, passed) -> dict:
    """The keyword-only defaults of `fn` a call passing the keywords `passed` sees (as wrap_defaults)."""
    from .values.builder import wrap_unguarded
    kwdefaults = fn.__kwdefaults__ or {}
    if base is None:
        return {k: wrap_unguarded(v) for k, v in kwdefaults.items()}
    base = AttrSource(base, "__kwdefaults__")
    code = fn.__code__
    names = code.co_varnames[code.co_argcount:code.co_argcount + code.co_kwonlyargcount]
    if passed is None or any(name not in passed for name in names):
        _guard_shape(out, base, fn.__kwdefaults__)
    return {k: wrap(out, v, ItemSource(base, k)) for k, v in kwdefaults.items()}


def _guard_absent(tx, fn: UserFunctionValue, name: str) -> None:
    source = function_source(fn)  # NOTE [Attributes of functions reached without a source]
    e = AttrSource(source, "__dict__").expr(tx.output.names)
    tx.output.add_guard("ABSENT", f"{name!r} not in {e}", source, expected=f"no attribute {name}")


# NOTE [Attributes of functions made while tracing]: decorators built with `functools.wraps` (torch.func's
# jacrev/grad, transformers' `can_return_tuple`, most libraries' own) make a `wrapper` inside the traced
# code and then run `update_wrapper`: `setattr(wrapper, '__module__', ...)` for `__module__`, `__name__`,
# `__qualname__`, `__doc__`, `__annotations__` (and `__type_params__` on 3.12+), `wrapper.__dict__.update(
# wrapped.__dict__)`, `wrapper.__wrapped__ = wrapped`. Such a function is a value of the trace alone (no
# other code can see it until it escapes), so its attribute stores are kept on the value (`attrs`: the
# writable slots stored, and `__dict__`, a DictValue made on first use), reads answer from there, and a
# function that escapes (returned, stored, live at a graph break) is rebuilt with them (codegen.py
# `_new_function`). What is not stored answers what CPython gives a new function: the code's name and
# qualname, `__doc__` from the code's first constant (a docstring), `__module__` from its globals'
# `__name__` (guarded there), a fresh `{}` `__dict__`, the annotations MAKE_FUNCTION built (one dict,
# made on first read, as CPython caches it). A store CPython would reject (a non-str `__name__`, a
# `__dict__` that is not a dict) raises its TypeError; stores of `__code__`, `__defaults__`,
# `__kwdefaults__`, `__closure__`, `__globals__` stay graph breaks (they would change what the call runs).
_STRING_SLOTS = ("__name__", "__qualname__")


def made_in_trace(fn: UserFunctionValue) -> bool:
    return fn.source is None and fn.closure is not None and fn.attrs is not None


def _traced_function_attr(tx, fn: UserFunctionValue, name: str) -> Value:
    """A function made by MAKE_FUNCTION while tracing: its defaults, closure and attributes are abstract."""
    real = fn.fn
    if name in fn.attrs:
        return fn.attrs[name]
    if name == "__code__":
        return ConstantValue(real.__code__)
    if name in ("__name__", "__qualname__", "__doc__", "__type_params__") and hasattr(real, name):
        return ConstantValue(getattr(real, name))
    if name == "__module__":
        return _module_name(tx, real)
    if name == "__defaults__":
        return TupleValue(list(fn.defaults)) if fn.defaults else ConstantValue(None)
    if name == "__kwdefaults__":
        return DictValue(dict(fn.kwdefaults)) if fn.kwdefaults else ConstantValue(None)
    if name == "__annotations__":
        fn.attrs[name] = annotations_dict(fn)
        return fn.attrs[name]
    if name == "__dict__":
        fn.attrs[name] = DictValue({})
        return fn.attrs[name]
    instance_dict = fn.attrs.get("__dict__")
    if instance_dict is not None and name in instance_dict.items:
        return instance_dict.items[name]
    if hasattr(types.FunctionType, name):
        raise Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE, f"{name} of a function made inside the compiled region")
    raise UserException(AttributeError(f"'function' object has no attribute '{name}'"))


def _module_name(tx, real: types.FunctionType) -> Value:
    """CPython sets a new function's `__module__` from its globals' `__name__` (read now, guarded)."""
    from .sources import GlobalSource, Ref
    f_globals = real.__globals__
    if tx.output.side_effects.global_value(f_globals, "__name__") is not None or "__name__" not in f_globals:
        raise Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE, "__module__ of a function made inside the compiled "
                                                           "region whose module has no constant __name__")
    return wrap(tx.output, f_globals["__name__"], GlobalSource(Ref(f_globals, "G"), "__name__"))


def annotations_dict(fn: UserFunctionValue) -> DictValue:
    """The dict CPython makes from MAKE_FUNCTION's annotations tuple (name, value, name, value, ...)."""
    built = fn.annotations
    if built is None:
        return DictValue({})
    if isinstance(built, DictValue):
        return DictValue(dict(built.items))
    items = built.items if isinstance(built, TupleValue) else None
    if items is None and built.is_constant() and isinstance(built.as_constant(), tuple):
        items = [ConstantValue(v) for v in built.as_constant()]
    if items is None or len(items) % 2 or not all(k.is_constant() for k in items[::2]):
        raise Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE, "__annotations__ of a function made inside the "
                                                           "compiled region")
    return DictValue({k.as_constant(): v for k, v in zip(items[::2], items[1::2])})


def store_traced_function_attr(tx, fn: UserFunctionValue, name: str, value: Value) -> None:
    """`fn.name = value` for a function made while tracing (NOTE [Attributes of functions made while
    tracing]); a store CPython rejects raises its exception, one that changes the call is a graph break."""
    if name in _STRING_SLOTS:
        if not issubclass(value.python_type(), str):
            raise UserException(TypeError(f"{name} must be set to a string object"))
    elif name == "__annotations__":
        if value.is_constant() and value.as_constant() is None:
            fn.attrs.pop(name, None)  # CPython drops it; the next read makes a new {}
            fn.annotations = None
            tx.output.side_effects.bump(fn)
            return
        if not isinstance(value, DictValue) or value.cls is not dict:
            raise _bad_slot(value, name, "a dict object")
    elif name == "__dict__":
        if not isinstance(value, DictValue) or value.cls is not dict:
            raise _bad_slot(value, name, f"a dictionary, not a '{value.python_type().__name__}'")
    elif name == "__type_params__" and hasattr(types.FunctionType, name):  # 3.12+
        if value.python_type() is not tuple:
            raise _bad_slot(value, name, "a tuple")
    elif name in ("__doc__", "__module__"):
        pass
    elif hasattr(types.FunctionType, name):
        raise Unsupported(BreakKind.SIDE_EFFECT, f"assignment to the attribute {name!r} of {fn.describe()}")
    else:
        instance_dict = _traced_function_attr(tx, fn, "__dict__")
        tx.output.side_effects.bump(instance_dict)
        instance_dict.items[name] = value
        return
    fn.attrs[name] = value
    tx.output.side_effects.bump(fn)


def _bad_slot(value: Value, name: str, what: str) -> Exception:
    if issubclass(value.python_type(), (dict, tuple)):  # a subclass, or one we cannot inspect: not modelled
        return Unsupported(BreakKind.SIDE_EFFECT, f"assignment of {value.describe()} to {name} of a function")
    return UserException(TypeError(f"{name} must be set to {what}"))


def method_attr(tx, method: BoundMethodValue, name: str) -> Value:
    """`obj.method.name`: `__func__` and `__self__` are the parts; other reads go to the function, as
    a bound method forwards attribute reads to `__func__`."""
    if isinstance(method.func, BuiltinValue) and isinstance(method.func.obj, tuple(_C_METHODS)):
        return _c_method_attr(method, name)
    if name == "__func__":
        return method.func
    if name == "__self__":
        return method.self_value
    func = method.func
    if isinstance(func, UserFunctionValue):
        return function_attr(tx, func, name)
    if isinstance(func, BuiltinValue) and name in _PLAIN:
        return ConstantValue(getattr(func.obj, name))
    raise Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE, f"{name} of {method.describe()}")


# NOTE [Attributes of bound C methods]: `seen.add` read in the trace, or held in a local before a break (NOTE
# [Container methods from outside] in values/builder.py), is a BoundMethodValue over the method descriptor, but
# stands for CPython's bound builtin method (a method-wrapper for a slot such as `__len__`), which is not a Python
# method: it has `__self__`, `__name__`, `__qualname__`, `__doc__`, `__text_signature__` (and `__module__` None,
# a method-wrapper `__objclass__` instead), and no `__func__` (review revR R5: it answered the descriptor, so
# `hasattr(m, "__func__")` was True; R6: `m.__module__` read the descriptor's, which has none: an internal error
# that ran the frame eagerly). Any other attribute the real type has is a break; one it lacks, AttributeError.
_C_METHODS = {types.MethodDescriptorType: types.BuiltinMethodType, types.WrapperDescriptorType: types.MethodWrapperType}
_C_METHOD_ATTRS = {types.BuiltinMethodType: frozenset(dir([].append)), types.MethodWrapperType: frozenset(dir([].__len__))}


def _c_method_attr(method: BoundMethodValue, name: str) -> Value:
    descriptor = method.func.obj
    bound_type = _C_METHODS[type(descriptor)]
    if name == "__self__":
        return method.self_value
    if name == "__class__":
        return ClassValue(bound_type)
    if name == "__module__" and bound_type is types.BuiltinMethodType:
        return ConstantValue(None)
    if name == "__objclass__" and bound_type is types.MethodWrapperType:
        return ClassValue(descriptor.__objclass__)
    if name in ("__name__", "__qualname__", "__doc__", "__text_signature__"):
        return ConstantValue(getattr(descriptor, name))
    if name not in _C_METHOD_ATTRS[bound_type]:
        raise UserException(AttributeError(f"'{bound_type.__name__}' object has no attribute '{name}'"))
    raise Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE, f"{name} of {method.describe()}")


def is_function_like(value: Value) -> bool:
    return isinstance(value, (UserFunctionValue, BoundMethodValue))


def function_attr_value(tx, value: Value, name: str) -> Value:
    if isinstance(value, UserFunctionValue):
        return function_attr(tx, value, name)
    return method_attr(tx, value, name)


__all__ = ["function_attr", "method_attr", "is_function_like", "function_attr_value", "same_function",
           "made_in_trace", "store_traced_function_attr", "annotations_dict"]


def same_function(tx, a: UserFunctionValue, b: UserFunctionValue) -> bool:
    """`a is b` for two function values. A function made while tracing is only itself; functions read
    from outside compare by identity, and one guarded by code only (NOTE [Closures guarded by code]) has
    its identity guarded too, since the answer now depends on it."""
    if a is b:
        return True
    if _made_in_trace(a) or _made_in_trace(b):
        return False
    for side in (a, b):
        if side.by_code and side.source is not None:
            tx.output.guard_id(side.source, side.fn)
    return a.fn is b.fn


def _made_in_trace(fn: UserFunctionValue) -> bool:
    return fn.source is None and fn.closure is not None
