"""Small library calls answered at trace time: `sys.intern`, `id()` of objects from outside, `Tensor.type()` (the type name of a
tensor, or a conversion to the dtype that a type name, tensor class or dtype names), and
`torch._dynamo.graph_break()`, which breaks the graph as it asks.

`operator.itemgetter`/`attrgetter` with constant arguments: NOTE [Operator getters].

`collections.namedtuple(...)` called inside the region is not answered here: eager makes a new class on
every call, and a class made once while tracing would be observably another type.

`Tensor.type()` without arguments is metadata (from the fake tensor: dtype and device, which inputs are
guarded on). `t.type(T)` is `t.to(dtype)` for the dtype `T` stands for on the tensor's own device (the
same tensor when it already has that type, as eager returns `t` itself); a type naming another device
(`torch.cuda.HalfTensor`) or any keyword argument is a graph break.
"""
from __future__ import annotations

import bisect
import functools
import operator
import sys

import torch

from .breaks import BreakKind, Unsupported, UserException
from .builtins import _fold, BUILTIN_HANDLERS
from .values import ConstantValue, TensorValue, Value

BUILTIN_HANDLERS[sys.intern] = _fold(sys.intern)


def _id(tx, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """`id(obj)` of an object from outside (a module, a user object, a class, a function): the real id,
    with the object guarded by identity, so a call with another object recompiles (torch's parametrize
    caches by `id(module)`). Anything else (tensors, objects made while tracing, constants whose
    identity CPython does not promise) is a graph break; of the tensors, parameters are answered (below)."""
    from .values import ObjectValue, UserFunctionValue
    if len(args) != 1 or kwargs:
        raise UserException(TypeError(f"id() takes exactly one argument ({len(args) + len(kwargs)} given)"))
    value = args[0]
    from .process_ids import new_id  # NOTE [Ids as keys inside the trace]
    if isinstance(value, ObjectValue) and value.source is not None and type(value.obj) not in (int, float, str, bytes):
        tx.output.guard_id(value.source, value.obj)
        return new_id(tx.output, id(value.obj))
    if isinstance(value, UserFunctionValue) and value.source is not None:
        tx.output.guard_id(value.source, value.fn)
        return new_id(tx.output, id(value.fn))
    if isinstance(value, TensorValue) and value.source is not None:
        # a parameter (`id(p)` in code that deduplicates tied weights) keeps its identity from call to call:
        # guarded by identity like a module. Any other input tensor is usually a new object per call, where
        # an identity guard would recompile every call: that stays a break.
        real = next((i.tensor for i in tx.output.inputs if i.value is value), None)
        if isinstance(real, torch.nn.Parameter):
            tx.output.guard_id(value.source, real)
            return new_id(tx.output, id(real))
    raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"id() of {value.describe()}")


BUILTIN_HANDLERS[id] = _id


def _object_slot(fn):
    def handler(tx, args: list[Value], kwargs: dict[str, Value]) -> Value:
        from .user_operators import object_slot_call  # NOTE [object's comparison slots called directly]
        return object_slot_call(tx, fn, args, kwargs)
    return handler


for _slot in (object.__eq__, object.__ne__, object.__lt__, object.__le__, object.__gt__, object.__ge__):
    BUILTIN_HANDLERS[_slot] = _object_slot(_slot)
# NOTE [Ids are per process]: the identity guard makes an answered id() sound in one process, but the frame
# cache finds the object again in a new process by a locator (the global that binds it), where its id is
# another number: an entry that folded `id(OBJ) % 7` into its graph computed the old process's answer. A
# trace that used the number id() answered is therefore kept in memory only (frame_cache._persist); one that
# only used it as a key of its own dicts is persisted (NOTE [Ids as keys inside the trace]).


