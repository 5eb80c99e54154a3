"""Comparisons over abstract values: `==`/`<` and friends, identity (`is`), and membership (`in`).

Split from protocol.py (which keeps operators, truth, iteration and subscripts); the same rule holds: an
operation Python itself rejects raises what CPython raises (UserException), one framejit cannot model raises
Unsupported (a graph break).
"""
from __future__ import annotations

import enum
import operator
import types
from typing import Any, Callable

import torch

from .breaks import BreakKind, Unsupported, UserException
from .dict_objects import base_slot_owner, dict_contents, dunder, is_new_dict_object, storage
from .protocol import _SYM_COMPARE_OPS, INPLACE_TO_PLAIN, _is_int, constant_fold, truth
from .values import (BoundMethodValue, BuiltinValue, ConstantValue, DictValue, DictViewValue, ListValue, NewObjectValue,
                     NNModuleValue, ObjectValue, SequenceValue, SetValue, SymFloatValue, SymNodeValue, TensorValue, TupleValue, UserFunctionValue, Value)
from .values.outside import OutsideDictValue

def compare(tx, fn: Callable, a: Value, b: Value) -> Value:
    from . import numpy_support as nps
    if nps.involves_ndarray(a, b) and fn not in (operator.is_, operator.is_not):  # NOTE [NumPy as torch]
        return nps.binary(tx, fn, a, b)
    if isinstance(a, TensorValue) or isinstance(b, TensorValue):
        from .tensor_operators import check_tensor_operator  # NOTE [Patched tensor operators]
        check_tensor_operator(tx, fn, a, b, INPLACE_TO_PLAIN)
        return tx.output.call("call_function", fn, (a, b), {})
    if (isinstance(a, SymFloatValue) or isinstance(b, SymFloatValue)) and fn in _SYM_COMPARE_OPS:
        kept = tx.output.float_compare(fn, a, b)  # NOTE [Float relations] in values/scalars.py
        if kept is not None:
            return kept
        from .float_parts import compared_floats  # NOTE [Comparisons of computed floats guarded by replay]
        kept = compared_floats(tx.output, fn, a, b)
        if kept is not None:
            return kept
        _computed_float_compare(tx, a, b)
    if (isinstance(a, SymNodeValue) or isinstance(b, SymNodeValue)) and _is_int(a) and _is_int(b) \
            and fn in _SYM_COMPARE_OPS:  # a relation, guarded only if the code branches on it
        return tx.output.sym_op(fn, (a, b))
    if isinstance(a, (SymNodeValue, SequenceValue)) or isinstance(b, (SymNodeValue, SequenceValue)):
        from . import sym_arith  # NOTE [Size arithmetic stays symbolic]
        kept = sym_arith.compare(tx, fn, a, b) or sym_arith.compare_sequences(tx, fn, a, b)
        if kept is not None:
            return kept
    from .enum_attributes import enum_compare  # NOTE [Dunders of enum members]
    if (kept := enum_compare(tx, fn, a, b)) is not None:
        return kept
    if a.is_constant() and b.is_constant():
        return constant_fold(fn, a.as_constant(), b.as_constant())
    from .list_objects import list_compare
    kept = list_compare(tx, fn, a, b)  # NOTE [List subclasses]
    if kept is not None:
        return kept
    if isinstance(a, (ObjectValue, NewObjectValue)) or isinstance(b, (ObjectValue, NewObjectValue)):
        from .user_operators import user_compare  # NOTE [Comparisons of Python classes]
        result = user_compare(tx, fn, a, b)
        if result is not None:
            return result
    if fn in (operator.eq, operator.ne) and _identity_comparable(a, b) and _plain_ne(fn, a, b):
        _guard_default_eq(tx, a, b, fn)
        same = _same_object(tx, a, b)  # NOTE [Identity of objects guarded]
        return ConstantValue(same if fn is operator.eq else not same)
    if fn in (operator.eq, operator.ne) and _default_eq(a) and _default_eq(b) and _plain_ne(fn, a, b):
        _guard_default_eq(tx, a, b, fn)
        same = is_same(tx, a, b)  # neither type defines __eq__: CPython falls back to identity
        return ConstantValue(same if fn is operator.eq else not same)
    if _plain_sequences(a, b) and fn in _ORDERINGS:
        return _compare_items(tx, fn, a, b)  # NOTE [Tuples compared item by item]
    raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"comparison {fn.__name__} of {a.describe()} and {b.describe()}")


