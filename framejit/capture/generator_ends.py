"""close() and throw() of generators made in the trace whose bodies have no handlers.

NOTE [Generators ended by close or throw]: `g.close()` and `g.throw(exc)` of a generator made while
tracing were graph breaks (a generator run ahead of its consumer, NOTE [Eager generators], had no such
attributes; a lazy one, NOTE [Generators driven by send], had close() only). For a generator whose own
body has no handler (no try, with or except: normalize.has_handlers) and no `yield from` (which would
pass the exception on to a delegate that may handle it), CPython's answer does not depend on where the
body is suspended: the exception raised at the `yield` (GeneratorExit for close()) leaves the frame at
once, and the generator has ended. So close() ends it and answers None, and throw(exc) ends it and
raises `exc` (a class is instantiated) to the caller, where the trace follows it like any raise; later
steps give StopIteration. A run-ahead generator's remaining items were computed by a body that changed
nothing (NOTE [Eager generators]), so dropping them is unobservable. A run-ahead generator with handlers or a
`yield from` (its handlers would run) is traced again lazily, and a lazy one's close() and throw() raise the
exception at its `yield` (NOTE [Exceptions thrown into suspended generators] in lazy_generators.py). Kept as
graph breaks: one lent to a combinator that already drew its items (NOTE [Lent
iterators]: a break where the combinator was made), a StopIteration thrown into one not ended (PEP 479
turns it into a RuntimeError inside the frame), throw() with more than one argument or of a value not
known while tracing, throw() of a generator that is running.
"""
from __future__ import annotations

from typing import Any

from .breaks import BreakKind, Unsupported, UserException
from .values import ClassValue, ConstantValue, IteratorValue, Value


def _plain_body(code: Any) -> bool:
    from .normalize import has_handlers, normalize
    return not has_handlers(code) and not any(inst.name == "GET_YIELD_FROM_ITER" for inst in normalize(code).insts)


def ends_quietly(gen: Value) -> bool:
    """close() and throw() of `gen` are traced (NOTE [Generators ended by close or throw]; a lazy one's
    handlers: NOTE [Exceptions thrown into suspended generators] in lazy_generators.py)."""
    from .lazy_generators import LazyGeneratorValue
    if isinstance(gen, LazyGeneratorValue):
        return True
    code = getattr(gen, "gen_code", None)
    return isinstance(gen, IteratorValue) and code is not None and _plain_body(code)


def end_method(gen: IteratorValue, name: str) -> Value:
    """`gen.close` or `gen.throw` of an iterator value."""
    from .lazy_generators import LazyGenMethodValue, lazy_from_now
    if ends_quietly(gen):
        return LazyGenMethodValue(gen, name)
    e = Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE, f"attribute {name!r} of {gen.describe()}")
    if getattr(gen, "gen_code", None) is None:
        raise e
    e.root_index = gen.made_at  # a run-ahead generator with handlers: NOTE [Exceptions thrown into suspended
    raise lazy_from_now(e, gen.gen_code)  # generators]: traced again, lazily, where its handlers run


def _end(gen: IteratorValue) -> None:
    from .lazy_generators import LazyGeneratorValue
    if gen.lent_at is not None:  # drawn by a combinator made earlier (zip, map, enumerate): NOTE [Lent iterators]
        from .values.containers import lent_error
        raise lent_error(gen)
    if isinstance(gen, LazyGeneratorValue):
        gen.finished = gen.done = gen.exhausted = True
    else:
        if not gen.exhausted:  # NOTE [Random draws of run-ahead generators]: eager drew `index` items, not all
            gen.ended_at = gen.index  # (review revA2 HIGH-1: a run ahead drawing random numbers closed early)
        gen.index, gen.exhausted = len(gen.items), True


def close_generator(gen: IteratorValue) -> Value:
    from .lazy_generators import LazyGeneratorValue
    if isinstance(gen, LazyGeneratorValue):
        if gen.lent_at is not None:
            from .values.containers import lent_error
            raise lent_error(gen)
        return gen.close()
    _end(gen)
    return ConstantValue(None)


def _probe():
    yield