# NOTE [vars() is a read of __dict__]: `vars(obj)` is CPython's `getattr(obj, "__dict__")`, with the
# AttributeError turned into TypeError("vars() argument must have __dict__ attribute"). It is traced as that
# attribute read, so it answers (and guards, and treats as a read of a hook handle's id) exactly what
# `obj.__dict__` does: config objects built in forward that fill themselves with `vars(self).update(kw)` or
# `vars(self)[k] = v`. `vars()` without an argument is `locals()`: still a break.
def _vars(tx, args: list[Value], kwargs: dict[str, Value]) -> Value:
    if kwargs:
        raise UserException(TypeError("vars() takes no keyword arguments"))
    if len(args) != 1:
        if len(args) > 1:
            raise UserException(TypeError(f"vars expected at most 1 argument, got {len(args)}"))
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "vars() without an argument (the frame's locals)")
    try:
        return tx.getattr(args[0], "__dict__")
    except UserException as e:
        if isinstance(e.exc, AttributeError):
            raise UserException(TypeError("vars() argument must have __dict__ attribute")) from None
        raise


BUILTIN_HANDLERS[vars] = _vars


# NOTE [sys.exc_info while tracing]: `sys.exc_info()` (and `sys.exception()`) answer the exception being
# handled, here or in a caller. contextlib.ExitStack.__exit__ reads it on every exit, also a normal one.
# When the caller handled no exception at entry (read by convert_frame before tracing starts) and no
# `except`/exceptional `finally` of the traced code is being followed (NOTE [Exceptions caught while
# tracing]), the answer is "none": (None, None, None), with a guard line that no exception is being handled
# at entry, so a call from inside a caller's `except` retraces. Otherwise it is a graph break.
def _exc_info(tx, args: list[Value], kwargs: dict[str, Value], exception_only: bool = False) -> Value:
    from .values import TupleValue
    if args or kwargs:
        raise UserException(TypeError(f"{'exception' if exception_only else 'exc_info'}() takes no arguments"))
    from .lazy_generators import note_exception_read
    note_exception_read(tx)  # NOTE [Handlers that see the exception on close]
    if not no_exception_handled(tx):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "sys.exc_info() while an exception is being handled")
    return ConstantValue(None) if exception_only else TupleValue([ConstantValue(None)] * 3)


def no_exception_handled(tx) -> bool:
    """No exception is being handled, here or in a caller (guarded at entry); False when one may be. Also read by
    a bare `raise` (NOTE [Bare raise with no exception handled] in handlers/blocks.py)."""
    out = tx.output
    if getattr(out, "entry_exception", True) or any(t.handling for t in out.tx_stack):
        return False
    name = out.name_of(sys.exc_info, "exc_info")
    out.add_guard("EXCEPTION_STATE", f"{name}()[1] is None", None, expected="no exception being handled",
                  actual=f"{name}()[1]")
    return True


BUILTIN_HANDLERS[sys.exc_info] = _exc_info
if hasattr(sys, "exception"):
    BUILTIN_HANDLERS[sys.exception] = lambda tx, args, kwargs: _exc_info(tx, args, kwargs, exception_only=True)


def forced_break(f) -> None:
    """`torch._dynamo.graph_break()` asks for a graph break at the call (its body is empty, so inlining
    it would silently capture through). Recognised by name, never imported (NOTE [Compile-aware library
    paths])."""
    if getattr(f, "__name__", None) == "graph_break" and getattr(f, "__module__", None) == "torch._dynamo.decorators":
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "torch._dynamo.graph_break() asks for a graph break")
    code = getattr(f, "__code__", None)
    if getattr(f, "__globals__", {}).get("__name__") == "torch._functorch.eager_transforms" and \
            "<locals>" in getattr(code, "co_qualname", ""):
        # NOTE [functorch state]: a transform's own closure made outside the trace (vjp's vjp_fn, jacrev's
        # wrapper_fn: functools.wraps renames it, so it is known by its code) holds functorch state; inlined,
        # it ran wrapped tensors through the fake ops (an AssertionError) or broke a dozen times inside
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{f.__code__.co_qualname} holds functorch's transform state")



def tensor_type(tx, t: TensorValue, args: list[Value], kwargs: dict[str, Value]) -> Value:
    if not args and not kwargs:
        return ConstantValue(t.fake.type())
    if kwargs or len(args) != 1 or not args[0].is_constant():
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "Tensor.type() with these arguments")
    target = args[0].as_constant()
    if t.fake.device.type != "cpu":
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"Tensor.type() of a {t.fake.device.type} tensor")
    try:
        converted = torch.empty(0, dtype=t.fake.dtype).type(target)  # what eager makes of `target`
    except Exception as e:
        raise UserException(e) from None
    if converted.device.type != "cpu":
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"Tensor.type({target!r}) moves the tensor to another device")
    return tx.output.call("call_method", "to", (t, ConstantValue(converted.dtype)), {})