# NOTE [Tuples compared item by item]: `sorted(d.items())` over (name, tensor) pairs compares tuples that hold
# tensors; CPython's tuple (and list) comparison looks for the first position whose items differ
# (PyObject_RichCompareBool: the same object is equal without a call, else `==` and its truth) and compares
# only those two items with the operator, returning that result as it is; when no position differs, the
# lengths decide. So ('skip', t1) < ('a', t2) is 'skip' < 'a' and never touches the tensors. Each step
# goes through `compare` and `truth`, so a tensor pair that must be compared is a tensor op whose truth is
# data-dependent (a break), as eager's bool(tensor == tensor). Exact tuples and lists only (subclasses may
# override the operators).
_ORDERINGS = (operator.lt, operator.le, operator.gt, operator.ge, operator.eq, operator.ne)


def _plain_sequences(a: Value, b: Value) -> bool:
    return all(isinstance(v, (TupleValue, ListValue)) and type(v) in (TupleValue, ListValue) for v in (a, b)) \
        and a.cls is b.cls and a.cls in (tuple, list)


def _compare_items(tx, fn: Callable, a: Value, b: Value) -> Value:
    if fn in (operator.eq, operator.ne) and len(a.items) != len(b.items):
        return ConstantValue(fn is operator.ne)
    for x, y in zip(a.items, b.items):
        if x is y or (x.is_constant() and y.is_constant() and x.as_constant() is y.as_constant()):
            continue
        if not truth(tx, compare(tx, operator.eq, x, y)):
            if fn in (operator.eq, operator.ne):
                return ConstantValue(fn is operator.ne)
            return compare(tx, fn, x, y)
    return ConstantValue(fn(len(a.items), len(b.items)))


def _default_eq(v: Value) -> bool:
    """Comparing `v` with `==` ends in identity (its type keeps object's __eq__; None's own __eq__, which
    CPython 3.12 has, answers NotImplemented for any other object)."""
    if isinstance(v, ConstantValue) and v.value is None:
        return True
    return isinstance(v, (ObjectValue, NewObjectValue, ConstantValue)) and \
        getattr(v.python_type(), "__eq__", None) is object.__eq__


def _identity_comparable(a: Value, b: Value) -> bool:
    return isinstance(a, ObjectValue) and isinstance(b, ObjectValue) and type(a.obj).__eq__ is object.__eq__ \
        and type(b.obj).__eq__ is object.__eq__  # b's own __eq__ runs when a's answers NotImplemented


def _plain_ne(fn: Callable, a: Value, b: Value) -> bool:
    """For `!=`: neither class defines its own __ne__ (object's negates __eq__)."""
    return fn is not operator.ne or all(getattr(v.python_type(), "__ne__", object.__ne__) is object.__ne__
                                        for v in (a, b) if isinstance(v, (ObjectValue, NewObjectValue)))


def _guard_default_eq(tx, a: Value, b: Value, fn: Callable) -> None:
    """The identity answer holds while neither class gains `__eq__` (`__ne__` for !=): NOTE [Lookup facts]
    (a class given `__eq__` after the first call was compared by identity; red team, test_redteam2.py)."""
    from . import lookup
    for v in (a, b):
        if isinstance(v, (ObjectValue, NewObjectValue)):
            cls = v.python_type()
            lookup.guard_lookup(tx.output, cls, "__eq__")
            if fn is operator.ne:
                lookup.guard_lookup(tx.output, cls, "__ne__")


