"""Python semantics over abstract values: operators, truth, iteration, subscripts.

One place for "what does Python do here", following CPython's own rules. Two outcomes are never
confused: an operation Python itself rejects raises the same exception CPython would (wrapped in
UserException so the frame runs eagerly and the user sees the real error), while an operation framejit
cannot model raises Unsupported (a graph break).

Attribute lookup lives in attributes.py and calls in calls.py; both build on this module.
"""
from __future__ import annotations

import collections.abc
import inspect
import operator
import sys
import types
from enum import Enum
from typing import Any, Callable

import torch

from .breaks import BreakKind, Unsupported, UserException
from .hash_order import note_fold, note_order
from .tensor_operators import check_tensor_dunder
from .values import (ConstantValue, DictValue, DictViewValue, IteratorValue, ListValue, NewObjectValue,
                     NNModuleValue, ObjectValue, SequenceValue, SetValue, SliceValue, SymFloatValue, SymNodeValue,
                     TensorValue, TupleValue, UserFunctionValue, Value)
from .values.outside import OutsideDictValue, OutsideListValue
from .dict_objects import dunder, is_new_dict_object, storage
from .folded_results import folded_value
from .module_protocol import module_children, module_getitem, module_length

BINARY_OPS: dict[str, Callable] = {
    "ADD": operator.add, "SUBTRACT": operator.sub, "MULTIPLY": operator.mul, "TRUE_DIVIDE": operator.truediv,
    "FLOOR_DIVIDE": operator.floordiv, "REMAINDER": operator.mod, "POWER": operator.pow,
    "MATRIX_MULTIPLY": operator.matmul, "LSHIFT": operator.lshift, "RSHIFT": operator.rshift,
    "AND": operator.and_, "OR": operator.or_, "XOR": operator.xor,
    "INPLACE_ADD": operator.iadd, "INPLACE_SUBTRACT": operator.isub, "INPLACE_MULTIPLY": operator.imul,
    "INPLACE_TRUE_DIVIDE": operator.itruediv, "INPLACE_FLOOR_DIVIDE": operator.ifloordiv,
    "INPLACE_REMAINDER": operator.imod, "INPLACE_POWER": operator.ipow,
    "INPLACE_MATRIX_MULTIPLY": operator.imatmul, "INPLACE_LSHIFT": operator.ilshift,
    "INPLACE_RSHIFT": operator.irshift, "INPLACE_AND": operator.iand, "INPLACE_OR": operator.ior,
    "INPLACE_XOR": operator.ixor,
}
INPLACE_TO_PLAIN = {
    operator.iadd: operator.add, operator.isub: operator.sub, operator.imul: operator.mul,
    operator.itruediv: operator.truediv, operator.ifloordiv: operator.floordiv, operator.imod: operator.mod,
    operator.ipow: operator.pow, operator.imatmul: operator.matmul, operator.ilshift: operator.lshift,
    operator.irshift: operator.rshift, operator.iand: operator.and_, operator.ior: operator.or_,
    operator.ixor: operator.xor,
}
COMPARE_OPS: dict[str, Callable] = {
    "LT": operator.lt, "LE": operator.le, "EQ": operator.eq, "NE": operator.ne, "GT": operator.gt,
    "GE": operator.ge,
}


def constant_fold(fn: Callable, /, *values: Any, **kwargs: Any) -> Value:
    """Apply `fn` to Python constants; an exception is the user's (CPython raises it too)."""
    note_fold(fn, (*values, *kwargs.values()))  # NOTE [Hash-seeded facts]
    if any(type(v).__module__ == "numpy" for v in (*values, *kwargs.values())):
        return _numpy_fold(fn, values, kwargs)
    try:
        result = fn(*values, **kwargs)
    except Exception as e:
        raise UserException(e) from None
    if isinstance(result, type) and isinstance(fn, type) and issubclass(type(fn), type(Enum)):  # Enum("M", names)
        from .made_classes import note_made_class
        note_made_class(result)  # NOTE [Classes made per call]
    return folded_value(result)  # NOTE [Mutable results of folded calls]


# NOTE [NumPy folds and the error state]: NumPy's floating-point errors (divide by zero, overflow, invalid,
# underflow) warn, raise, call a handler or pass according to `np.seterr`, global state no guard names; a fold
# made while tracing answered with the trace's state on every later call (`np.float64(1.0) / np.float64(0.0)`
# returned inf after `np.seterr(all="raise")`, where eager raises FloatingPointError; /tmp/hsound2/q.py
# numpy_const_div_zero_seterr). A fold on NumPy values is made under errstate(all="raise"): one that meets
# such an error is not folded (a break: the operation runs in Python, under the state of that call).
def _numpy_fold(fn: Callable, values: tuple, kwargs: dict) -> Value:
    import numpy
    try:
        with numpy.errstate(all="raise"):
            result = fn(*values, **kwargs)
    except FloatingPointError:
        raise Unsupported(BreakKind.DATA_DEPENDENT, f"{getattr(fn, '__name__', fn)} of NumPy values meets a "
                                                    "floating-point error, handled as np.seterr says") from None
    except Exception as e:
        raise UserException(e) from None
    return folded_value(result)


