"""Python builtins over abstract values (container methods: container_methods.py).

Each handler `(tx, args, kwargs) -> Value` mirrors the builtin's CPython behaviour on abstract values;
when every argument is a Python constant most simply evaluate the real builtin (constant folding).
"""
from __future__ import annotations

import bisect
import collections
import functools
import itertools
import operator
from typing import Any, Callable

import torch

from .breaks import BreakKind, Unsupported, UserException
from .object_str import is_user_object, user_repr, user_str
from .comparisons import compare, contains, is_same
from .protocol import BINARY_OPS, COMPARE_OPS, binary, constant_fold, getitem, iterate, length, truth, unary
from .sym_arith import SYM_MATH, is_sym, symbolic
from . import lazy_combinators
from .lazy_combinators import calls_made_early as _calls_made_early  # itertools_support's too
from .float_calls import float_call, sum_values
from .folded_results import index_of, modular_pow
from .generator_ends import stop_iteration
from .lazy_generators import LazyGeneratorValue, drain_whole
from .values.iterator_claims import ends_with, mark_ended_in_order  # NOTE [Combinators drawn to their end]
from .values.containers import dict_iterator, drain_lent, drain_zipped, drawn_ahead_checked, iterates_as_tuple, \
    lent_error
from .values import (ClassValue, ConstantValue, DictValue, IteratorValue, ListValue,
                     TensorValue, TupleValue, Value)

Handler = Callable[..., Value]
BUILTIN_HANDLERS: dict[Any, Handler] = {}


def handles(*fns: Any):
    def register(handler: Handler) -> Handler:
        for fn in fns:
            BUILTIN_HANDLERS[fn] = handler
        return handler
    return register


def _consts(args: list[Value]) -> list[Any]:
    return [a.as_constant() for a in args]


def _all_const(args: list[Value], kwargs: dict[str, Value] | None = None) -> bool:
    return all(a.is_constant() for a in args) and all(v.is_constant() for v in (kwargs or {}).values())


def _fold(fn: Callable):
    def handler(tx, args, kwargs):
        if not _all_const(args, kwargs):
            raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{fn.__name__}() of non-constant arguments")
        return constant_fold(fn, *_consts(args), **{k: v.as_constant() for k, v in kwargs.items()})
    return handler


for _fn in (round, divmod, chr, ord, hash, repr, format, slice, range, complex, bin, hex, oct):
    BUILTIN_HANDLERS[_fn] = _fold(_fn)


@handles(range)
def _range(tx, args, kwargs):
    from .sym_arith import make_range  # NOTE [Size arithmetic stays symbolic]
    from .numpy_scalars import integer_number  # NOTE [Dynamic NumPy scalars]: range() takes its __index__
    args = [integer_number(a) or a for a in args]
    return make_range(args, kwargs) or _fold(range)(tx, args, kwargs)


@handles(repr)
def _repr(tx, args, kwargs):
    if len(args) == 1 and not kwargs and is_user_object(args[0], tx, "__repr__"):
        return user_repr(tx, args[0])  # NOTE [Strings of user objects]
    return _fold(repr)(tx, args, kwargs)


def _sym_math(fn: Callable):
    """round(), divmod() and math.ceil/floor/trunc/sqrt/cos/...: kept symbolic on a symbolic number, else folded."""
    def handler(tx, args, kwargs):
        from .sym_arith import math_call  # NOTE [Size arithmetic stays symbolic]
        kept = math_call(tx, fn, args, kwargs) or float_call(tx.output, fn, args, kwargs)  # [Builtins of dynamic floats]
        if kept is not None:
            return kept
        return _fold(fn)(tx, args, kwargs)
    return handler


for _fn in SYM_MATH:  # round, divmod, math.ceil/floor/trunc/sqrt/cos/.../prod (NOTE [Math functions of sizes])
    BUILTIN_HANDLERS[_fn] = _sym_math(_fn)


@handles(torch.Size.numel)
def _size_numel(tx, args, kwargs):
    from .sym_arith import size_numel  # NOTE [Size arithmetic stays symbolic]
    return size_numel(tx, args, kwargs)


@handles(abs)
def _abs(tx, args, kwargs):
    return unary(tx, operator.abs, args[0])


@handles(pow)
def _pow(tx, args, kwargs):
    if len(args) == 2 and not kwargs:
        return binary(tx, operator.pow, args[0], args[1])
    kept = modular_pow(tx, *args) if len(args) == 3 and not kwargs else None  # NOTE [Math functions of symbolic ints]
    return kept if kept is not None else _fold(pow)(tx, args, kwargs)


@handles(len)
def _len(tx, args, kwargs):
    from .sym_arith import length as sym_length  # NOTE [Size arithmetic stays symbolic]
    return (sym_length(tx, args[0]) if len(args) == 1 else None) or ConstantValue(length(tx, args[0]))