def _same_object(tx, a: Value, b: Value) -> bool:
    """`a is b` where both may be objects from outside: their relation is guarded (NOTE [Identity of objects
    guarded]); any other two values are the same only as one Value."""
    if a is b:
        return True
    return isinstance(a, ObjectValue) and isinstance(b, ObjectValue) and _same_object_guarded(tx, a, b)


# NOTE [Identity of constants]: two constants are compared by value guards (`x == 1000000`), not by
# identity, so `a is b` of two ints, strings or floats from outside answered what the objects of the first
# call answered: 10**6 and int('1000000') (two objects in eager) hit the entry traced for one object passed
# twice. The answer is guarded (`a is b` or `a is not b`); an equal value from outside compared with a
# constant made in the trace is a graph break (no guard could name that object in a new process). Types
# whose identity is their value (None, bools, Ellipsis, NotImplemented; small ints, empty and one-character
# strings and the empty tuple, which CPython caches) and values that differ need no guard. `x in [...]`
# and `[...].count(x)` compare `x is y or x == y`, so a NaN reaches this too. An enum member is the one
# object of its class with its value (a guard on it pins the member by name), so its identity is its value
# too (`param.kind is _VAR_POSITIONAL` in inspect.BoundArguments.apply_defaults).
_BY_VALUE = (type(None), bool, type(Ellipsis), type(NotImplemented))


def _identity_is_value(v: Any) -> bool:
    return (type(v) in _BY_VALUE or isinstance(v, enum.Enum) or (type(v) is int and -5 <= v <= 256)
            or (type(v) is str and len(v) <= 1 and v <= "\xff") or (type(v) is tuple and v == ()))


def _same_constant(tx, a: ConstantValue, b: ConstantValue) -> bool:
    """`a is b` of two constants (NOTE [Identity of constants])."""
    same = a.value is b.value
    if type(a.value) is not type(b.value) or _identity_is_value(a.value) or _identity_is_value(b.value):
        return same  # each value's type and value are guarded where it came from
    if not same and not (a.value == b.value) and a.value == a.value and b.value == b.value:
        return False  # unequal values (NaN excepted) are two objects
    if a.source is None and b.source is None:
        return same  # code constants and values made in the trace: the same objects on every call
    if a.source is None or b.source is None:
        # an equal value from outside vs a code constant (`k is "train"`): pinning the constant object in a
        # guard would not survive the frame cache (a new process has another object of that value)
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"identity comparison of {a.describe()} and {b.describe()}")
    ea, eb = a.source.expr(tx.output.names), b.source.expr(tx.output.names)
    tx.output.add_guard("IDENTITY", f"{ea} is {eb}" if same else f"{ea} is not {eb}", a.source,
                        expected=("the same object as " if same else "not the same object as ") + b.source.describe())
    return same


def _unbound(v: Value) -> bool:
    """A library function or method descriptor not bound to an instance: one object however it is reached (a
    bound method is a new object at each read, so its identity is not modelled here)."""
    import types
    obj = getattr(v, "obj", None)
    if not isinstance(v, BuiltinValue) or not isinstance(obj, (types.BuiltinFunctionType, types.MethodDescriptorType,
                                                               types.WrapperDescriptorType, types.FunctionType)):
        return False
    return isinstance(obj, types.FunctionType) or getattr(obj, "__self__", None) is None or \
        isinstance(obj.__self__, types.ModuleType)


