"""Type predicates of the builtins: isinstance, issubclass, type() and callable().

Split from builtins.py (which registers this module's handlers by importing it at its end). The answers are
folded from guarded types; a user metaclass hook, a class defining `__class__` or a runtime-checkable
protocol is a graph break (NOTE [Lookup facts], NOTE [ABC answers]).
"""
from __future__ import annotations

import abc
import types
from typing import Any

import torch

from ..guards import COST_ID
from .breaks import BreakKind, Unsupported, UserException
from . import lookup
from .builtins import _consts, handles
from .protocol import constant_fold
from .parametrized_classes import rely_on_identity
from .values import ClassValue, ConstantValue, NewObjectValue, ObjectValue, Value

_TENSOR_MARKERS = {k: v for k, v in ((getattr(torch.nn, "Buffer", None), "_is_buffer"),
                                       (torch.nn.Parameter, "_is_param")) if k is not None}


def _marked_tensor(tx, obj, spec) -> Value | None:
    """NOTE [Tensors marked as buffers or parameters]: `isinstance(t, nn.Buffer)` is True for any tensor
    marked `_is_buffer` (what `nn.Buffer(t)` returns: a plain Tensor), and `isinstance(t, nn.Parameter)` also
    for a tensor marked `_is_param` (_BufferMeta/_ParameterMeta.__instancecheck__, torch classes the
    metaclass check below treats as fixed): answered from the type alone, it was False for a buffer made by
    nn.Buffer (red team 15). The marker is read as an attribute (guarded as any tensor attribute read)."""
    from .values import TensorValue
    if not isinstance(obj, TensorValue):
        return None
    specs = spec if isinstance(spec, tuple) else (spec,)
    if not any(isinstance(k, type) and k in _TENSOR_MARKERS for k in specs):
        return None
    if isinstance(spec, tuple) or (spec is torch.nn.Parameter and issubclass(obj.python_type(), spec)):
        if isinstance(spec, tuple):
            raise Unsupported(BreakKind.UNSUPPORTED_CALL, "isinstance of a tensor against a tuple with Buffer/Parameter")
        return None
    try:
        flag = tx.getattr(obj, _TENSOR_MARKERS[spec])
    except UserException as e:
        if isinstance(e.exc, AttributeError):
            return ConstantValue(False)
        raise
    if not flag.is_constant():
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"isinstance of a tensor against {spec.__name__}")
    return ConstantValue(bool(flag.as_constant()))


@handles(isinstance)
def _isinstance(tx, args, kwargs):
    obj, classes = args
    cls = obj.python_type()
    spec = classes.as_constant()
    marked = _marked_tensor(tx, obj, spec)
    if marked is not None:
        return marked
    _check_no_class_override(tx, obj, cls)
    _check_plain_metaclasses(tx, spec, "__instancecheck__", cls)
    _check_plain_metaclasses(tx, spec, "__subclasscheck__", cls)
    try:
        answer = issubclass(cls, spec)
    except TypeError:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "isinstance raising TypeError (NOTE [isinstance raising "
                                                      "TypeError] in type_checks.py)") from None
    if isinstance(obj, (ObjectValue, NewObjectValue)) and _reads_class(cls, spec):
        _class_read(tx, obj, cls, spec)
    return ConstantValue(answer)


# NOTE [isinstance raising TypeError]: `isinstance(o, (Other, 5))` raises TypeError at `5`, after CPython has
# read `o.__class__` for `Other` (NOTE [isinstance reads __class__]). The fold's issubclass raised first: no read
# was traced (review revA A5: eager logged the read through a Python `__getattribute__`, framejit none), and the
# user saw issubclass's message ("issubclass() arg 2 must be a class, ...") where eager's says "isinstance() arg
# 2 must be a type, ...". Such a check is a graph break: CPython's own isinstance runs it.