@handles(bool)
def _bool(tx, args, kwargs):
    return ConstantValue(truth(tx, args[0]) if args else False)


_CONVERT_DUNDERS = {float: ("__float__",), int: ("__int__",), complex: ("__complex__",),
                    str: ("__str__", "__repr__")}


# NOTE [Strings of tensors follow the print options]: `str(t)` of a tensor made from constants was folded
# while tracing, with the print options of that moment (torch.set_printoptions: global state no guard names),
# so `len(str(torch.tensor([1.123456789])))` stayed 16 after `set_printoptions(precision=2)` where eager gives
# 14 (/tmp/hsound2/l.py printoptions_str). It is no longer folded: it takes the path of any tensor's str.
def _convert(kind: type):
    def handler(tx, args, kwargs):
        if not args:
            return ConstantValue(kind())
        v = args[0]
        if isinstance(v, TensorValue) and kind in _CONVERT_DUNDERS:  # NOTE [Patched tensor operators]
            from .tensor_operators import check_tensor_dunder
            check_tensor_dunder(tx, v, *_CONVERT_DUNDERS[kind])
        if isinstance(v, TensorValue) and v.known_data() is not None and len(args) == 1 and not kwargs and \
                kind is not str:  # NOTE [Strings of tensors follow the print options]
            return constant_fold(kind, v.known_data())  # a tensor made from constants: its data is known
        if isinstance(v, TensorValue):
            if kind is int and len(args) == 1 and not kwargs:
                from .packed_sequences import element_as_int  # NOTE [Packed sequences]
                element = element_as_int(tx.output, v)
                if element is not None:
                    return element
                from .tensor_ints import python_int  # NOTE [Ints of tensors computed from sizes]
                element = python_int(tx.output, v)
                if element is not None:
                    return element
            raise Unsupported(BreakKind.DATA_DEPENDENT, f"{kind.__name__}() of a tensor reads its data")
        if kind is str and len(args) == 1 and not kwargs and is_user_object(v, tx, "__str__"):
            return user_str(tx, v)  # NOTE [Strings of user objects]
        if kind is str and len(args) == 1 and not kwargs:
            from .carried_loops import check_dynamic_format
            check_dynamic_format(tx, v)  # NOTE [Dynamic ints formatted into strings]
        from .numpy_scalars import torch_number  # NOTE [Dynamic NumPy scalars]
        number = torch_number(v) if kind is not str and len(args) == 1 and not kwargs else None
        if number is not None:  # the number itself when it is of that kind already (not specialised)
            return number if number.python_type() is kind else handler(tx, [number], kwargs)
        if len(args) == 1 and not kwargs:
            from .changing_strings import converted  # NOTE [Strings that change between calls]
            number = converted(tx, kind, v)
            if number is not None:
                return number
        from .sym_arith import convert  # NOTE [Size arithmetic stays symbolic]
        kept = convert(tx, kind, args, kwargs) or float_call(tx.output, kind, args, kwargs)
        if kept is not None:
            return kept
        if _all_const(args, kwargs):
            return constant_fold(kind, *_consts(args), **{k: x.as_constant() for k, x in kwargs.items()})
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{kind.__name__}() of {v.describe()}")
    return handler


BUILTIN_HANDLERS[int] = _convert(int)
BUILTIN_HANDLERS[float] = _convert(float)
BUILTIN_HANDLERS[str] = _convert(str)


@handles(tuple)
def _tuple(tx, args, kwargs):
    if args and _exact_tuple(args[0]):
        return args[0]  # CPython's tuple(t) of an exact tuple is t itself: `tuple(t) is t`
    return TupleValue(drain_whole(tx, args[0]) if args else [])


def _exact_tuple(value: Value) -> bool:
    return isinstance(value, TupleValue) and value.python_type() is tuple or \
        isinstance(value, ConstantValue) and type(value.value) is tuple


@handles(tuple.__new__)
def _tuple_new(tx, args, kwargs):
    """`tuple.__new__(cls, iterable)`: what a namedtuple's `_make` calls (no `__init__`, no `cls.__new__`).
    For tuple itself and namedtuple classes (those with `_fields`, the classes TupleValue models)."""
    cls = args[0] if args else None
    if not isinstance(cls, ClassValue) or kwargs or len(args) > 2 or not (
            cls.obj is tuple or issubclass(cls.obj, tuple) and isinstance(getattr(cls.obj, "_fields", None), tuple)):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "tuple.__new__ of a class other than tuple or a namedtuple")
    if cls.obj is tuple and len(args) > 1 and _exact_tuple(args[1]):
        return args[1]  # as tuple(t): t itself
    items = iterate(tx, args[1]) if len(args) > 1 else []
    return TupleValue(items) if cls.obj is tuple else TupleValue(items, cls=cls.obj)