def binary(tx, fn: Callable, a: Value, b: Value) -> Value:
    """The value of the binary operator `fn(a, b)` (operator.add, operator.iadd, ...) in the trace."""
    from . import numpy_support as nps
    if nps.involves_ndarray(a, b):  # NOTE [NumPy as torch]
        return nps.binary(tx, fn, a, b)
    from .list_objects import list_binary
    result = list_binary(tx, fn, a, b)  # NOTE [List subclasses]
    if result is not None:
        return result
    if isinstance(a, (ObjectValue, NewObjectValue)) or isinstance(b, (ObjectValue, NewObjectValue)):
        from .user_operators import user_binary  # NOTE [Operators of Python classes]
        result = user_binary(tx, fn, a, b)
        if result is not None:
            return result
    if isinstance(a, TensorValue) or isinstance(b, TensorValue):
        from .torch_function_inline import operator_call  # NOTE [Inlined __torch_function__]: sum(), reduce()
        return operator_call(tx, fn, [a, b]) or _tensor_binary(tx, fn, a, b)
    for rule in (_container_binary, _symbolic_binary, _repeat_binary):
        result = rule(tx, fn, a, b)
        if result is not None:
            return result
    if a.is_constant() and b.is_constant():
        return constant_fold(fn, a.as_constant(), b.as_constant())
    raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{fn.__name__} on {a.describe()} and {b.describe()}")


def _tensor_binary(tx, fn: Callable, a: Value, b: Value) -> Value:
    from .tensor_operators import check_tensor_operator  # NOTE [Patched tensor operators]
    check_tensor_operator(tx, fn, a, b, INPLACE_TO_PLAIN)
    if isinstance(a, TensorValue) and fn in INPLACE_TO_PLAIN and a.source is None:
        return tx.output.call("call_function", fn, (a, b), {})
    if fn in INPLACE_TO_PLAIN and not isinstance(a, TensorValue):
        fn = INPLACE_TO_PLAIN[fn]
    return tx.output.call("call_function", fn, (a, b), {})


def _container_binary(tx, fn: Callable, a: Value, b: Value) -> Value | None:
    """Operators of lists, deques, dicts, sets and tuples (None: not one of them)."""
    if (getattr(a, "maxlen", None) is not None or getattr(b, "maxlen", None) is not None) and \
            fn in (operator.add, operator.iadd, operator.mul, operator.imul):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{fn.__name__} on a deque with a maxlen")  # NOTE [Deques
        # with a maxlen]
    if isinstance(a, ListValue) and fn is operator.iadd:
        def add(added: list[Value]) -> None:
            tx.output.side_effects.mutate_container(a)
            extend_list(a, added)
            tx.output.side_effects.record_op(a, "extend", (TupleValue(added),))  # NOTE [Mutation log]
        grow_while_drawing(tx, b, add)  # NOTE [Containers grown while drawing]
        return a
    if isinstance(a, ListValue) and a.cls in (list, collections.deque) and fn is operator.imul and b.is_constant() \
            and isinstance(b.as_constant(), int):
        tx.output.side_effects.mutate_container(a)  # `lst *= n` repeats the list in place
        a.items[:] = a.items * b.as_constant()
        tx.output.side_effects.record_op(a, "__imul__", (ConstantValue(b.as_constant()),))
        return a
    if fn in (operator.or_, operator.ior) and (isinstance(a, DictValue) or isinstance(b, DictValue)):
        from .mappings import dict_union, union_kind  # NOTE [Dict union]
        if fn is operator.ior and union_kind(a) is not None:
            from .container_methods import call_container_method  # `d |= other` is `d.update(other)` in place
            call_container_method(tx, dict.update, [a, b], {})
            return a
        result = dict_union(tx, a, b) if fn is operator.or_ else None
        if result is not None:
            return result
    if isinstance(a, SetValue) and isinstance(b, SetValue) and fn in _SET_OPS:
        # NOTE [Set order]: the same CPython operation on sets laid out as the program's gives its layout
        from .identity_keys import known_layout, set_operand
        if fn in INPLACE_TO_PLAIN and issubclass(a.cls, set):  # |=, &=, -=, ^= mutate the left set
            right = set_operand(tx, b, strict=False)
            from .set_replay import replay_operand, unknown_operand_layout  # NOTE [Set operands in the replay]
            unknown_operand_layout(a, [b])
            replayed = replay_operand(a, right, not a.items)
            tx.output.side_effects.mutate_container(a)
            a.items = fn(a.items, set(right) if right is a.items else right)
            a.deleted = getattr(a, "deleted", False) or fn is not operator.ior  # NOTE [Set tables rebuilt exactly]
            a.exact = a.exact and known_layout(b)
            tx.output.side_effects.record_op(a, _SET_UPDATES[fn], (replayed,))
            return a
        result = INPLACE_TO_PLAIN.get(fn, fn)(set_operand(tx, a, strict=False), set_operand(tx, b, strict=False))
        if not (known_layout(a) and known_layout(b)):
            from .set_tables import unknown_layout
            return unknown_layout(result)
        if type(result) is frozenset:
            from .container_methods import frozen_set_value
            return frozen_set_value(result)
        return SetValue(result, cls=set, exact=True)  # NOTE [Plain set subclasses]: the base type
    if isinstance(a, SequenceValue) and isinstance(b, SequenceValue) and fn in (operator.add, operator.iadd):
        if a.cls is not b.cls and not (issubclass(a.cls, tuple) and issubclass(b.cls, tuple)):
            raise UserException(TypeError(f'can only concatenate {a.cls.__name__} (not "{b.cls.__name__}") '
                                          f'to {a.cls.__name__}'))
        cls = a.cls if a.cls in (list, tuple, collections.deque) else tuple  # deque + deque is a deque
        made = _size_concat(a, b)  # NOTE [Size arithmetic stays symbolic]
        if made is not None:
            return made
        return (TupleValue if cls is tuple else ListValue)(a.items + b.items, cls=cls)
    return None