# NOTE [The __class__ read guarded]: where CPython's isinstance reads `o.__class__` (NOTE [isinstance reads
# __class__]), its answer is whatever type(o)'s `__getattribute__` returns. A user one (any object in a
# class dict, a function or not: a descriptor, a functools.partialmethod) is traced, and breaks unless it is a
# plain function (getattribute.custom_getattribute); the default one (object's, type's, a module's) is
# guarded to stay the default: no class of the MRO but the immutable built-in types gains `__getattribute__`
# (review revA A1: one added to the class or a base after the first call went unseen, the answer stayed the
# first trace's; a library base such as torch.utils.data.Dataset was left out of that guard until hsound6:
# `Dataset.__getattribute__ = ga` after the first call went unseen the same way). Any other C
# `__getattribute__` may forward the read (weakref.proxy answers its referent's class: eager True, the fold
# False, revA A2): a graph break. No read, no guard: a plain object's checks that answer True cost nothing more.
_GENERIC_CLASS_READS = tuple(k.__dict__["__getattribute__"] for k in (object, type, types.ModuleType))


def _builtin_slot(impl: Any) -> bool:
    """`impl` is the `__getattribute__` slot of a builtins type (property, function, ...: their own slot wrapper,
    which reads `__class__` from the type), not of a proxy; weakref's proxies are in module `weakref`."""
    return isinstance(impl, types.WrapperDescriptorType) and getattr(impl.__objclass__, "__module__", None) == "builtins"


def _reads_class(cls: type, spec: Any) -> bool:
    """CPython's isinstance(o, spec) reads `o.__class__` for an `o` of type `cls`: the first class of the
    tuple either answers True without a read or reads."""
    klass = next(iter(_flat(spec)), cls)
    return klass is not cls and (not isinstance(klass, type) or isinstance(klass, abc.ABCMeta) or
                                 not issubclass(cls, klass))


def _class_read(tx, obj: Value, cls: type, spec: Any) -> None:
    if lookup.has_custom_getattribute(cls):
        _read_class_as_cpython(tx, obj, cls, spec)
        return
    index, impl = lookup.mro_lookup(cls, "__getattribute__")
    if not any(impl is generic for generic in _GENERIC_CLASS_READS) and not _builtin_slot(impl):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"isinstance of a {cls.__name__}, whose C __getattribute__ "
                                                      "may answer __class__")
    lookup.guard_mro(tx.output, cls)  # NOTE [MRO guarded] in lookup.py
    lookup.guard_class_absent(tx.output, cls.__mro__[:index], "__getattribute__")  # library classes too
    if not lookup.is_immutable_class(cls.__mro__[index]):  # `__getattribute__ = object.__getattribute__` in a class
        lookup.guard_entry_identity(tx.output, lookup.entry_source(cls.__mro__[index], "__getattribute__"), impl)


# NOTE [isinstance reads __class__]: CPython's isinstance(o, K) reads `o.__class__` through the class's own
# lookup (a Python `__getattribute__` runs there) in these cases, per class of a tuple in order, stopping at
# the first class that answers True: never where type(o) is K itself; for a plain class K, only where type(o)
# is no subclass of K (then it answers False); for an ABC K, once whatever the answer (ABCMeta's
# `__instancecheck__` asks `__class__` first, then answers issubclass(type(o), K)). Those reads are traced as
# eager makes them (eager logged 2 reads for `isinstance(o, (int, float))`, the fold none; revW W3: a check
# against an ABC that answers True was folded with no read, because the test asked whether the ABC's
# *metaclass* was an ABC). An answer other than type(o) itself (a `__getattribute__` answering another
# class) is not modelled: a graph break, as is a class that is no type (a user `__instancecheck__` object).
def _read_class_as_cpython(tx, obj: Value, cls: type, spec: Any) -> None:
    for klass in _flat(spec):
        if klass is cls:
            return
        if not isinstance(klass, type):
            raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"isinstance of a {cls.__name__}, whose Python "
                                                          "__getattribute__ the check calls")
        is_abc = isinstance(klass, abc.ABCMeta)
        if not is_abc and issubclass(cls, klass):
            return
        answer = tx.getattr(obj, "__class__")
        if not (isinstance(answer, ClassValue) and answer.as_constant() is cls):
            raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{cls.__name__}.__getattribute__ answers __class__")
        if is_abc and issubclass(cls, klass):
            return