@handles(list)
def _list(tx, args, kwargs):
    return ListValue(drain_whole(tx, args[0]) if args else [])


@handles(dict)
def _dict(tx, args, kwargs):
    items: dict[Any, Value] = {}
    if args:
        src = args[0]
        from .mappings import object_mapping_items, update_pairs
        from .dict_objects import is_new_dict_object, merged_items
        mapping = None if isinstance(src, DictValue) or is_new_dict_object(src) else object_mapping_items(tx, src)
        if isinstance(src, DictValue):
            items.update(src.items)
        elif is_new_dict_object(src):  # a dict subclass's instance made while tracing (a Counter)
            items.update(merged_items(src))
        elif mapping is not None:  # NOTE [Mappings that are objects]
            items.update(mapping)
        else:
            update_pairs(tx, src, items)  # NOTE [Dict update sequences]: a dict being built
    items.update(kwargs)
    return DictValue(items)


@handles(torch.Size)
def _size(tx, args, kwargs):
    return ConstantValue(torch.Size([i.as_constant() for i in iterate(tx, args[0])] if args else []))


@handles(iter)
def _iter(tx, args, kwargs):
    from .values.containers import iterator_over
    if isinstance(args[0], IteratorValue):
        return args[0]
    from .protocol import object_iterator  # NOTE [Iterators of objects]
    return object_iterator(tx, args[0]) or iterator_over(args[0], iterate(tx, args[0]))  # NOTE [Live iteration]


@handles(next)
def _next(tx, args, kwargs):
    it = args[0]
    if not isinstance(it, IteratorValue):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"next() of {it.describe()}")
    if isinstance(it, LazyGeneratorValue):  # NOTE [Generators driven by send]: StopIteration(return value)
        if it.lent_at is not None:  # NOTE [Lent iterators]: drawn ahead by a combinator
            raise lent_error(it)
        try:
            return it.send(ConstantValue(None))
        except UserException as e:
            if len(args) > 1 and isinstance(e.exc, StopIteration):
                return args[1]
            raise
    ended_now, item = not it.exhausted, it.next()  # NOTE [Return values of generators run ahead]
    if item is None:
        if len(args) > 1:
            return args[1]
        raise UserException(stop_iteration(it, ended_now))
    return item


def _typed(result: IteratorValue, kind: type | None) -> IteratorValue:
    """NOTE [Iterators of their own type]: zip, enumerate, map and filter objects answer type() as such, and
    one that outlives the graph is rebuilt as one of its type over its remaining rows (codegen_runtime.rows_as), or by
    the real combinator from its recipe (NOTE [Combinators rebuilt at breaks])."""
    if kind is not None and type(result) is IteratorValue:
        result.iter_type = kind
    return result


def _row_number(tx, i: int, start: Any) -> Value:
    return binary(tx, operator.add, start, ConstantValue(i)) if isinstance(start, Value) else ConstantValue(i + start)


@handles(enumerate)
def _enumerate(tx, args, kwargs):
    start = args[1] if len(args) > 1 else kwargs.get("start", ConstantValue(0))
    if not (is_sym(start) and isinstance(start.sym, torch.SymInt)):  # a symbolic int start (position ids from
        start = index_of(start.as_constant())  # an offset) stays symbolic: rows `start + i`; eager's TypeError
    watch = lazy_combinators.watch(tx, args[:1])  # NOTE [Lazy combinators]
    column, = drain_lent(tx, args[:1])  # NOTE [Lent iterators]
    rows = IteratorValue([TupleValue([_row_number(tx, i, start), v]) for i, v in enumerate(column)])
    recipe = {} if isinstance(start, Value) else {"extra": start}  # symbolic: rebuilt from its rows at a break
    rows = ends_with(drawn_ahead_checked(watch.finish(rows, "enumerate", per_row=True, **recipe), args[:1]), args[:1])
    return _typed(rows, enumerate)  # NOTE [Combinators rebuilt at breaks], [Lazy generators drawn ahead]


@handles(zip)
def _zip(tx, args, kwargs):
    strict = kwargs.get("strict", ConstantValue(False)).as_constant()
    watch = lazy_combinators.watch(tx, args)  # NOTE [Lazy combinators]
    columns = drain_zipped(tx, list(args), bool(strict))  # NOTE [Lent iterators], [Combinators over endless generators]
    if strict and len({len(c) for c in columns}) > 1:  # CPython raises once the shortest runs out, after the
        # rows before it were used, naming the argument: the loop runs as Python
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "zip(strict=True) over iterables of different lengths")
    rows = watch.finish(IteratorValue([TupleValue(list(row)) for row in zip(*columns)]), "zip", per_row=True,
                        extra=bool(strict), columns=columns)
    # NOTE [Combinators rebuilt at breaks], [Lazy generators drawn ahead]
    return _typed(ends_with(drawn_ahead_checked(rows, args), list(args), columns), zip if not strict else None)