__all__ = ["forced_break", "tensor_type"]


# NOTE [Operator getters]: `operator.itemgetter(1)` / `attrgetter("a.b")` (the key of Counter.most_common,
# of sorted/max/min in library code) with constant arguments are immutable callables fixed by those
# arguments: made while tracing they are constants (the real getter, made at trace time, so a bad argument
# raises what eager raises), and a call `g(obj)` is the item or attribute reads it stands for, traced as
# reads (`obj[1]`, `obj.a.b`; a tuple of them for several). A getter from outside (a module-level
# `_itemgetter1`, one passed to a resume function) is guarded by its type and arguments, not its identity.
# One that escapes the region is made anew from its arguments on every call (codegen.py), as eager does.
GETTERS = (operator.itemgetter, operator.attrgetter)


def _make_getter(cls: type):
    def handler(tx, args: list[Value], kwargs: dict[str, Value]) -> Value:
        if kwargs or not all(a.is_constant() for a in args):
            raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"operator.{cls.__name__} of values that are not constants")
        try:
            return ConstantValue(cls(*(a.as_constant() for a in args)))
        except (TypeError, ValueError) as e:
            raise UserException(e) from None
    return handler


for _getter in GETTERS:
    BUILTIN_HANDLERS[_getter] = _make_getter(_getter)


# `operator.methodcaller(name, *args, **kwargs)` with constant arguments is such a callable too (made while
# tracing it is the real one, a constant; one from outside is pinned by identity): a call `mc(obj)` is
# `obj.name(*args, **kwargs)`, traced as that read and call. It was "call of methodcaller.__call__", a break.
def _methodcaller(tx, args: list[Value], kwargs: dict[str, Value]) -> Value:
    if not all(a.is_constant() for a in args) or not all(v.is_constant() for v in kwargs.values()):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "operator.methodcaller of values that are not constants")
    try:
        return ConstantValue(operator.methodcaller(*(a.as_constant() for a in args),
                                                   **{k: v.as_constant() for k, v in kwargs.items()}))
    except (TypeError, ValueError) as e:
        raise UserException(e) from None


BUILTIN_HANDLERS[operator.methodcaller] = _methodcaller


def _methodcaller_parts(caller) -> tuple:
    """(name, args, kwargs) of a methodcaller, from its __reduce__ (a partial when it has keywords)."""
    cls, args = caller.__reduce__()
    if isinstance(cls, functools.partial):
        return cls.args[0], tuple(args), dict(cls.keywords)
    return args[0], tuple(args[1:]), {}


def getter_of(tx, fn: Value):
    """The real itemgetter/attrgetter/methodcaller `fn` stands for, or None."""
    from .values import ObjectValue
    if isinstance(fn, ConstantValue) and type(fn.value) in (*GETTERS, operator.methodcaller):
        return fn.value
    if isinstance(fn, ObjectValue) and type(fn.obj) is operator.methodcaller and fn.source is not None:
        tx.output.guard_id(fn.source, fn.obj)
        return fn.obj
    if isinstance(fn, ObjectValue) and type(fn.obj) in GETTERS and fn.source is not None:
        _guard_getter(tx.output, fn.source, fn.obj)
        return fn.obj
    return None


def _guard_getter(out, source, getter) -> None:
    """A getter from outside is guarded by its type and arguments, not its identity: one made anew on every
    call (by the program, or by the code that rebuilds one escaping the region, passed on to a resume
    function) is the same getter; guarded by identity, each call recompiled until the recompile limit."""
    out.guard_type(source, type(getter))
    e = source.expr(out.names)
    args = out.name_of(getter_args(getter), "getter_args")
    out.add_guard("GETTER_MATCH", f"{out.name_of(getter_args, 'getter_args_of')}({e}) == {args}", source,
                  expected=f"{type(getter).__name__}{getter_args(getter)!r}")


def getter_args(getter) -> tuple:
    cls, args = getter.__reduce__()
    return args