def is_same(tx, a: Value, b: Value) -> bool:
    """`a is b`."""
    if a is b:
        return True
    from .python_draws import DrawValue
    if isinstance(a, DrawValue) or isinstance(b, DrawValue):  # NOTE [Draws have no truth while tracing]
        raise Unsupported(BreakKind.DATA_DEPENDENT, "identity of a number drawn after the graph")
    if isinstance(a, ConstantValue) and isinstance(b, ConstantValue):
        return _same_constant(tx, a, b)
    if isinstance(a, TensorValue) and isinstance(b, TensorValue):
        return _same_tensor(tx, a, b)
    if isinstance(a, TensorValue) or isinstance(b, TensorValue):
        return False
    if isinstance(a, ObjectValue) and isinstance(b, ObjectValue):
        return _same_object_guarded(tx, a, b)
    if isinstance(a, UserFunctionValue) and isinstance(b, UserFunctionValue):
        from .function_attrs import same_function
        return same_function(tx, a, b)
    if _fresh_mutable(a) or _fresh_mutable(b):  # two equal lists made while tracing are two lists
        return False
    if _unbound(a) and _unbound(b):  # `func is torch.Tensor.add` (NOTE [Inlined __torch_function__])
        return a.obj is b.obj
    if a.is_constant() and b.is_constant():
        ca, cb = a.as_constant(), b.as_constant()
        if type(ca) is not type(cb) or ca != cb or _identity_is_value(ca):
            return ca is cb  # NOTE [Identity of constants]: unequal values are two objects
        # two equal tuples (or frozensets) are rebuilt by as_constant: their identity is not known here
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"identity comparison of {a.describe()} and {b.describe()}")
    if type(a) is not type(b) and (isinstance(a, ConstantValue) or isinstance(b, ConstantValue)):
        return False
    if _fresh(a) or _fresh(b):  # a list, dict, set or object made while tracing is no other object
        return False
    if _exact_type(a) is not None and _exact_type(b) is not None and _exact_type(a) is not _exact_type(b):
        return False  # objects of two types are two objects (heapq's `result is sentinel`, a tuple vs object())
    raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"identity comparison of {a.describe()} and {b.describe()}")


# NOTE [Identity of objects guarded]: `A is B` of two objects from outside (module globals, attributes) answered
# from the objects of the first call, and their guards pin each one's type only: after `B = A` the entry traced
# for two objects still answered False (eager True), in the same process and in a warm one (review revE E6's
# f4). The answer is guarded as the relation of the two sources (`G['A'] is G['B']` / `is not`), which names
# no object, so the entry still persists. `A == B`, `A != B` of objects with object's own __eq__, and `B in L`
# (each item compared `is` first) are answered by identity too and guarded the same way (review revH H4).
def _same_object_guarded(tx, a: ObjectValue, b: ObjectValue) -> bool:
    same = a.obj is b.obj
    if a.source is not None and b.source is not None and a.source != b.source:
        ea, eb = a.source.expr(tx.output.names), b.source.expr(tx.output.names)
        tx.output.add_guard("IDENTITY", f"{ea} is {eb}" if same else f"{ea} is not {eb}", a.source,
                            expected=("the same object as " if same else "not the same object as ") +
                            b.source.describe())
    return same


def _exact_type(v: Value) -> type | None:
    """The type of the object `v` stands for, where the value knows it exactly."""
    if isinstance(v, (SequenceValue, DictValue, SetValue, ObjectValue, NewObjectValue, ConstantValue)):
        return v.python_type()
    if isinstance(v, UserFunctionValue):
        return types.FunctionType
    if isinstance(v, BoundMethodValue) and isinstance(v.func, UserFunctionValue):
        return types.MethodType  # `new_func is not self.func` (functools.partialmethod.__get__): two objects
    return None


def _fresh_mutable(v: Value) -> bool:
    return _fresh(v) and not (isinstance(v, SetValue) and not issubclass(v.cls, set))  # a frozenset: by value below


def _fresh(v: Value) -> bool:
    return v.source is None and isinstance(v, (ListValue, DictValue, SetValue, NewObjectValue)) and \
        not isinstance(v, DictViewValue)


def _same_tensor(tx, a: TensorValue, b: TensorValue) -> bool:
    """NOTE [Tensor identity]: `a is b` for two tensor values. The fake tensors mirror object identity:
    an op that returns its input object in eager (`F.dropout` in eval, an in-place method, `contiguous()` of
    a contiguous tensor) returns the input's fake tensor object too, and one real input tensor reached
    through two sources has one fake (and an ALIAS guard). So equal fakes mean the same object, and
    different fakes different objects; when both are graph inputs read from sources, that they are
    distinct is guarded (`a is not b`), so a later call passing one tensor twice recompiles."""
    if a.cls is not b.cls:  # NOTE [Tensor subclasses traced as tensors]: `as_subclass` made a new object
        return False
    if a.node is b.node or (a.fake is not None and a.fake is b.fake):
        return True
    if a.fake is None or b.fake is None:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "identity comparison of tensor values without metadata")
    if a.source is not None and b.source is not None:
        ea, eb = a.source.expr(tx.output.names), b.source.expr(tx.output.names)
        tx.output.add_guard("DISTINCT", f"{ea} is not {eb}", a.source, expected=f"not the same tensor as {b.source.describe()}")
    return False