@handles(reversed)
def _reversed(tx, args, kwargs):
    mapping = args[0] if isinstance(args[0], DictValue) else getattr(args[0], "mapping", None)  # a dict or its view
    if isinstance(mapping, DictValue) and mapping.python_type() in _PLAIN_DICTS:
        iterate(tx, args[0])  # read whole (guarded)
        return dict_iterator(mapping, getattr(args[0], "kind", None), reverse=True)  # NOTE [Dict iterators read live]
    if isinstance(args[0], TensorValue):  # NOTE [Patched tensor operators]: Tensor.__reversed__, not __iter__
        from .tensor_operators import check_tensor_dunder
        check_tensor_dunder(tx, args[0], "__reversed__")
        if args[0].fake.dim() == 0:  # torch's Tensor.__reversed__: the tensor itself, else flip(0): a tensor
            return args[0]
        return tx.output.call("call_method", "flip", (args[0], ConstantValue(0)), {})
    from .sequence_protocol import check_reversible
    check_reversible(args[0])  # revBF PRE-2
    watch = lazy_combinators.watch(tx, args[:1])  # NOTE [Lazy combinators]
    result = watch.finish(IteratorValue(list(reversed(iterate(tx, args[0])))), "reversed", per_row=False,
                          from_end=True)
    # NOTE [Iterators of their own type] in values/containers.py: reversed(a range) is a range_iterator
    # over the reversed range, reversed(a tuple) a `reversed` object; they answer type() and are rebuilt so.
    # reversed(a list) answers list_reverseiterator; it is never rebuilt (made_at: it breaks where made).
    seq = args[0]
    if isinstance(seq, ListValue) and seq.python_type() is list and result.made_at is not None:
        result.iter_type = type(reversed([]))
    if isinstance(seq, ConstantValue) and type(seq.value) is range and result.made_at is None:
        result.constant = seq.value[::-1]
        result.iter_type = type(iter(result.constant))  # a longrange_iterator past C longs
    elif (isinstance(seq, TupleValue) and iterates_as_tuple(seq.python_type()) or isinstance(seq, ConstantValue)
          and type(seq.value) in (tuple, str, bytes)) and result.made_at is None:
        result.iter_type = reversed  # a namedtuple's too: tuple's own __len__ and __getitem__, no __reversed__
    return result


_PLAIN_DICTS = (dict, collections.OrderedDict, collections.defaultdict)


@handles(map)
def _map(tx, args, kwargs):
    fn, *iterables = args
    watch = lazy_combinators.watch(tx, iterables)  # NOTE [Lazy combinators]
    columns = drain_lent(tx, iterables)  # NOTE [Lent iterators]
    rows = _calls_made_early(tx, "map", lambda: [tx.call(fn, list(row), {}) for row in zip(*columns)])
    rows = watch.finish(IteratorValue(rows), "map", per_row=True, fn=fn, columns=columns)
    return _typed(drawn_ahead_checked(rows, iterables), map)  # NOTE [Lazy generators drawn ahead]


# NOTE [Objects map makes]: `a, b = map(Box, [1, 2])` or `list(map(make, items))` with a class, or a function
# that makes and fills a list or object, changes only values made by those very calls: no code sees them
# before map yields them, so making them when map is made (as the trace does) is the same as eager making
# them as they are drawn. Stores into values that existed before (the function's closure, the items, a
# global's object) still make map run lazily, as Python. A class with a Python __init__ counts as reading
# state (it may read globals; lazy_combinators._reads_nothing_else): NOTE [Lazy combinators] then checks
# before each draw that nothing changed since map was made.


@handles(filter)
def _filter(tx, args, kwargs):
    fn, seq = args
    watch = lazy_combinators.watch(tx, [seq])  # NOTE [Lazy combinators]
    column, = drain_lent(tx, [seq])  # NOTE [Lent iterators]

    def run():
        keep = []
        for item in column:
            test = item if fn.is_constant() and fn.as_constant() is None else tx.call(fn, [item], {})
            if truth(tx, test):
                keep.append(item)
        return keep
    predicate = None if fn.is_constant() and fn.as_constant() is None else fn
    rows = watch.finish(IteratorValue(_calls_made_early(tx, "filter", run)), "filter", per_row=False,
                        fn=predicate, columns=[column])
    return _typed(drawn_ahead_checked(rows, [seq]), filter)  # NOTE [Lazy generators drawn ahead]


