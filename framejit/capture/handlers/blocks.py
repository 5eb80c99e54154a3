"""with-blocks, assert and raise, super(), and generator frames."""
from __future__ import annotations


from ..breaks import BreakKind, Unsupported, UserException
from ..calls import builtin_made
from ..caught_exceptions import call_exit, exception_types, reraised
from ..context import enter
from ..generator_reach import torch_state
from ..lazy_generators import note_with
from ..stdlib import no_exception_handled
from ..values import ClassValue, ConstantValue
from . import op


@op("BEFORE_WITH")
def before_with(tx, inst):
    ctx = tx.pop()
    note_with(tx, ctx)  # NOTE [Handlers that see the exception on close] in lazy_generators.py
    exit_value, entered = enter(tx, ctx)
    tx.push(exit_value)
    tx.push(entered)


@op("LOAD_ASSERTION_ERROR")
def load_assertion_error(tx, inst):
    tx.push(ClassValue(AssertionError))


# NOTE [Bare raise with no exception handled]: a bare `raise` where no exception is being handled, neither in the
# traced code (no handler of any frame of the trace is being followed) nor by the caller at entry (the guard of NOTE
# [sys.exc_info while tracing] in stdlib.py), raises CPython's RuntimeError("No active exception to reraise"). It was
# a break (fullgraph=True raised; PyTorch's test_generator.py test_pep479_exception_stack_balanced on 3.11, after a
# generator's StopIteration became the RuntimeError its caller caught). A call from inside a caller's `except`
# fails the guard and retraces, where the `raise` is the break as before.
@op("RAISE_VARARGS")
def raise_varargs(tx, inst):
    """Raising is the user's exception: a try around it in the trace catches it (NOTE [Exceptions caught
    while tracing]); otherwise the frame lets CPython raise it for real."""
    if inst.arg == 0:
        caught = tx.handling[-1].caught if tx.handling else None
        if caught is None and not tx.handling and no_exception_handled(tx):
            raise UserException(RuntimeError("No active exception to reraise"))  # NOTE [Bare raise with no
            # exception handled]
        if caught is None:
            raise Unsupported(BreakKind.EXCEPTION_RAISED, "bare `raise` re-raises an exception being handled")
        raise reraised(tx, caught, caught.value)  # NOTE [Exceptions re-raised from followed handlers]
    values = tx.popn(inst.arg)
    exc = values[0]
    if isinstance(exc, ClassValue) and issubclass(exc.obj, BaseException) and builtin_made(exc.obj):
        e = UserException(exc.obj())
    elif isinstance(exc, ConstantValue) and isinstance(exc.value, BaseException):
        e = UserException(exc.value)
    else:
        raise Unsupported(BreakKind.EXCEPTION_RAISED, f"raise of {exc.describe()}")
    e.user_raised = True  # NOTE [RuntimeErrors raised by the user]
    if inst.arg == 2:
        e.raised_from = values[1]  # NOTE [New exceptions leaving callees' handlers]
    raise e


# NOTE [Exceptions caught while tracing]: these run only in a handler the trace followed.
@op("PUSH_EXC_INFO")
def push_exc_info(tx, inst):
    exc = tx.pop()
    tx.push(ConstantValue(None))  # the exception being handled before (only POP_EXCEPT reads it back)
    tx.push(exc)


@op("WITH_EXCEPT_START")
def with_except_start(tx, inst):
    """NOTE [Exceptions in with-blocks]: the block's `__exit__(type, value, traceback)`, inlined."""
    tx.push(call_exit(tx))


@op("CHECK_EXC_MATCH")
def check_exc_match(tx, inst):
    types = exception_types(tx.pop())
    exc = tx.peek().value
    # NOTE [MRO guarded] (lookup.py): `except T` matches by the raised type's MRO, which
    # `Mine.__bases__ = (E2,)` between calls changes while the class itself stays the one guarded
    from ..lookup import guard_mro
    guard_mro(tx.output, type(exc))
    tx.push(ConstantValue(_exception_matches(type(exc).__mro__, types)))


