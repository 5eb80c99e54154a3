"""Weak references made while tracing: `weakref.ref(obj)` as a value.

NOTE [Weak references made in the trace]: `torch.utils.hooks.RemovableHandle.__init__` (run by every
`module.register_forward_hook`, `register_forward_pre_hook`, `Tensor.register_hook`, ...) keeps
`weakref.ref(hooks_dict)` and one ref per extra dict. transformers installs its output-capturing forward hooks
from inside the model's forward on the first `output_hidden_states=True` call, so a trace that could not make
a weak reference broke in every `register_forward_hook`, and the recursive installer recompiled per module
class until it ran eagerly.

`weakref.ref(obj)` with no callback is a `WeakRefValue` over the referent's value when the referent is an
object the emitted code rebuilds as the same object: one read through a source (reloaded), or a list, dict
or object made while tracing (built once: NOTE [One object per value]). Calling it in the trace answers the
referent (alive: the frame holds it); where it outlives the graph it is rebuilt as `weakref.ref(<referent>)`
after the graph, which is eager's object (CPython shares the one callback-free ref of an object) or an equal
one, dead exactly when eager's would be. A type without weak reference support raises eager's TypeError.
Anything else (a callback, a tensor or constant referent, a subclass of ref) is a graph break.

NOTE [Weak references read from the program]: a `weakref.ref` object the frame reads (a closure cell, an
attribute) and calls, e.g. the wrapper `LRScheduler` puts on `optimizer.step` (`opt = opt_ref()`), answers its
referent read through the source `deref(<ref>)`: the ref's exact type is guarded, and the referent is wrapped as
any value read from the program, so its own guards (identity, type, attributes, or `deref(...) is None` for a
dead referent) come from how the trace uses it. A subclass of `weakref.ref` is left to the generic call path (its
`__call__` may be overridden). Before, every such call was a graph break ("call of ReferenceType.__call__").
"""
from __future__ import annotations

import weakref

from .breaks import BreakKind, Unsupported, UserException
from .builtins import handles
from .sources import CallSource, Ref
from .values import ConstantValue, DictValue, ListValue, NewObjectValue, ObjectValue, TensorValue, Value


class WeakRefValue(Value):
    """`weakref.ref(referent)` made while tracing (NOTE [Weak references made in the trace])."""

    def __init__(self, referent: Value) -> None:
        self.referent = referent
        self.source = None

    def python_type(self) -> type:
        return weakref.ReferenceType

    def describe(self) -> str:
        return f"weakref({self.referent.describe()})"

    def call_in_trace(self, tx, args: list[Value], kwargs: dict[str, Value]) -> Value:
        if args or kwargs:
            raise UserException(TypeError(f"weakref() takes no arguments ({len(args) + len(kwargs)} given)"))
        return self.referent

    def rebuild_call(self) -> tuple:
        """(callable, argument values) that make the object after the graph (codegen's `emit`)."""
        return weakref.ref, [self.referent]


def _rebuilt_as_itself(value: Value) -> bool:
    """The emitted code loads this very object: from its source, or the one object built for it."""
    if isinstance(value, (TensorValue, ConstantValue)):
        return False  # a tensor may be a graph output made anew; a constant is no object of the program's
    return value.source is not None or isinstance(value, (DictValue, ListValue, NewObjectValue))


@handles(weakref.ref)
def _weakref_ref(tx, args: list[Value], kwargs: dict[str, Value]) -> Value:
    if kwargs or not 1 <= len(args) <= 2:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "weakref.ref() with keywords or without a referent")
    if len(args) == 2 and not (args[1].is_constant() and args[1].as_constant() is None):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "weakref.ref() with a callback")
    return weak_ref(tx, args[0])


def weak_ref(tx, referent: Value) -> WeakRefValue:
    """`weakref.ref(referent)` (no callback) while tracing, or eager's TypeError, or a break."""
    try:
        cls = referent.python_type()
    except Unsupported:
        cls = None
    if isinstance(cls, type) and not cls.__weakrefoffset__:  # CPython's _PyType_SUPPORTS_WEAKREFS
        raise UserException(TypeError(f"cannot create weak reference to '{cls.__name__}' object"))
    if cls is None or not _rebuilt_as_itself(referent):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"weakref.ref() of {referent.describe()}")
    return WeakRefValue(referent)


class _NotARef:
    """The answer of `deref` for anything but a plain weak reference (NOTE [deref calls only a weak reference])."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<not a weakref>"


_NOT_A_REF = _NotARef()


# NOTE [deref calls only a weak reference]: the guards of a referent read `deref(<ref source>)`, and they are
# not all evaluated after the ref's own TYPE_MATCH: lookup facts on the referent (`'_call_impl' not in
# deref(s).__dict__`) sort first as the cheapest, and `all_failures` (explaining a miss) reads guards past a
# failed one. Where the slot was rebound to another callable, `ref()` ran that callable from the guards (46
# times for 3 calls of one program). `deref` calls only an object whose type is exactly `weakref.ref` (a
# subclass may override `__call__`: NOTE [Weak references read from the program]) and otherwise answers a
# private object no guard accepts (no attributes, not None, not any guarded object or type).
def deref(ref: weakref.ReferenceType):
    """The referent of `ref` (None once it died): the reload and guard expression of a referent's source."""
    return ref() if type(ref) is weakref.ReferenceType else _NOT_A_REF


# NOTE [Referents loaded once, at entry]: eager's `o = r()` holds the referent for the rest of the frame; the
# transformed function reloaded `deref(<ref>)` at each use, and a replayed effect that dropped the referent's
# last other reference (`holder.clear()`) before a replayed store into it (`o.k = 5`) read None: AttributeError
# where eager returned (review revU U7). The transformed function now loads each `deref` source once, in a
# prologue before anything else (sources.kept_local), and every use (graph input, replayed store, rebuilt
# return value) reads that local, which also keeps the referent alive until the function returns, as eager's
# local does.
deref.once_per_call = True


_DEREF = Ref(deref, "deref")


def is_read_weak_ref(fn: Value) -> bool:
    """A plain `weakref.ref` object read through a source (NOTE [Weak references read from the program])."""
    return isinstance(fn, ObjectValue) and type(fn.obj) is weakref.ReferenceType and fn.source is not None


def call_read_weak_ref(tx, fn: ObjectValue, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """`ref()` of a weak reference read from the program: its referent, read through `deref(<ref source>)`."""
    from .values.builder import wrap
    tx.output.guard_type(fn.source, weakref.ReferenceType)
    if args or kwargs:
        raise UserException(TypeError(f"weakref() takes no arguments ({len(args) + len(kwargs)} given)"))
    return wrap(tx.output, fn.obj(), CallSource(_DEREF, fn.source))