def _size_concat(a: SequenceValue, b: SequenceValue) -> Value | None:
    """`size + tuple`, and `tuple + size` (CPython tries Size.__radd__ first: a Size, revBL PRE-2), or None."""
    from .sym_arith import size_concat
    if a.cls is torch.Size and b.cls in (tuple, torch.Size):
        return size_concat(a, b) or ConstantValue(torch.Size(a.as_constant() + b.as_constant()))
    return size_concat(a, b) if a.cls is tuple and b.cls is torch.Size else None


def _symbolic_binary(tx, fn: Callable, a: Value, b: Value) -> Value | None:
    """Arithmetic on symbolic ints and floats kept in the graph (None: not kept)."""
    if (isinstance(a, SymNodeValue) or isinstance(b, SymNodeValue)) and _is_int(a) and _is_int(b) \
            and fn in _INT_OPS:  # NOTE [Symbolic shapes] in shapes.py
        return tx.output.sym_op(INPLACE_TO_PLAIN.get(fn, fn), (a, b))
    if isinstance(a, SymNodeValue) or isinstance(b, SymNodeValue):
        from . import sym_arith  # NOTE [Size arithmetic stays symbolic]
        kept = sym_arith.binary(tx, fn, a, b)
        if kept is not None:
            return kept
    if (isinstance(a, SymFloatValue) or isinstance(b, SymFloatValue)) and fn in _FLOAT_OPS:
        from .sym_arith import float_of_int  # NOTE [Symbolic ints beside dynamic floats]
        a, b = float_of_int(tx, a), float_of_int(tx, b)
    if (isinstance(a, SymFloatValue) or isinstance(b, SymFloatValue)) and fn in _FLOAT_OPS:
        from .float_parts import float_operand  # NOTE [Symbolic ints inside dynamic floats]
        if float_operand(tx.output, a) and float_operand(tx.output, b):
            return tx.output.float_op(INPLACE_TO_PLAIN.get(fn, fn), (a, b))
    return None


def _repeat_binary(tx, fn: Callable, a: Value, b: Value) -> Value | None:
    """`seq * n` and `n * seq` (None: neither)."""
    if isinstance(a, SequenceValue) and fn in (operator.mul, operator.imul) and b.is_constant():
        n = b.as_constant()
        cls = a.cls if a.cls in (list, tuple, collections.deque) else tuple  # deque * n is a deque
        return (TupleValue if cls is tuple else ListValue)(a.items * n, cls=cls)
    if isinstance(b, SequenceValue) and fn is operator.mul and a.is_constant() and type(a.as_constant()) is int \
            and not isinstance(b, DictViewValue):  # `n * [x]`
        cls = b.cls if b.cls in (list, tuple, collections.deque) else tuple
        return (TupleValue if cls is tuple else ListValue)(b.items * a.as_constant(), cls=cls)
    return None


# arithmetic that keeps a dynamic float in the graph (NOTE [Dynamic floats])
_FLOAT_OPS = {operator.add, operator.sub, operator.mul, operator.truediv, operator.pow, operator.iadd, operator.isub,
              operator.imul, operator.itruediv, operator.ipow, operator.floordiv, operator.mod, operator.ifloordiv,
              operator.imod}  # // and %: NOTE [Builtins of dynamic floats]


def extend_list(lst: ListValue, added: list[Value]) -> None:
    """`lst.extend(added)` on the abstract list (without reading a list from outside: NOTE [Lists from
    outside])."""
    if isinstance(lst, OutsideListValue):
        lst.add(added)
    else:
        lst.items.extend(added)


def draws_lazily(v: Value) -> bool:
    """`v` makes its items as they are drawn: a generator or a lazy map/filter/zip (NOTE [Containers grown while
    drawing])."""
    from .lazy_generators import LazyGeneratorValue
    return isinstance(v, LazyGeneratorValue) or (isinstance(v, IteratorValue) and v.check is not None)