# NOTE [Comparisons of computed dynamic floats]: `a < best * rel_epsilon` (ReduceLROnPlateau's is_better, with the
# loss and `best` dynamic floats) cannot be a guarded relation (NOTE [Float relations]: the env's arithmetic may
# round otherwise than the code's), and specialising its floats pinned the entry to their values: one compilation
# per step, then the recompile limit ran the frame eagerly. The comparison is a graph break instead (it runs as
# Python on the real floats; the floats stay dynamic). fullgraph=True specialises, as before. Operands that are plain
# expressions of sourced inputs are no longer a break: NOTE [Comparisons of computed floats guarded by replay].
def _computed_float_compare(tx, a: Value, b: Value) -> None:
    if getattr(tx.output, "fullgraph", False):
        return
    if any(isinstance(v, SymFloatValue) and v.roots != (v,) and v.roots for v in (a, b)):
        raise Unsupported(BreakKind.DYNAMIC_CONTROL_FLOW, "a comparison of a float computed from dynamic floats: "
                                                          "run as Python, so the floats stay dynamic")


def contains(tx, item: Value, container: Value) -> bool:
    from .sym_arith import SymRangeValue, range_contains  # NOTE [Size arithmetic stays symbolic]
    if isinstance(container, SymRangeValue):
        kept = range_contains(tx, item, container)
        if kept is not None:
            return kept
    if is_new_dict_object(container):
        result = dunder(tx, container, "__contains__", [item])
        return truth(tx, result) if result is not None else contains(tx, item, storage(container))
    found = _symbolic_int_in(tx, item, container)
    if found is not None:
        return found
    from .enum_attributes import user_enum_member  # NOTE [Dunders of enum members]
    if isinstance(container, SetValue):
        from .identity_keys import set_lookup_element  # NOTE [Sets looked up as frozensets]
        from .values.outside import set_has  # NOTE [Sets of tensors], [Sets from outside]
        return set_has(container, set_lookup_element(tx, item, container))
    if isinstance(container, OutsideDictValue):
        from .identity_keys import dict_key
        return container.has(dict_key(tx, item))  # NOTE [Dicts from outside]
    if isinstance(container, DictValue):
        from .identity_keys import dict_key
        return dict_key(tx, item, container) in container.items
    if isinstance(container, SequenceValue):
        for x in container.items:
            if x is item:
                return True
            if isinstance(x, TensorValue) or isinstance(item, TensorValue):
                raise Unsupported(BreakKind.DATA_DEPENDENT, "`in` over tensors compares tensor data")
            if (isinstance(x, SymNodeValue) or isinstance(item, SymNodeValue)) and _is_int(x) and _is_int(item):
                if truth(tx, compare(tx, operator.eq, x, item)):  # `n in (3, 4)`: relations guarded, not n
                    return True
                continue
            if x.is_constant() and item.is_constant() and not (user_enum_member(x) or user_enum_member(item)):
                if x.as_constant() == item.as_constant():  # (an enum's own __eq__ is inlined below)
                    return True
                if isinstance(x, ConstantValue) and isinstance(item, ConstantValue):
                    if is_same(tx, x, item):  # a NaN found by identity (NOTE [Identity of constants])
                        return True
                elif x.as_constant() != x.as_constant() or item.as_constant() != item.as_constant():
                    raise Unsupported(BreakKind.UNSUPPORTED_CALL, "`in` over containers holding NaN")
                continue
            if _container_and_scalar(x, item):
                continue  # a list/tuple/dict/set never equals a number, string or None
            if _same_object(tx, x, item) or truth(tx, compare(tx, operator.eq, x, item)):
                return True  # CPython: `x is item or x == item` per element (an object's __eq__ runs)
        return False
    return _object_contains(tx, item, container)