@handles(sorted)
def _sorted(tx, args, kwargs):
    items = iterate(tx, args[0])
    reverse = kwargs.get("reverse", ConstantValue(False)).as_constant()
    key = kwargs.get("key")
    if key is not None and not (key.is_constant() and key.as_constant() is None):
        keys = [tx.call(key, [i], {}) for i in items]  # called once per item, in order, as CPython does
        if not all(k.is_constant() and not symbolic(k) for k in keys):  # NOTE [Sorting by symbolic keys]
            order = sorted(range(len(items)), key=lambda i: _TracedOrder(tx, keys[i]), reverse=reverse)
            return ListValue([items[i] for i in order])
        order = _sorted_constants(range(len(items)), key=lambda i: keys[i].as_constant(), reverse=reverse)
        return ListValue([items[i] for i in order])
    if not all(i.is_constant() and not symbolic(i) for i in items):
        if any(isinstance(i, TensorValue) for i in items):
            raise Unsupported(BreakKind.DATA_DEPENDENT, "sorted() of tensors compares tensor data")
        order = sorted(range(len(items)), key=lambda i: _TracedOrder(tx, items[i]), reverse=reverse)
        return ListValue([items[i] for i in order])
    return ListValue([ConstantValue(v) for v in _sorted_constants(_consts(items), reverse=reverse)])


def _sorted_constants(values, **kwargs) -> list:
    try:  # keys that do not compare (`sorted({1: 0, "b": 0})`): CPython's own TypeError, the user's (hhuntG4 LOW-5)
        return sorted(values, **kwargs)
    except TypeError as e:
        raise UserException(e) from None


class _TracedOrder:
    """NOTE [Sorting by traced comparisons]: sorted()/max()/min() of values that are not constants (objects
    whose class defines `__lt__` in Python, tuples holding them) run CPython's own sort or scan over these
    stand-ins, whose `<` is the traced comparison (comparisons.compare, then its truth): the same algorithm on
    the same values asks the same comparisons in the same order as eager, so the order found, the
    comparisons' effects and any exception they raise are eager's. A comparison that needs tensor data is a
    graph break, as anywhere."""

    __slots__ = ("tx", "value")

    def __init__(self, tx, value: Value) -> None:
        self.tx = tx
        self.value = value

    def __lt__(self, other: "_TracedOrder") -> bool:
        return traced_better(self.tx, operator.lt, self.value, other.value)


def traced_better(tx, op: Callable, a: Value, b: Value) -> bool:
    from .comparisons import compare
    return truth(tx, compare(tx, op, a, b))


def _min_max(fn: Callable):
    def handler(tx, args, kwargs):
        if kwargs.keys() - {"default", "key"}:
            raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{fn.__name__}() with these keywords")
        if len(args) > 1 and "default" in kwargs:
            raise UserException(TypeError(f"Cannot specify a default for {fn.__name__}() with multiple "
                                          "positional arguments"))
        items, drawn = _drawn_with_check(tx, args[0]) if len(args) == 1 else (list(args), _nothing)
        if not items and "default" in kwargs:
            return kwargs["default"]
        key = kwargs.get("key")
        if key is not None and not (key.is_constant() and key.as_constant() is None):
            return _min_max_by_key(tx, fn, items, key, drawn)
        from .sym_arith import min_max  # NOTE [Size arithmetic stays symbolic]
        kept = min_max(tx, fn, items)
        if kept is not None:
            return kept
        if all(isinstance(i, ConstantValue) for i in items):  # a list value is the item itself, not a copy
            return constant_fold(fn, _consts(items))
        if items and not any(isinstance(i, TensorValue) and not _derivable(tx, i) for i in items):
            return items[_best(tx, fn, items)]  # NOTE [Sorting by traced comparisons]
        raise Unsupported(BreakKind.DATA_DEPENDENT, f"{fn.__name__}() of tensors compares tensor data")
    return handler


def _derivable(tx, v: TensorValue) -> bool:
    """A 0-d int tensor whose value tracing derives: its comparisons decide without data, guarded, and
    max()/min() returns the very object eager returns (NOTE [Ints of tensors computed from sizes])."""
    from .tensor_ints import int_of
    return v.fake.dim() == 0 and int_of(tx.output, v) is not None


def _nothing() -> None:
    pass


# NOTE [Consumers that call back between draws]: max/min with key=, functools.reduce and sum draw their
# iterable at once (protocol.iterate), then run code of their own per item (the key, the function, an object's
# __add__); CPython draws each item after the callbacks for the items before it. A generator whose reads such a
# callback changes (`max(g(), key=lambda x: ST.append(1) or x)` where g yields len(ST): eager 2, the trace 0,
# review of revY HIGH-1 by hfixY) must break: the generator's own check (NOTE [Eager generators], NOTE [Lazy
# generators drawn ahead]) runs after each callback, where CPython would draw the next item.
def _drawn_with_check(tx, iterable: Value) -> tuple[list[Value], Callable[[], None]]:
    """The items of `iterable` and the check to run where CPython draws the next one (NOTE [Consumers that
    call back between draws])."""
    from .lazy_generators import LazyGeneratorValue
    from .values.containers import _drawn_check
    items = iterate(tx, iterable)
    if isinstance(iterable, LazyGeneratorValue):
        return items, _drawn_check(tx.output, iterable)
    check = iterable.check if isinstance(iterable, IteratorValue) else None
    return items, check if check is not None else _nothing