# NOTE [Containers grown while drawing]: CPython's list.extend, `lst += it`, deque.extend/extendleft add each item
# of an iterator as soon as it is drawn, before drawing the next, so a generator (or a map/filter function) that
# reads the container being grown sees the items added so far: `y = [1]; y.extend(y[-1] + z for z in range(3))`
# gives [1, 1, 2, 4]. A generator run ahead of its consumer (NOTE [Eager generators]) had read `y` when it was
# made, and the trace silently gave [1, 1, 2, 3]. Such an iterator is therefore drawn one item at a time and each
# item is added (the mutation announced) before the next draw: the iterator's per-step check then finds the
# container it can reach touched (or outside state changed) and breaks where the iterator was made (it runs
# lazily, as Python); a lazy generator (NOTE [Generators driven by send]) is resumed after the add and reads the
# grown container, as in eager. set.update and dict.update (and `|=`) announce their mutation before drawing
# such an iterator at all (conservative: a break also when it yields nothing); a lazy generator given to them is
# a break where it was made.
def grow_while_drawing(tx, iterable: Value, add: Callable[[list[Value]], None]) -> None:
    """Draw `iterable` into a container; `add(items)` adds items to it, announcing the mutation."""
    if not draws_lazily(iterable):
        add(iterate(tx, iterable))
        return
    while (item := _draw_retrying_lazily(iterable)) is not None:
        add([item])


def _draw_retrying_lazily(iterable: Value) -> Value | None:
    """The next item of a generator run ahead, whose check after an add finds what it reads changed: the frame is
    traced again with the generator lazy (`retry_lazy`), resumed after each add as in eager (before: the break
    where it was made, the container grown by Python; PyTorch's test_generator.py test_list_extend)."""
    try:
        return iterable.next()
    except Unsupported as e:
        code = getattr(iterable, "gen_code", None)
        if code is not None and getattr(e, "retry_lazy", None) is None and \
                getattr(e, "root_index", None) == iterable.made_at is not None:
            e.retry_lazy = code
        raise


def announce_before_drawing(tx, container: Value, operands: list[Value]) -> None:
    """NOTE [Containers grown while drawing]: set.update/dict.update of a lazily drawn operand."""
    from .lazy_generators import LazyGeneratorValue
    for operand in operands:
        if isinstance(operand, LazyGeneratorValue):
            raise operand.made_here(Unsupported(BreakKind.SIDE_EFFECT, f"the {operand.describe()} is drawn by an "
                                                "update of a set or dict it may read: it runs as Python"))
    if not any(draws_lazily(operand) for operand in operands):
        return
    if container.source is None:
        tx.output.side_effects.bump(container)
    else:
        tx.output.side_effects.version += 1


# arithmetic that keeps a symbolic size in the graph (NOTE [Symbolic shapes] in shapes.py); others specialise
_INT_OPS = {operator.add, operator.sub, operator.mul, operator.floordiv, operator.mod, operator.iadd, operator.isub,
            operator.imul, operator.ifloordiv, operator.imod}
_SYM_COMPARE_OPS = {operator.lt, operator.le, operator.eq, operator.ne, operator.gt, operator.ge}


def _is_int(v: Value) -> bool:
    return (isinstance(v, SymNodeValue) and v.python_type() is int) or (
        isinstance(v, ConstantValue) and type(v.value) is int)


_SET_OPS = {operator.or_, operator.and_, operator.sub, operator.xor, operator.ior, operator.iand, operator.isub,
            operator.ixor}


# the method each in-place set operator is replayed as (NOTE [Mutation log] in side_effects.py)
_SET_UPDATES = {operator.ior: "update", operator.iand: "intersection_update", operator.isub: "difference_update",
                operator.ixor: "symmetric_difference_update"}


def _set_items(s: "SetValue") -> TupleValue:
    """The elements of `s` as a tuple value (the argument of a replayed set method)."""
    from .values.mappings import key_value
    return TupleValue([key_value(k) for k in s.items])


def unary(tx, fn: Callable, a: Value) -> Value:
    from . import numpy_support as nps
    if isinstance(a, nps.NdarrayValue) and fn is not operator.not_:  # NOTE [NumPy as torch]
        return nps.unary(tx, fn, a)
    if isinstance(a, TensorValue):
        from .tensor_operators import check_tensor_unary  # NOTE [Patched tensor operators]
        check_tensor_unary(tx, fn, a)
        return tx.output.call("call_function", fn, (a,), {})
    if isinstance(a, SymFloatValue) and fn in (operator.neg, operator.pos, operator.abs):
        return tx.output.float_op(fn, (a,))
    if isinstance(a, SymNodeValue):
        from . import sym_arith  # NOTE [Size arithmetic stays symbolic]
        kept = sym_arith.unary(tx, fn, a)
        if kept is not None:
            return kept
    if a.is_constant():
        return constant_fold(fn, a.as_constant())
    if isinstance(a, (ObjectValue, NewObjectValue)):
        from .user_operators import user_unary  # NOTE [Operators of Python classes]
        result = user_unary(tx, fn, a)
        if result is not None:
            return result
    raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{fn.__name__} of {a.describe()}")


