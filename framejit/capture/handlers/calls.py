"""Calls and function creation.

Canonical call layout: [NULL, callable, arg1..argN] (3.11, 3.12), [callable, NULL, arg1..argN] (3.13), or
[method, self, arg1..argN]; KW_NAMES names the last len(kw_names) arguments as keywords (3.13's CALL_KW
becomes KW_NAMES + CALL). LOAD_METHOD is canonicalised to push a bound callable and NULL, in the order the
running CPython puts a NULL (NOTE [Call layouts] in emit.py).
"""
from __future__ import annotations

from ..breaks import BreakKind, Unsupported, UserException
from ..emit import callee_and_self
from ..lazy_generators import drain_whole
from ..values import NULL, CellValue, DictValue, UserFunctionValue
from . import op


@op("KW_NAMES")
def kw_names(tx, inst):
    tx.kw_names = inst.arg


@op("CALL")
def call(tx, inst):
    args = tx.popn(inst.arg)
    second = tx.pop()
    first = tx.pop()
    fn, leading = callee_and_self(first, second, NULL)
    args = [*leading, *args]
    names, tx.kw_names = tx.kw_names, ()
    kwargs = {}
    if names:
        kwargs = dict(zip(names, args[len(args) - len(names):]))
        args = args[:len(args) - len(names)]
    tx.push(tx.call(fn, args, kwargs))


@op("CALL_FUNCTION_EX")
def call_function_ex(tx, inst):
    kwargs_value = tx.pop() if inst.arg & 1 else DictValue({})
    args_value = tx.pop()
    second = tx.pop()
    first = tx.pop()
    fn, leading = callee_and_self(first, second, NULL)
    if leading:  # the compiler always puts a NULL next to CALL_FUNCTION_EX's callable
        raise Unsupported(BreakKind.UNSUPPORTED_OPCODE, "CALL_FUNCTION_EX without NULL")
    if not isinstance(kwargs_value, DictValue):
        from ..mappings import object_mapping_items
        items = object_mapping_items(tx, kwargs_value)  # NOTE [Mappings that are objects]
        if items is None:
            raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"** of {kwargs_value.describe()}")
        if not all(type(k) is str for k in items):
            raise UserException(TypeError("keywords must be strings"))
        kwargs_value = DictValue(items)
    tx.push(tx.call(fn, drain_whole(tx, args_value), dict(kwargs_value.items)))


@op("MAKE_FUNCTION")
def make_function(tx, inst):
    code = tx.pop().as_constant()
    flags = inst.arg if isinstance(inst.arg, int) else int(inst.arg)
    closure = tuple(tx.pop().items) if flags & 0x08 else None
    annotations = tx.pop() if flags & 0x04 else None
    kwdefaults = dict(tx.pop().items) if flags & 0x02 else {}
    defaults = tuple(tx.pop().items) if flags & 0x01 else ()
    if closure is not None and not all(isinstance(c, CellValue) or hasattr(c, "cell") for c in closure):
        raise Unsupported(BreakKind.UNSUPPORTED_OPCODE, "closure over unknown cells")
    import types
    # A real function object for the code (name, flags, signature); its closure and defaults stay abstract.
    dummy_closure = tuple(types.CellType() for _ in code.co_freevars) or None
    fn = types.FunctionType(code, tx.f_globals, code.co_name, None, dummy_closure)
    fn.__qualname__ = code.co_qualname
    made = UserFunctionValue(fn, None, closure or (), defaults, kwdefaults)
    made.attrs = {}  # NOTE [Attributes of functions made while tracing]
    made.annotations = annotations
    tx.push(made)