def _min_max_by_key(tx, fn: Callable, items: list[Value], key: Value, drawn: Callable[[], None]) -> Value:
    """`max(items, key=f)` as CPython runs it: `f` called once per item, in order, and the first item
    whose key is strictly greater (less, for min) than the best so far replaces it. Keys must be
    constants (their comparison is then Python's own, exceptions included)."""
    if not items:
        try:
            fn([])
        except ValueError as e:  # this CPython's own message
            raise UserException(e) from None
    keys = []
    for item in items:
        keys.append(tx.call(key, [item], {}))
        drawn()  # NOTE [Consumers that call back between draws]
    return items[_best(tx, fn, keys)]


def _best(tx, fn: Callable, keys: list[Value]) -> int:
    """The index max()/min() keeps: the first key strictly greater (less) than the best so far, compared as
    Python compares constants, or by traced comparisons (NOTE [Sorting by traced comparisons])."""
    better = operator.gt if fn is max else operator.lt
    constant = all(k.is_constant() and not symbolic(k) for k in keys)  # NOTE [Sorting by symbolic keys]
    best = 0
    for i in range(1, len(keys)):
        if not constant:
            if traced_better(tx, better, keys[i], keys[best]):
                best = i
            continue
        try:
            if better(keys[i].as_constant(), keys[best].as_constant()):
                best = i
        except Exception as e:  # the keys' own comparison raised (TypeError between str and int)
            raise UserException(e) from None
    return best


BUILTIN_HANDLERS[min] = _min_max(min)
BUILTIN_HANDLERS[max] = _min_max(max)


@handles(sum)
def _sum(tx, args, kwargs):
    total = args[1] if len(args) > 1 else kwargs.get("start", ConstantValue(0))
    items, drawn = _drawn_with_check(tx, args[0])  # NOTE [Consumers that call back between draws]
    return _drawn_whole(args[0], sum_values(tx, total, items, drawn, lambda a, b: binary(tx, operator.add, a, b)))


@handles(any)
def _any(tx, args, kwargs):
    found = any(truth(tx, i) for i in iterate(tx, args[0]))
    return ConstantValue(True) if found else _drawn_whole(args[0], ConstantValue(False))


@handles(all)
def _all(tx, args, kwargs):
    held = all(truth(tx, i) for i in iterate(tx, args[0]))
    return ConstantValue(False) if not held else _drawn_whole(args[0], ConstantValue(True))


def _drawn_whole(iterable: Value, result: Value) -> Value:
    """sum(), or any()/all() that found nothing to stop at, drew `iterable` to its end in order, with no error: its
    claims end (NOTE [Iterators claimed by a run ahead]; revBB: `sum(v for v in it)` then `list(it)` retraced)."""
    if isinstance(iterable, IteratorValue):
        mark_ended_in_order(iterable)
    return result


@handles(getattr)
def _getattr(tx, args, kwargs):
    obj, name = args[0], args[1].as_constant()
    if len(args) > 2:
        try:
            return tx.getattr(obj, name)
        except UserException as e:
            if isinstance(e.exc, AttributeError):
                return args[2]
            raise
    return tx.getattr(obj, name)


@handles(hasattr)
def _hasattr(tx, args, kwargs):
    try:
        tx.getattr(args[0], args[1].as_constant())
        return ConstantValue(True)
    except UserException as e:
        if isinstance(e.exc, AttributeError):
            return ConstantValue(False)
        raise


@handles(setattr)
def _setattr(tx, args, kwargs):
    tx.store_attr(args[0], args[1].as_constant(), args[2])
    return ConstantValue(None)


@handles(super)
def _super(tx, args, kwargs):
    if len(args) == 2:
        from .attributes import SuperValue
        return SuperValue(_super_checked(args[0].as_constant(), args[1]), args[1])
    from .resume import origin
    if args or "__class__" not in tx.cells or not origin(tx.code, 0)[0].co_argcount:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "super() outside a method")
    from .attributes import SuperValue
    # a resume function's first local is the original's (NOTE [The instance comes first] in resume.py)
    first = tx.code.co_varnames[0]
    if first not in tx.locals and first not in tx.cells:  # `del self` before super(), as 3.11's super() says
        raise UserException(RuntimeError("super(): arg[0] deleted"))
    obj = tx.load_local(first)
    return SuperValue(_super_checked(tx.load_cell("__class__").as_constant(), obj), obj)