def truth(tx, v: Value) -> bool:
    if is_new_dict_object(v) and not hasattr(v.cls, "__bool__"):
        return length(tx, v) > 0
    if isinstance(v, TensorValue):
        if v.known_data() is not None:  # a tensor made from constants: its data is known
            check_tensor_dunder(tx, v, "__bool__")  # NOTE [Patched tensor operators]
            return bool(constant_fold(bool, v.known_data()).as_constant())
        from .tensor_ints import int_of  # NOTE [Ints of tensors computed from sizes]
        derived = int_of(tx.output, v) if v.fake.dim() == 0 else None
        if derived is not None:
            check_tensor_dunder(tx, v, "__bool__")
            return truth(tx, derived)
        from .constant_tensors import folded_truth  # NOTE [Tensors made from constants]
        folded = folded_truth(tx.output, v)
        if folded is not None:
            check_tensor_dunder(tx, v, "__bool__")
            return folded
        raise Unsupported(BreakKind.DATA_DEPENDENT, "the truth value of a tensor depends on its data")
    from .numpy_support import NdarrayValue
    if isinstance(v, NdarrayValue):
        raise Unsupported(BreakKind.DATA_DEPENDENT, "the truth value of an ndarray depends on its data")
    if isinstance(v, ConstantValue):
        if isinstance(v.value, Enum) and (kept := _enum_truth(tx, v)) is not None:
            return kept  # NOTE [Dunders of enum members]
        try:
            return bool(v.value)
        except Exception as e:
            raise UserException(e) from None
    if isinstance(v, OutsideListValue):
        return v.truth()  # NOTE [Lists from outside]
    if isinstance(v, (SequenceValue, SetValue, DictValue)):
        return len(v.items) > 0
    if isinstance(v, NNModuleValue):
        from .module_protocol import module_truth  # NOTE [Module container protocol]
        return module_truth(tx, v)
    if isinstance(v, (ObjectValue, NewObjectValue)):
        cls = v.python_type()
        from . import lookup  # NOTE [Lookup facts]: `__bool__`, else `__len__`, else True, as found now
        lookup.guard_lookup(tx.output, cls, "__bool__")
        if getattr(cls, "__bool__", None) is None:
            lookup.guard_lookup(tx.output, cls, "__len__")
        if getattr(cls, "__bool__", None) is None and getattr(cls, "__len__", None) is None:
            return True
        if getattr(cls, "__bool__", None) is not None:
            return _checked_bool(tx, tx.call_special_of(v, "__bool__", [], {}))
        return _checked_len(tx.call_special_of(v, "__len__", [], {})) > 0
    if isinstance(v, SymNodeValue) and type(v.sym) in (torch.SymInt, torch.SymFloat):
        return bool(v.sym != 0)  # `if n:` guards the relation n != 0 (often known: a size >= 2), not n's value
    if isinstance(v, SymFloatValue):
        from .float_calls import float_truth  # NOTE [Builtins of dynamic floats]: the relation a != 0
        kept = float_truth(tx.output, v)
        if kept is not None:
            return kept
    if v.is_constant():
        return bool(v.as_constant())
    from .python_draws import DrawValue
    if isinstance(v, DrawValue):  # NOTE [Draws have no truth while tracing]
        raise Unsupported(BreakKind.DATA_DEPENDENT, f"the truth value of {v.describe()} is known only after the graph")
    return True  # functions, modules, classes and other objects without __bool__/__len__


# NOTE [Draws have no truth while tracing]: a recorded draw (NOTE [Draws from the random module]) is made
# after the graph, so its value is unknown to the trace; `if random.getrandbits(1):`, `while rng.randint(0, 2)`,
# `any(draws)` or `d or 5` fell to the default answer for objects (True) and took one side on every call
# (review revM F1). Its truth, and its identity (`v is 0`, comparisons.is_same), are a break.


# NOTE [Results of __bool__ and __len__]: CPython checks what a user's `__bool__` and `__len__` return:
# `__bool__` must return a bool (TypeError otherwise, even for 1), `__len__` an integer (through __index__)
# that is >= 0 (ValueError) and fits a Py_ssize_t (OverflowError). The traced call's result is checked the
# same way; a result whose value is not known while tracing (a tensor) keeps the old behaviour (a break).
def _enum_truth(tx, v: ConstantValue) -> bool | None:
    """The truth of a user Enum's member by its own Python `__bool__`, else `__len__`; None: neither."""
    from . import lookup
    from .enum_attributes import enum_dunder
    if (impl := enum_dunder(tx, v, "__bool__")) is not None:
        return _checked_bool(tx, tx.inline(UserFunctionValue(impl), [v], {}))
    if lookup.mro_lookup(type(v.value), "__bool__")[0] is None and (impl := enum_dunder(tx, v, "__len__")):
        return _checked_len(tx.inline(UserFunctionValue(impl), [v], {})) > 0
    return None


def _checked_bool(tx, result: Value) -> bool:
    if result.is_constant():
        value = result.as_constant()
        if type(value) is not bool:
            raise UserException(TypeError(f"__bool__ should return bool, returned {type(value).__name__}"))
        return value
    if result.python_type() is not bool:
        raise UserException(TypeError(f"__bool__ should return bool, returned {result.python_type().__name__}"))
    return truth(tx, result)


def _checked_len(result: Value) -> int:
    value = result.as_constant()
    if not isinstance(value, int):
        try:
            value = operator.index(value)
        except TypeError:
            raise UserException(TypeError(f"'{type(value).__name__}' object cannot be interpreted as an integer")) \
                from None
    if value < 0:
        raise UserException(ValueError("__len__() should return >= 0"))
    if value > sys.maxsize:
        raise UserException(OverflowError("cannot fit 'int' into an index-sized integer"))
    return int(value)