def _exception_matches(mro: tuple, types) -> bool:
    """CPython's `except T` test (PyErr_GivenExceptionMatches): T, or an item of a (nested) tuple, is in the
    raised type's MRO, by identity; never a metaclass's __subclasscheck__/__instancecheck__, which isinstance
    would consult (review revC C2)."""
    if isinstance(types, tuple):
        return any(_exception_matches(mro, t) for t in types)
    return any(t is types for t in mro)


@op("POP_EXCEPT")
def pop_except(tx, inst):
    tx.pop()
    tx.handling.pop()


@op("RERAISE")
def reraise(tx, inst):
    value = tx.pop()
    raise reraised(tx, value, value.value)  # NOTE [Exceptions re-raised from followed handlers]


@op("LOAD_SUPER_ATTR")
def load_super_attr(tx, inst):
    is_method, _two_args, name = inst.arg
    self_value = tx.pop()
    cls_value = tx.pop()
    tx.pop()  # the global `super`
    from ..attributes import SuperValue
    attr = tx.getattr(SuperValue(cls_value.as_constant(), self_value), name)
    from .stack import push_with_null
    push_with_null(tx, attr, is_method)


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
    start = getattr(tx, "yield_state", None)
    if start is not None and torch_state(tx.output) != start:
        # NOTE [Torch state across yields]: `with torch.no_grad(): yield x * 2` leaves grad mode off while the
        # generator is suspended, so eager runs the consumer's code between its steps under it; a generator run
        # ahead of its consumer (NOTE [Eager generators]) restored the mode before the consumer was traced
        # (review revQ Q8: `v * x` recorded for autograd where eager's is not). Such a generator is traced
        # again lazily, stepped in the consumer's order (the mode it leaves set is then the consumer's), or
        # the frame runs eagerly.
        e = Unsupported(BreakKind.SIDE_EFFECT, "the generator yields inside a block that changes torch state "
                        "(grad mode, inference mode, autocast, default dtype or device): it runs lazily")
        e.state_across_yield = True
        raise e
    tx.yielded.append(tx.pop())
    if getattr(tx, "yield_draws", None) is not None:  # NOTE [Random draws of run-ahead generators]
        tx.yield_draws.append(tx.output.__dict__.get("random_draws", 0))
        tx.yield_touched.append(len(tx.output.side_effects.touched))  # NOTE [Cells written after a yield]
    tx.push(ConstantValue(None))
    tx.suspended = tx.suspend_at_yield  # NOTE [Generator context managers]


# NOTE [yield from in run-ahead generators]: inside a generator being run to completion (NOTE [Eager
# generators]), `yield from it` is GET_YIELD_FROM_ITER, then a SEND / YIELD_VALUE loop. The delegate is
# turned into its iterator once; SEND passes each item on to YIELD_VALUE (which records it) and, when the
# iterator is exhausted, leaves the delegate's return value (that of a run-ahead generator, else None)
# and jumps past the loop (3.12: to END_SEND, which drops the iterator). Values sent in are always None:
# nothing drives a run-ahead generator with send() or throw().
@op("GET_YIELD_FROM_ITER")
def get_yield_from_iter(tx, inst):
    if tx.yielded is None:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "yield from outside a generator being inlined")
    from ..protocol import iterate
    from ..values import IteratorValue
    from ..values.containers import iterator_over
    source = tx.pop()
    if getattr(source, "frame_eager", False):  # a delegate with finalizers is closed when this generator is
        tx.delegates_finalizers = True  # (NOTE [Handlers the compiler adds] in normalize.py)
    tx.push(source if isinstance(source, IteratorValue) else iterator_over(source, iterate(tx, source)))


@op("SEND", "SEND_THEN_END")
def send(tx, inst):
    from ..values import IteratorValue
    sent, iterator = tx.pop(), tx.peek()
    if not isinstance(iterator, IteratorValue) or not (sent.is_constant() and sent.as_constant() is None):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "send() into a delegated iterator")
    item = iterator.next()
    if item is not None:
        tx.push(item)
        return
    result = getattr(iterator, "return_value", None)
    result = ConstantValue(None) if result is None else result
    if inst.name == "SEND_THEN_END":  # normalize.py: 3.11's SEND drops the iterator itself
        tx.pop()
    tx.push(result)
    tx.jump(inst.arg)


@op("END_SEND")
def end_send(tx, inst):
    result = tx.pop()
    tx.pop()
    tx.push(result)