# NOTE [Symbolic ints looked up in dicts and sets]: `self.last_epoch not in self.milestones` (MultiStepLR's Counter)
# with a symbolic int looked the int up by its value: the entry was pinned to it, one compilation per step, then
# the recompile limit ran the frame eagerly. A dict or set whose keys are plain constants (read whole, so its keys
# are guarded) holds the int exactly when one of its number keys equals it (CPython's hash lookup finds equal
# numbers): each `n == k` is a guarded relation, so every value in none of the keys shares one entry. An int that
# is already pinned, or found in a dict or set from outside (`if n not in CACHE: CACHE[n] = ...`), is looked up by
# value as before, which guards that key only: reading all the keys guards them all, and a cache that grows
# would miss every entry. A key of another kind never equals an int; any other key (an object with its own
# __eq__) leaves the lookup as before.
_NUMBER_KEYS = (int, bool, float)


def _symbolic_int_in(tx, item: Value, container: Value) -> bool | None:
    if not (isinstance(item, SymNodeValue) and _is_int(item)) or not isinstance(container, (DictValue, SetValue)):
        return None
    if isinstance(item.sym, torch.SymInt) and tx.output.fake_mode.shape_env.simplify(item.sym.node.expr).is_number:
        return None  # already specialised (a guard pins it): looked up by value, only that key guarded
    raw = getattr(container, "_obj", None)  # a dict or set from outside, its keys not read yet
    if raw is not None and not container.materialized and item.sym.node.hint in raw:
        return None  # found: pinned anyway; looked up by value, only that key guarded, not all the keys
    if _absent_from_outside(tx, item, container):  # NOTE [Symbolic ints absent from containers from outside]
        return False
    keys = list(container.items)
    if not all(type(k) in (*_NUMBER_KEYS, str, bytes, type(None), tuple) for k in keys):
        return None
    for k in keys:
        if type(k) in _NUMBER_KEYS and truth(tx, compare(tx, operator.eq, item, ConstantValue(k))):
            return True
    return False


# NOTE [Symbolic ints absent from containers from outside]: `n in CACHE` with n a symbolic int absent from a dict or
# set from outside read all its keys (DICT_KEYS, or the set by value) to compare n with each: a cache that grows
# between calls missed once per new key, and the recompile limit then ran the frame eagerly (stock torch.compile
# the same). The answer depends only on whether n is in it now, so that is the guard line, `(n in CACHE) is False`,
# with n printed as the expression of its sourced int inputs (float_parts.operand_text: the same int on every
# call that hits): n stays symbolic and no key is read. The lookup is dict's or set's own (the type is guarded
# exact), as a DICT_CONTAINS guard of a constant key makes it. A container the trace changed, or an n with no such
# expression, reads the keys as before; a present n is looked up by value (above).
def _absent_from_outside(tx, item: Value, container: Value) -> bool:
    from ..guards import COST_TENSOR
    from .float_parts import operand_text
    from .values.outside import OutsideDictValue, OutsideSetValue
    if type(container) not in (OutsideDictValue, OutsideSetValue) or container.materialized \
            or getattr(container, "written", None) or getattr(container, "changes", None):
        return False
    text = operand_text(tx.output, item, {})
    if text is None:
        return False
    e = container.source.expr(tx.output.names)
    tx.output.add_guard("DICT_CONTAINS" if type(container) is OutsideDictValue else "SET_CONTAINS",
                        f"({text} in {e}) is False", container.source, expected=f"{item.describe()} absent",
                        actual="{" + f"{text!r}: {text}" + "}", cost=COST_TENSOR + 1)
    return True


