"""with-blocks, assert and raise, super(), and generator frames."""
from __future__ import annotations

from ..breaks import BreakKind, Unsupported, UserException
from ..context import enter
from ..values import NULL, ClassValue, ConstantValue
from . import op


@op("BEFORE_WITH")
def before_with(tx, inst):
    exit_value, entered = enter(tx, tx.pop())
    tx.push(exit_value)
    tx.push(entered)


@op("LOAD_ASSERTION_ERROR")
def load_assertion_error(tx, inst):
    tx.push(ClassValue(AssertionError))


@op("RAISE_VARARGS")
def raise_varargs(tx, inst):
    """Raising is the user's exception: the frame runs eagerly, where CPython raises it for real."""
    if inst.arg == 0:
        raise Unsupported(BreakKind.EXCEPTION_RAISED, "bare `raise` re-raises an exception being handled")
    values = tx.popn(inst.arg)
    exc = values[0]
    if isinstance(exc, ClassValue) and issubclass(exc.obj, BaseException):
        raise UserException(exc.obj())
    if isinstance(exc, ConstantValue) and isinstance(exc.value, BaseException):
        raise UserException(exc.value)
    raise Unsupported(BreakKind.EXCEPTION_RAISED, f"raise of {exc.describe()}")


@op("LOAD_SUPER_ATTR")
def load_super_attr(tx, inst):
    is_method, _two_args, name = inst.arg
    self_value = tx.pop()
    cls_value = tx.pop()
    tx.pop()  # the global `super`
    from ..attributes import SuperValue
    attr = tx.getattr(SuperValue(cls_value.as_constant(), self_value), name)
    if is_method:
        tx.push(NULL)
    tx.push(attr)


@op("RETURN_GENERATOR")
def return_generator(tx, inst):
    if tx.yielded is None:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "generator frame outside a consumer")
    tx.push(ConstantValue(None))  # popped by the POP_TOP that follows


@op("YIELD_VALUE")
def yield_value(tx, inst):
    """Generators are run to completion when called (NOTE [Eager generators] in translator.py)."""
    if tx.yielded is None:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "yield outside a generator being inlined")
    tx.yielded.append(tx.pop())
    tx.push(ConstantValue(None))
    tx.suspended = tx.suspend_at_yield  # NOTE [Generator context managers]