def iterate(tx, v: Value) -> list[Value]:
    """The items that iterating over `v` yields, all at once (iterables here are finite and known)."""
    if is_new_dict_object(v):
        result = dunder(tx, v, "__iter__", [])
        return iterate(tx, result if result is not None else storage(v))
    if isinstance(v, IteratorValue):
        return v.remaining()
    if isinstance(v, SequenceValue):
        return list(v.items)
    if isinstance(v, DictValue):
        from .values.mappings import key_value
        return [key_value(k) for k in v.items]
    if isinstance(v, SetValue):
        from .identity_keys import set_items
        items = set_items(v)  # CPython's order for this set of constants (NOTE [Sets of tensors])
        note_order(tx.output, v.items)  # NOTE [Hash-seeded facts]
        return items
    if getattr(v, "lazy_range", False):
        return v.items()  # NOTE [Ranges of one step] in sym_arith.py
    if isinstance(v, ConstantValue) and isinstance(v.value, (range, tuple, str, list, frozenset, bytes, torch.Size)):
        if isinstance(v.value, frozenset):
            note_order(tx.output, v.value)  # NOTE [Hash-seeded facts]
        return [ConstantValue(x) for x in v.value]
    from . import numpy_support as nps
    if isinstance(v, nps.NdarrayValue):  # NOTE [NumPy as torch]
        return nps.iterate(tx, v)
    if isinstance(v, TensorValue):
        from .torch_function_inline import iterate_gated  # NOTE [Inlined __torch_function__]
        routed = iterate_gated(tx, v)
        if routed is not None:
            return iterate(tx, routed)
        check_tensor_dunder(tx, v, "__iter__")  # NOTE [Patched tensor operators]
        if v.fake.dim() == 0:
            raise UserException(TypeError("iteration over a 0-d tensor"))
        return [_tensor_getitem(tx, v, ConstantValue(i)) for i in range(v.fake.shape[0])]
    if isinstance(v, NNModuleValue):
        from .module_protocol import replaced  # NOTE [Module container protocol]
        if replaced(tx, v.obj, "__iter__"):
            return iterate(tx, tx.call_special_of(v, "__iter__", [], {}))
        return module_children(tx, v)
    if isinstance(v, (ObjectValue, NewObjectValue)) and not isinstance(v, NNModuleValue):
        return _iterate_object(tx, v)
    from .carried_loops import CarriedIteratorValue
    if isinstance(v, CarriedIteratorValue):  # NOTE [Iterators stepped as Python]: drawn in Python only
        raise Unsupported(BreakKind.UNSUPPORTED_VALUE, f"{v.describe()} is drawn from outside a for loop: it "
                          "runs as Python")
    raise UserException(TypeError(f"'{v.python_type().__name__}' object is not iterable"))


def _iterate_object(tx, v: Value) -> list[Value]:
    """NOTE [Iterating user sequences]: a class whose `__iter__` is `collections.abc.Sequence.__iter__`
    yields `self[0], self[1], ...` until `self[i]` raises IndexError; it is traced as `len(self)` reads
    and then checked: `self[len(self)]` must raise IndexError while tracing, otherwise the iteration is
    not modelled (a graph break). A generator `__iter__` is inlined (NOTE [Eager generators]), and so is the
    old sequence protocol (NOTE [Iteration by __getitem__])."""
    cls = v.python_type()
    impl = getattr(cls, "__iter__", None)
    if impl is collections.abc.Sequence.__iter__:
        n = length(tx, v)
        items = [getitem(tx, v, ConstantValue(i)) for i in range(n)]
        try:
            getitem(tx, v, ConstantValue(n))
        except UserException as e:
            if isinstance(e.exc, IndexError):
                return items
            raise
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"a {cls.__name__} with items beyond its len()")
    iterator = object_iterator(tx, v)
    if iterator is not None:
        return iterate(tx, iterator)
    if impl is None:
        raise UserException(TypeError(f"'{cls.__name__}' object is not iterable"))
    raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"iteration over a {cls.__name__}")