def _flat(spec: Any) -> list:
    return [k for item in spec for k in _flat(item)] if isinstance(spec, tuple) else [spec]


@handles(issubclass)
def _issubclass(tx, args, kwargs):
    if len(args) == 2 and args[1].is_constant():
        subject = args[0].as_constant() if args[0].is_constant() else None
        _check_plain_metaclasses(tx, args[1].as_constant(), "__subclasscheck__", subject)
    return constant_fold(issubclass, *_consts(args))


def _check_no_class_override(tx, obj, cls: type) -> None:
    """isinstance(o, K) also asks `o.__class__` (and ABCs ask only that) when type(o) is no subclass: a
    class defining its own `__class__` (a property answering `list`) makes that the answer, so it is a
    graph break; without one, user classes are guarded to stay without one (red team, test_redteam2.py:
    the answer came from type(o) alone, wrong from the first call)."""
    if not isinstance(obj, (ObjectValue, NewObjectValue)) or not isinstance(cls, type):
        return
    index, _ = lookup.mro_lookup(cls, "__class__")
    if index is not None and cls.__mro__[index] is not object:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{cls.__name__} defines __class__, which isinstance reads")
    lookup.guard_class_absent(tx.output, [k for k in cls.__mro__[:-1] if not lookup.is_fixed_class(k)], "__class__")


def _check_plain_metaclasses(tx, spec: Any, hook: str, subject: Any) -> None:
    """`isinstance`/`issubclass` are folded from the (guarded) type, which is what CPython computes
    unless a user metaclass defines `__instancecheck__`/`__subclasscheck__`: then the answer is its code's
    (a graph break); without one, it is guarded to stay without one (NOTE [Lookup facts]). The answer
    also depends on the subject's MRO (NOTE [MRO guarded]) and, for an ABC, on its registry."""
    lookup.guard_mro(tx.output, subject)
    for klass in spec if isinstance(spec, tuple) else (spec,):
        meta = type(klass)
        if hook == "__instancecheck__" and isinstance(klass, type) and getattr(klass, "_is_protocol", False):
            # a runtime-checkable typing.Protocol answers isinstance by hasattr on the instance, on every
            # call (typing._ProtocolMeta.__instancecheck__), past the ABC cache the fold and its guard read:
            # a method added to the class later went unseen
            raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"isinstance against the protocol {klass.__name__}")
        if isinstance(klass, abc.ABCMeta) and isinstance(subject, type):
            _check_library_subclasshook(klass)
            _guard_abc_answer(tx, subject, klass)
            rely_on_identity(tx.output, subject)  # `K.register(C)` names one class (NOTE [Parametrized classes alike])
        if not isinstance(klass, type) or lookup.is_fixed_class(meta):
            continue
        index, _ = lookup.mro_lookup(meta, hook)
        if index is None or not lookup.is_fixed_class(meta.__mro__[index]):
            raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"the metaclass {meta.__name__} defines {hook}")
        lookup.guard_mro(tx.output, meta)  # NOTE [MRO guarded] in lookup.py
        lookup.guard_class_absent(tx.output, meta.__mro__[:index], hook)