# NOTE [super() checks its arguments]: CPython's super(type, obj) raises TypeError when obj is neither an instance
# nor a subclass of type (a reassigned `self`, `super(K, 5)`); traced without the check, the error surfaced later,
# outside the handler the trace had modelled, so `try: super().f(x) except TypeError:` raised (review revH H3).
# The check reads the types the trace already guards (an object's type, a class value, a constant's value).
def _super_checked(cls, obj: Value):
    if not isinstance(cls, type):
        raise UserException(TypeError(f"super() argument 1 must be a type, not {type(cls).__name__}"))
    from .values import ClassValue
    if isinstance(obj, ClassValue) and isinstance(obj.obj, type):
        if _subtype(obj.obj, cls) or _subtype(type(obj.obj), cls) or "__class__" in vars(type(obj.obj)):
            return cls
        raise UserException(TypeError("super(type, obj): obj must be an instance or subtype of type"))
    if isinstance(obj, ConstantValue) and isinstance(obj.value, type) and _subtype(obj.value, cls):
        return cls
    try:
        kind = obj.python_type()
    except Unsupported:
        return cls  # not known here: the check is left to the call, as before
    if any("__class__" in vars(k) for k in getattr(kind, "__mro__", (object,))[:-1]):
        return cls  # CPython's super also accepts an instance whose __class__ is a subclass: not checked here
    if isinstance(kind, type) and not _subtype(kind, cls) and not isinstance(obj, ClassValue):
        raise UserException(TypeError("super(type, obj): obj must be an instance or subtype of type"))
    return cls


def _subtype(kind: type, cls: type) -> bool:
    """CPython's own subtype test (the MRO), which super() uses: not issubclass(), which an ABC's register() or a
    metaclass's __subclasscheck__ answer (review revK K5)."""
    return cls in getattr(kind, "__mro__", ())


@handles(object.__init__)
def _object_init(tx, args, kwargs):
    return ConstantValue(None)


@handles(object.__setattr__)
def _object_setattr(tx, args, kwargs):
    from .getattribute import object_setattr
    if not object_setattr(tx, args[0], args[1].as_constant(), args[2]):  # NOTE [Custom __setattr__]
        tx.store_attr(args[0], args[1].as_constant(), args[2])
    return ConstantValue(None)


@handles(print)
def _print(tx, args, kwargs):
    raise Unsupported(BreakKind.UNSUPPORTED_CALL, "print() writes output outside the graph")


@handles(functools.partial)
def _partial(tx, args, kwargs):
    from .partials import new_partial  # NOTE [Partials of partials]
    return new_partial(tx, args, kwargs)


@handles(functools.reduce)
def _reduce(tx, args, kwargs):
    fn, (seq, drawn) = args[0], _drawn_with_check(tx, args[1])
    acc = args[2] if len(args) > 2 else seq.pop(0)
    for item in seq:
        acc = tx.call(fn, [acc, item], {})
        drawn()  # NOTE [Consumers that call back between draws]
    return acc


BUILTIN_HANDLERS[torch.finfo] = _fold(torch.finfo)
BUILTIN_HANDLERS[torch.iinfo] = _fold(torch.iinfo)
BUILTIN_HANDLERS[torch.promote_types] = _fold(torch.promote_types)
BUILTIN_HANDLERS[torch.device] = _fold(torch.device)


@handles(itertools.chain)
def _chain(tx, args, kwargs):
    watch = lazy_combinators.watch(tx, args)  # NOTE [Lazy combinators]
    columns = drain_lent(tx, list(args))  # NOTE [Lent iterators], [Lazy generators drawn ahead]
    rows = IteratorValue([item for column in columns for item in column])
    return drawn_ahead_checked(watch.finish(rows, "chain", per_row=False), list(args))


@handles(itertools.product)
def _product(tx, args, kwargs):
    """`product(*iterables, repeat=r)`: each iterable drawn once, in order, then the rows of the pools
    repeated `r` times (timm's and torchvision's anchor and window grids: `product(range(n), repeat=2)`)."""
    if kwargs.keys() - {"repeat"} or not kwargs.get("repeat", ConstantValue(1)).is_constant():
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "itertools.product with these keywords")
    pools = [iterate(tx, a) for a in args]
    try:  # the rows as positions, by CPython's own product (its checks of `repeat` included)
        repeat = {k: v.as_constant() for k, v in kwargs.items()}
        rows = list(itertools.product(*[range(len(p)) for p in pools], **repeat))
    except (TypeError, ValueError, OverflowError) as e:
        raise UserException(e) from None
    return IteratorValue([TupleValue([pools[j % len(pools)][i] for j, i in enumerate(row)]) for row in rows])


for _fn in (bisect.bisect_left, bisect.bisect_right):  # read a sorted list of constants (MultiStepLR, bucketing)
    BUILTIN_HANDLERS[_fn] = _fold(_fn)