# NOTE [Iterators of objects]: `for v in obj` and `iter(obj)` of a user object whose iteration is a
# generator (a generator `__iter__`, or the old sequence protocol) or whose `__iter__` returns an iterator
# over a container must hand the loop that very iterator: its per-step check stops a generator run ahead
# while the loop body mutates what it reads (NOTE [Eager generators]), and a list iterator reads its list
# live (NOTE [Live iteration]). A list of its items taken up front returned [1, 2] where eager's loop, which
# appended to the object's list while iterating, saw [1, 2, 3, 4]. Consumers that drain it at once (list(),
# tuple(), unpacking) go through iterate as before.
def object_iterator(tx, v: Value) -> IteratorValue | None:
    """The iterator `iter(v)` gives for a user object iterated by a generator or by an `__iter__` returning
    an iterator made while tracing; None for any other value (iterate's list of items stands for it)."""
    if not isinstance(v, (ObjectValue, NewObjectValue)) or isinstance(v, NNModuleValue) or is_new_dict_object(v):
        return None
    from .list_objects import iterator_over_object
    over_contents = iterator_over_object(tx, v)  # NOTE [List subclasses]
    if over_contents is not None:
        return over_contents
    cls = v.python_type()
    impl = getattr(cls, "__iter__", None)
    if impl is None and hasattr(cls, "__getitem__") and not any("__iter__" in k.__dict__ for k in cls.__mro__):
        from .lookup import guard_lookup  # CPython iterates self[0], self[1], ... until IndexError or StopIteration
        from .sequence_protocol import sequence_iterator  # NOTE [Iteration by __getitem__]
        guard_lookup(tx.output, cls, "__iter__")
        guard_lookup(tx.output, cls, "__getitem__")
        return tx.inline(UserFunctionValue(sequence_iterator), [v], {})
    if impl is collections.abc.Sequence.__iter__ or not isinstance(impl, types.FunctionType):
        return None
    if impl.__code__.co_flags & inspect.CO_GENERATOR:
        return tx.call_special_of(v, "__iter__", [], {})
    result = tx.call_special_of(v, "__iter__", [], {})  # `return iter(self._items)`: made while tracing
    if isinstance(result, IteratorValue):
        return result
    raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"iteration over a {cls.__name__}")


def length(tx, v: Value) -> int:
    if is_new_dict_object(v):
        result = dunder(tx, v, "__len__", [])
        return result.as_constant() if result is not None else len(storage(v).items)
    if isinstance(v, OutsideListValue):
        return v.length()  # NOTE [Lists from outside]
    if isinstance(v, (SequenceValue,)):
        return len(v.items)
    if isinstance(v, (DictValue, SetValue)):
        return len(v.items)
    if isinstance(v, ConstantValue):
        if isinstance(v.value, Enum):  # NOTE [Dunders of enum members]
            from .enum_attributes import enum_dunder
            if (impl := enum_dunder(tx, v, "__len__")) is not None:
                return _checked_len(tx.inline(UserFunctionValue(impl), [v], {}))
        try:
            return len(v.value)
        except Exception as e:
            raise UserException(e) from None
    from . import numpy_support as nps
    if isinstance(v, nps.NdarrayValue):  # NOTE [NumPy as torch]
        return nps.length(v)
    if isinstance(v, TensorValue):
        check_tensor_dunder(tx, v, "__len__")  # NOTE [Patched tensor operators]
        if v.fake.dim() == 0:
            raise UserException(TypeError("len() of a 0-d tensor"))
        return int(v.fake.shape[0])  # a symbolic size is specialised (guarded: NOTE [Symbolic shapes])
    from .module_protocol import replaced  # NOTE [Module container protocol]
    if isinstance(v, NNModuleValue) and replaced(tx, v.obj, "__len__"):
        return tx.call_special_of(v, "__len__", [], {}).as_constant()
    if isinstance(v, NNModuleValue) and isinstance(v.obj, (torch.nn.Sequential, torch.nn.ModuleList,
                                                           torch.nn.ModuleDict, torch.nn.ParameterList)):
        return module_length(tx, v)  # NOTE [Child tables written in the frame]
    if isinstance(v, (ObjectValue, NewObjectValue)) and hasattr(v.python_type(), "__len__"):
        return _checked_len(tx.call_special_of(v, "__len__", [], {}))
    if isinstance(v, IteratorValue):
        raise UserException(TypeError(f"object of type '{v.python_type().__name__}' has no len()"))
    raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"len() of {v.describe()}")


def getitem(tx, obj: Value, key: Value) -> Value:
    from .sym_arith import SymRangeValue, is_sym, range_getitem  # NOTE [Size arithmetic stays symbolic]
    if type(obj) is ConstantValue and type(obj.value) is range and is_sym(key):  # (a SymRangeValue: below)
        r = obj.value  # `range(0, 100, 3)[n]` (position ids): start + n * step, its bound check a relation
        obj = SymRangeValue(ConstantValue(r.start), ConstantValue(r.stop), r.step)
    if isinstance(obj, SymRangeValue):
        kept = range_getitem(tx, obj, key)
        if kept is not None:
            return kept
    if is_new_dict_object(obj):  # NOTE [Dict-subclass objects made while tracing]
        result = dunder(tx, obj, "__getitem__", [key])
        if result is not None:
            return result
        from .dict_objects import missing_of_new_object
        result = missing_of_new_object(tx, obj, key)  # NOTE [__missing__ of dict objects]
        if result is not None:
            return result
        obj = storage(obj)
    if isinstance(obj, TensorValue):
        check_tensor_dunder(tx, obj, "__getitem__")  # NOTE [Patched tensor operators]
        return _tensor_getitem(tx, obj, key)
    from . import numpy_support as nps
    if isinstance(obj, nps.NdarrayValue):  # NOTE [NumPy as torch]
        return nps.getitem(tx, obj, key)
    if isinstance(obj, DictViewValue):
        raise UserException(TypeError(f"'{obj.cls.__name__}' object is not subscriptable"))
    if isinstance(obj, SequenceValue):
        from .carried_loops import check_dynamic_index
        check_dynamic_index(obj, key)  # NOTE [Lists of tensors indexed by dynamic ints]
        if isinstance(key, TensorValue) and key.known_data() is not None:
            check_tensor_dunder(tx, key, "__index__")  # NOTE [Patched tensor operators]
        k = key.known_data() if isinstance(key, TensorValue) and key.known_data() is not None else key.as_constant()
        if isinstance(k, slice):
            items = obj.items[k]
            if obj.cls is torch.Size and any(isinstance(i, SymNodeValue) for i in items):
                return TupleValue(items, cls=torch.Size)  # NOTE [Size arithmetic stays symbolic] in sym_arith.py
            if obj.cls is torch.Size:
                return ConstantValue(torch.Size([i.as_constant() for i in items]))
            cls = list if obj.cls is list else tuple
            return (ListValue if cls is list else TupleValue)(items, cls=cls)
        try:
            if isinstance(obj, OutsideListValue):
                return obj.item(operator.index(k))  # NOTE [Lists from outside]
            return obj.items[operator.index(k)]
        except Exception as e:
            raise UserException(_index_error(obj, k, e)) from None
    return _mapping_or_object_getitem(tx, obj, key)