def _object_contains(tx, item: Value, container: Value) -> bool:
    """contains for constants, modules and objects with their own __contains__, __iter__ or __getitem__."""
    if isinstance(container, ConstantValue):
        try:
            return item.as_constant() in container.value
        except Exception as e:
            raise UserException(e) from None
    if isinstance(container, NNModuleValue):
        from .module_protocol import replaced  # NOTE [Module container protocol]
        if replaced(tx, container.obj, "__contains__"):  # NOTE [Other modules' container methods]
            return truth(tx, tx.call_special_of(container, "__contains__", [item], {}))
        if isinstance(container.obj, torch.nn.ModuleDict):
            from .module_protocol import module_contains  # NOTE [Child tables written in the frame]
            return module_contains(tx, container, item.as_constant())
    from .list_objects import keeps_list_slot, list_contents
    if keeps_list_slot(tx, container, "__contains__"):  # NOTE [List subclasses]
        return contains(tx, item, list_contents(tx.output, container))
    if base_slot_owner(tx, container, "__contains__") is not None:  # NOTE [Dict objects from outside through
        return contains(tx, item, dict_contents(tx, container, "__contains__"))  # the protocol]
    if isinstance(container, (ObjectValue, NewObjectValue)) and not isinstance(container, NNModuleValue):
        cls = container.python_type()
        if isinstance(getattr(cls, "__contains__", None), types.FunctionType):  # e.g. Mapping.__contains__
            return truth(tx, tx.call_special_of(container, "__contains__", [item], {}))
        iteration = getattr(cls, "__iter__", None) or getattr(cls, "__getitem__", None)
        if getattr(cls, "__contains__", None) is None and isinstance(iteration, types.FunctionType):
            from .lookup import guard_lookup  # NOTE [Membership by iteration]
            from .sequence_protocol import contains_by_iteration
            guard_lookup(tx.output, cls, "__contains__")
            return truth(tx, tx.inline(UserFunctionValue(contains_by_iteration), [container, item], {}))
    from .carried_loops import CarriedIteratorValue
    from .values.containers import IteratorValue
    if isinstance(container, (IteratorValue, CarriedIteratorValue)):
        return _iterator_contains(tx, item, container)
    raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"`in` on {container.describe()}")


# NOTE [Membership in iterators]: `item in it` of an iterator (a generator, iter(list), map/zip/filter objects,
# a generator expression, one carried across a break) is CPython's _PySequence_IterSearch: an iterator has no
# `__contains__`, its `__iter__` is itself, so `in` draws items until the first with `element is item or
# element == item` and leaves the iterator after it (exhausted when none matched). It was a graph break ("`in`
# on IteratorValue") that ran the frame's rest from there. It is the same loop a user writes, so it is traced
# as `contains_by_iteration` inlined (NOTE [Membership by iteration]): each draw steps the iterator as a for
# loop does (a lazy generator's body runs at its step, in eager's order), and a draw or comparison the trace
# cannot make (a tensor compared by data, a step that must run as Python) breaks at the `in` itself, which then
# runs as Python whole. No for loop of the user's stepped it, so its `looped` mark is kept as it was: such an
# iterator that outlives the graph is rebuilt as one of its own type (NOTE [Iterators of their own type]).
def _iterator_contains(tx, item: Value, container: Value) -> bool:
    from .sequence_protocol import contains_by_iteration
    looped = getattr(container, "looped", None)
    found = truth(tx, tx.inline(UserFunctionValue(contains_by_iteration), [container, item], {}))
    if looped is not None:
        container.looped = looped
    return found


def _container_and_scalar(a: Value, b: Value) -> bool:
    def scalar(v: Value) -> bool:
        return isinstance(v, ConstantValue) and type(v.value) in (int, float, bool, str, bytes, type(None))
    def container(v: Value) -> bool:
        return isinstance(v, (ListValue, TupleValue, DictValue, SetValue)) and type(v.python_type()) is type \
            and v.python_type().__eq__ in (list.__eq__, tuple.__eq__, dict.__eq__, set.__eq__, frozenset.__eq__)
    return (scalar(a) and container(b)) or (scalar(b) and container(a))