@handles(torch._C.is_grad_enabled)
def _is_grad_enabled(tx, args, kwargs):
    return ConstantValue(tx.output.grad_enabled)


@handles(torch._C._set_grad_enabled)
def _set_grad_enabled(tx, args, kwargs):
    """The raw grad-mode switch (what context managers written by hand call): a state change in the
    graph, like `with torch.set_grad_enabled(b)`."""
    if len(args) != 1 or kwargs or not args[0].is_constant():
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "torch._C._set_grad_enabled of a non-constant mode")
    tx.output.set_grad_enabled(bool(args[0].as_constant()), always=True)  # NOTE [Grad-mode nodes]
    return ConstantValue(None)


@handles(torch.is_tensor)
def _is_tensor(tx, args, kwargs):
    return ConstantValue(isinstance(args[0], TensorValue))


@handles(torch.jit.annotate)
def _jit_annotate(tx, args, kwargs):
    """`torch.jit.annotate(list[int], [])` (nn.ConvTranspose's output_size path): a TorchScript type hint
    that returns its value unchanged in Python."""
    bound = dict(zip(("the_type", "the_value"), args), **kwargs)
    if set(bound) != {"the_type", "the_value"}:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "torch.jit.annotate with unexpected arguments")
    return bound["the_value"]


@handles(torch._C.get_default_dtype)
def _default_dtype(tx, args, kwargs):
    from .state_blocks import current_default_dtype  # NOTE [Default dtype changes]
    return ConstantValue(current_default_dtype(tx.output))  # guarded at entry (see convert._global_guards)


for _name, _fn in BINARY_OPS.items():
    BUILTIN_HANDLERS[_fn] = (lambda f: lambda tx, args, kwargs: binary(tx, f, *args))(_fn)
for _name, _fn in COMPARE_OPS.items():
    BUILTIN_HANDLERS[_fn] = (lambda f: lambda tx, args, kwargs: compare(tx, f, *args))(_fn)
for _fn in (operator.neg, operator.pos, operator.invert, operator.not_, operator.abs):
    BUILTIN_HANDLERS[_fn] = (lambda f: lambda tx, args, kwargs: unary(tx, f, args[0]))(_fn)
BUILTIN_HANDLERS[operator.inv] = BUILTIN_HANDLERS[operator.invert]  # another function object, the same `~`
BUILTIN_HANDLERS[operator.getitem] = lambda tx, args, kwargs: getitem(tx, args[0], args[1])
BUILTIN_HANDLERS[operator.contains] = lambda tx, args, kwargs: ConstantValue(contains(tx, args[1], args[0]))
BUILTIN_HANDLERS[operator.truth] = lambda tx, args, kwargs: ConstantValue(truth(tx, args[0]))


def _statement(fn: Callable, arity: int, run: Callable):
    """`operator.setitem`/`delitem`/`is_`/`is_not` traced as the statement or operator they name: folded on
    copies of the containers, a change was lost and `is` compared copies (NOTE [Folded calls on containers])."""
    def handler(tx, args, kwargs):
        if len(args) != arity or kwargs:
            raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"operator.{fn.__name__} with {len(args)} arguments")
        return run(tx, *args)
    return handler


def _setitem(tx, obj: Value, key: Value, value: Value) -> Value:
    from .handlers.arith import _store_item
    _store_item(tx, obj, key, value)
    return ConstantValue(None)


def _delitem(tx, obj: Value, key: Value) -> Value:
    from .handlers.arith import delete_item
    delete_item(tx, obj, key)
    return ConstantValue(None)


BUILTIN_HANDLERS[operator.setitem] = _statement(operator.setitem, 3, _setitem)
BUILTIN_HANDLERS[operator.delitem] = _statement(operator.delitem, 2, _delitem)
BUILTIN_HANDLERS[operator.is_] = _statement(operator.is_, 2, lambda tx, a, b: ConstantValue(is_same(tx, a, b)))
BUILTIN_HANDLERS[operator.is_not] = _statement(operator.is_not, 2,
                                               lambda tx, a, b: ConstantValue(not is_same(tx, a, b)))


__all__ = ["BUILTIN_HANDLERS"]

from . import itertools_support, mappings, state_blocks, stdlib, type_checks  # noqa: E402,F401  (register their handlers)
from . import string_formats  # noqa: E402,F401  (NOTE [format_map through the mapping's protocol])
from . import set_builtins  # noqa: E402  (set() and frozenset())
set_builtins.register(BUILTIN_HANDLERS)
from . import user_exceptions  # noqa: E402,F401  (NOTE [Exceptions with a Python __init__])
from . import pytree_support  # noqa: E402  (NOTE [pytree calls])
pytree_support.register(BUILTIN_HANDLERS)