def _index_error(obj: SequenceValue, k: Any, error: Exception) -> Exception:
    """The exception CPython's own indexing raises: a tuple's items are kept in a list, whose messages say
    "list index out of range" and "'str' object cannot be interpreted as an integer"."""
    kind = tuple if type(obj.cls) is type and issubclass(obj.cls, tuple) else list
    try:
        kind(obj.items)[k]
    except Exception as e:
        return e
    return error


def _mapping_or_object_getitem(tx, obj: Value, key: Value) -> Value:
    """getitem for dicts, constants, modules, typing forms and objects with their own __getitem__."""
    if isinstance(obj, OutsideDictValue) and not obj.materialized:
        from .identity_keys import dict_key
        k = dict_key(tx, key)
        found = obj.lookup(k)  # NOTE [Dicts from outside]
        if found is None:
            raise UserException(KeyError(k))
        return found
    if isinstance(obj, DictValue):
        from .identity_keys import dict_key
        k = dict_key(tx, key, obj)
        if k not in obj.items:
            from .mappings import missing_item
            return missing_item(tx, obj, k)
        return obj.items[k]
    if isinstance(obj, ConstantValue):
        return constant_fold(operator.getitem, obj.value, key.as_constant())
    if isinstance(obj, NNModuleValue):
        from .module_protocol import replaced  # NOTE [Module container protocol]
        if replaced(tx, obj.obj, "__getitem__"):
            return tx.call_special_of(obj, "__getitem__", [key], {})
        return module_getitem(tx, obj, key.as_constant())
    from .typing_forms import typing_subscript
    folded = typing_subscript(tx, obj, key)  # NOTE [Typing subscripts are folded]
    if folded is not None:
        return folded
    if _builtin_generic_alias(obj, key):  # `list[Tensor]`, `dict[str, int]` in annotations and casts
        return constant_fold(operator.getitem, obj.as_constant(), key.as_constant())
    if isinstance(obj, (ObjectValue, NewObjectValue)) and hasattr(obj.python_type(), "__getitem__"):
        return tx.call_special_of(obj, "__getitem__", [key], {})
    raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"subscript of {obj.describe()}")


def _tensor_getitem(tx, obj: TensorValue, key: Value) -> Value:
    """`obj[key]` as torch's own __getitem__ computes it (also the rows Tensor.__iter__ yields)."""
    from .sym_arith import select  # NOTE [Symbolic int indices]
    from . import getitem_mode
    from .numpy_scalars import index_numbers  # NOTE [Dynamic NumPy scalars]
    key = index_numbers(key)
    if getitem_mode.active(tx.output):  # NOTE [Getitem-to-index blocks]
        indexed = getitem_mode.subscript(tx, obj, key)
        if indexed is not None:
            return indexed
    selected = select(tx, obj, key)
    if selected is not None:
        return selected
    return tx.output.call("call_function", operator.getitem, (obj, key), {})


def _builtin_generic_alias(obj: Value, key: Value) -> bool:
    """A builtin class (immutable, so unguarded) subscripted with constants makes a types.GenericAlias."""
    from .values import ClassValue
    from .lookup import is_immutable_class  # NOTE [Classes made by exec]: "builtins" alone is no proof
    return isinstance(obj, ClassValue) and isinstance(obj.obj, type) and obj.obj.__module__ == "builtins" and \
        is_immutable_class(obj.obj) and "__class_getitem__" in vars(obj.obj) and key.is_constant()


def build_slice(parts: list[Value]) -> Value:
    if all(p.is_constant() and not isinstance(p, SymNodeValue) for p in parts):
        return ConstantValue(slice(*(p.as_constant() for p in parts)))
    return SliceValue(*parts) if len(parts) == 3 else SliceValue(*parts, ConstantValue(None))


def hashable(x: Any) -> bool:
    """Whether hash(x) succeeds (a callable used as a key of the handler tables may be unhashable)."""
    try:
        hash(x)
        return True
    except TypeError:
        return False