# NOTE [ABC answers]: an ABC answers `isinstance`/`issubclass` from its registry (`A.register(K)`) and its
# `__subclasshook__`, which the trace consulted when it folded the answer. The guard is the answer itself,
# `issubclass(K, A) is <answer>`, one line per (class, ABC) pair: ABCMeta caches answers per class and
# drops its negative cache when any registration happens (the process-wide cache token), so the check is
# a cache hit on most calls and recomputes exactly when CPython would. It holds in a new process whenever
# the answer does (ABCMeta's cache token is a per-process counter, so a token guard never loaded from the
# frame cache), and a registration that does not change this answer costs no recompile. Recomputing may
# call a `__subclasshook__` (abc's own protocol, run by eager's `isinstance` at the same moments).
# NOTE [User subclass hooks run where eager runs them]: the fold computed an ABC's answer at trace time and the
# guard recomputes it when the function is entered, so a user `__subclasshook__` (called by ABCMeta on a cache
# miss) ran before every effect the function makes ahead of the check: eager logged ['__class__' read, hook]
# and ['before', hook], framejit [hook, '__class__'] and [hook, 'before'] (review revA A6). A hook of a
# library class (collections.abc's, object's) is taken to have no effect; a user one is a graph break: the
# check then runs in the frame's own code, where eager runs it.
def _check_library_subclasshook(klass: type) -> None:
    index, _ = lookup.mro_lookup(klass, "__subclasshook__")
    if index is not None and not lookup.is_fixed_class(klass.__mro__[index]):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"the ABC {klass.__name__} answers through the user "
                                                      "__subclasshook__ of " + klass.__mro__[index].__qualname__)


def _guard_abc_answer(tx, subject: type, klass: type) -> None:
    """`issubclass(subject, klass)` keeps the answer the trace folded."""
    answer = issubclass(subject, klass)
    out = tx.output
    call = (f"{out.name_of(issubclass, 'issubclass')}({out.name_of(subject, subject.__name__)}, "
            f"{out.name_of(klass, klass.__name__)})")
    out.add_guard("ABC_ANSWER", f"{call} is {answer}", None,
                  expected=f"issubclass({subject.__qualname__}, {klass.__qualname__}) is {answer}", actual=call,
                  cost=COST_ID)


@handles(type)
def _type(tx, args, kwargs):
    if len(args) != 1:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "type() with three arguments")
    cls = args[0].python_type()
    rely_on_identity(tx.output, cls)  # NOTE [Parametrized classes alike]
    return ClassValue(cls)


@handles(callable)
def _callable(tx, args, kwargs):
    v = args[0]
    if v.is_constant():
        return ConstantValue(callable(v.as_constant()))
    if isinstance(v, ObjectValue):
        # NOTE [callable() of an object]: the answer is whether its class resolves `__call__` (the type's call
        # slot): guarded as that lookup, so `C.__call__ = f` after the first call is seen (it answered False)
        from .lookup import guard_lookup
        guard_lookup(tx.output, type(v.obj), "__call__")
        return ConstantValue(callable(v.obj))
    return ConstantValue(_type_is_callable(tx, v))


# NOTE [callable() of other values]: for any other value the answer is whether its type has a call slot,
# `__call__` found in the dict of a class of its MRO (not `hasattr(cls, "__call__")`, which finds the
# metaclass's). It answered True for every value that was not a tensor, sequence or dict, so a NumPy array,
# a generator, an iterator, `zip(...)` or `map(...)` was callable (`default() if callable(default) else
# default` took the wrong branch; review revO O2). A class defined in Python has the lookup guarded (a
# `__call__` added later); a value whose type the trace does not know is a graph break.
def _type_is_callable(tx, v: Value) -> bool:
    from .values.callables import PartialValue
    if isinstance(v, PartialValue):
        return True  # functools.partial has a call slot (its python_type is not modelled)
    try:
        cls = v.python_type()
    except Exception:  # noqa: BLE001 - a value kind without a known Python type
        cls = None
    if not isinstance(cls, type):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"callable() of {v.describe()}")
    if cls.__flags__ & (1 << 9):  # Py_TPFLAGS_HEAPTYPE: a class statement's, whose dict can change
        from .lookup import guard_lookup
        guard_lookup(tx.output, cls, "__call__")
    return any("__call__" in vars(k) for k in cls.__mro__)