def call_getter(tx, getter, args: list[Value], kwargs: dict[str, Value]) -> Value:
    from .protocol import getitem
    from .values import TupleValue
    if kwargs:
        raise UserException(TypeError(f"{type(getter).__name__}() takes no keyword arguments"))
    if len(args) != 1:
        raise UserException(TypeError(f"{type(getter).__name__} expected 1 argument, got {len(args)}"))
    obj, got = args[0], []
    if type(getter) is operator.methodcaller:
        from .values.builder import wrap_unguarded
        name, positional, keywords = _methodcaller_parts(getter)
        return tx.call(tx.getattr(obj, name), [wrap_unguarded(a) for a in positional],
                       {k: wrap_unguarded(v) for k, v in keywords.items()})
    for item in getter_args(getter):
        if type(getter) is operator.itemgetter:
            got.append(getitem(tx, obj, ConstantValue(item)))
            continue
        value = obj
        for part in item.split("."):
            value = tx.getattr(value, part)
        got.append(value)
    return got[0] if len(got) == 1 else TupleValue(got)


# NOTE [heapq's n largest]: `heapq.nlargest(n, iterable, key)` (Counter.most_common(n), top-k in plain
# Python) keeps a heap of (key, order, item) with `_heapq.heapify`/`heapreplace` (C functions) over a zip
# that shares its iterator with a later loop. heapq documents it as equivalent to
# `sorted(iterable, key=key, reverse=True)[:n]`: ties keep their first-seen order in both (the heap's
# `order` decreases; sorted is stable). So the heap part is traced as that sorted call; n == 1 and
# n >= len(iterable) run heapq's own code (max(), sorted()), and n <= 0 returns [] having drawn nothing,
# as heapq does. The same for nsmallest (ascending).
def _n_extreme(n, iterable, key, largest):
    """heapq.nlargest (largest) / nsmallest as heapq computes them (NOTE [heapq's n largest])."""
    if n == 1:
        it = iter(iterable)
        sentinel = object()
        result = (max if largest else min)(it, default=sentinel, key=key)
        return [] if result is sentinel else [result]
    try:
        size = len(iterable)
    except (TypeError, AttributeError):
        pass
    else:
        if n >= size:
            return sorted(iterable, key=key, reverse=largest)[:n]
    it = iter(iterable)
    if n <= 0:
        return []
    return sorted(it, key=key, reverse=largest)[:n]


def _nlargest(n, iterable, key=None):
    return _n_extreme(n, iterable, key, True)


def _nsmallest(n, iterable, key=None):
    return _n_extreme(n, iterable, key, False)


def _register_heapq() -> None:
    import heapq
    from .modules import SUBSTITUTES
    SUBSTITUTES[heapq.nlargest] = _nlargest
    SUBSTITUTES[heapq.nsmallest] = _nsmallest


_register_heapq()


# NOTE [Bisecting by a symbolic int]: `bisect_right(self._milestones, self.last_epoch)` (SequentialLR) with a
# symbolic int was folded on the int's value: one compilation per step, then the recompile limit ran the frame
# eagerly. The search over a list of number constants is run here as CPython runs it (the same midpoints, so
# an unsorted list gives eager's answer too), each `x < a[mid]` a guarded relation: every int between the
# same two elements shares one entry.
def _bisect(fn):
    fold = _fold(fn)

    def handler(tx, args: list[Value], kwargs: dict[str, Value]) -> Value:
        from .comparisons import compare
        from .protocol import truth
        from .values import ListValue, SymNodeValue, TupleValue
        if len(args) != 2 or kwargs or not isinstance(args[1], SymNodeValue) \
                or not isinstance(args[0], (ListValue, TupleValue)):
            return fold(tx, args, kwargs)
        items, x = args[0].items, args[1]
        if not all(isinstance(i, ConstantValue) and type(i.value) in (int, float) for i in items):
            return fold(tx, args, kwargs)
        lo, hi = 0, len(items)
        while lo < hi:
            mid = (lo + hi) // 2
            before = compare(tx, operator.lt, x, items[mid]) if fn is bisect.bisect_right \
                else compare(tx, operator.lt, items[mid], x)
            if truth(tx, before) == (fn is bisect.bisect_right):
                hi = mid
            else:
                lo = mid + 1
        return ConstantValue(lo)
    return handler


for _fn in (bisect.bisect_left, bisect.bisect_right):
    BUILTIN_HANDLERS[_fn] = _bisect(_fn)