def thrown_exception(value: Value) -> tuple[BaseException, bool]:
    """The exception `throw(value)` raises, and whether it is raised inside the generator (False: CPython's
    TypeError for a value that is no exception, raised before the generator is resumed)."""
    from .calls import builtin_made
    obj = value.obj if isinstance(value, ClassValue) else value.as_constant() if value.is_constant() else None
    if isinstance(obj, BaseException):
        return obj, True
    if isinstance(obj, type) and issubclass(obj, BaseException):
        if builtin_made(obj):
            return obj(), True
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"throw() of {obj.__qualname__}, whose instances run code")
    if obj is None and not value.is_constant():
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"throw() of {value.describe()}")
    try:
        _probe().throw(obj)  # CPython's own TypeError for a value that is no exception
    except TypeError as e:
        return e, False
    raise Unsupported(BreakKind.INTERNAL_ERROR, f"throw() of {obj!r} raised no TypeError")


def throw_into(tx, gen: IteratorValue, args: list[Value], kwargs: dict[str, Value]) -> Value:
    from .lazy_generators import LazyGeneratorValue
    if kwargs or len(args) != 1:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "throw() with other than one argument")
    exc, inside = thrown_exception(args[0])
    if not inside:
        raise UserException(exc)  # the generator is not resumed and goes on
    lazy = isinstance(gen, LazyGeneratorValue)
    if lazy and gen.started and not gen.frame.suspended and not gen.finished:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"throw() of the running {gen.describe()}")
    ended = gen.finished if lazy else gen.exhausted
    if isinstance(exc, StopIteration) and not ended:
        raise Unsupported(BreakKind.EXCEPTION_RAISED, "StopIteration thrown into a generator (PEP 479)")
    if lazy:
        if gen.lent_at is not None:
            from .values.containers import lent_error
            raise lent_error(gen)
        return gen.throw(exc)  # NOTE [Exceptions thrown into suspended generators] in lazy_generators.py
    _end(gen)
    raise UserException(exc)



# NOTE [Return values of generators run ahead]: a generator run ahead in the trace (translator.py) is an
# IteratorValue over its items with `return_value` what its body returned. The next() (or `it.__next__()`)
# that ends it raises StopIteration(return value), as CPython's generator does: `except StopIteration as e`
# sees e.value and e.args (before: always a bare StopIteration(), so e.value was None). Only that first stop
# carries it; a later next() of the finished generator raises a bare StopIteration, as CPython's. An
# exception is a constant (NOTE [Exceptions made while tracing]), so a return value that is not one (a
# tensor) is a graph break where the generator was made, which then runs as Python (traced again lazily).
def stop_iteration(it: IteratorValue, ended_now: bool) -> StopIteration:
    returned = getattr(it, "return_value", None) if ended_now and it.ended_at is None else None
    if returned is None or returned.is_constant() and returned.as_constant() is None:
        return StopIteration()
    if not returned.is_constant():
        e = Unsupported(BreakKind.UNSUPPORTED_VALUE, f"a generator returns {returned.describe()} to next(): "
                        "it runs as Python")
        e.root_index = it.made_at
        e.retry_lazy = it.gen_code
        raise e
    return StopIteration(returned.as_constant())


# NOTE [Names of generator methods]: `g.close.__name__` is 'close' and its `__qualname__` 'generator.close' (as for
# send, throw, __next__); unittest's assertRaises(exc, g.close) reads the callable's __name__ for its message, which
# was a break (PyTorch's test_generator.py test_error_during_close_propagates, test_throw_on_just_opened_generator).
# Its `__doc__`, `__module__` (None) and `__text_signature__` are those of a real generator's method (revAQ LOW-1:
# `g.close.__doc__` ran the frame eagerly).
def method_value_attr(obj: Value, name: str) -> Value:
    """An attribute of a method of a generator made in the trace; other values' attributes are a break."""
    from .lazy_generators import LazyGenMethodValue
    if isinstance(obj, LazyGenMethodValue) and name in ("__name__", "__qualname__"):
        return ConstantValue(obj.name if name == "__name__" else f"generator.{obj.name}")
    real = getattr(_SAMPLE, getattr(obj, "name", ""), None)
    if isinstance(obj, LazyGenMethodValue) and name in _READ_AS_REAL and real is not None and hasattr(real, name):
        return ConstantValue(getattr(real, name))
    raise Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE, f"attribute {name!r} of {obj.describe()}")


def _sample():
    yield


_SAMPLE = _sample()  # a real generator, never started, whose methods' constant attributes are read
_READ_AS_REAL = ("__doc__", "__module__", "__text_signature__")


__all__ = ["close_generator", "end_method", "ends_quietly", "method_value_attr", "stop_iteration", "thrown_exception",
           "throw_into"]
