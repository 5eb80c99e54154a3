"""Context managers from `contextlib`: `@contextmanager` generators and `nullcontext`, traced.

NOTE [Generator context managers]: `contextlib.contextmanager(func)` made or called inside the compiled
region stands for a factory (a partial of `make_generator_cm`, which is what contextlib's `helper`
does); calling it gives a GenCtxValue holding `func` and its arguments, nothing run yet (creating the
generator runs none of its code). `with cm:` (or `cm.__enter__()`) starts a translator for `func` that
stops at its first `yield` (Translator.suspend_at_yield) and binds the yielded value; the normal exit
(`__exit__(None, None, None)`) resumes that translator with None until the generator returns, so its
`finally:` code is traced in order with the block. A second `yield` raises contextlib's RuntimeError.
An exception leaving the block is not modelled: the frame breaks before the manager is entered
(NOTE [Exceptions in generator context manager blocks]). A suspended generator cannot
be rebuilt in Python, so a graph break while such a manager is live (inside the generator, in the
block, or anywhere before its exit) moves to the root frame's instruction that entered the manager
(NOTE [Generator managers live from their entry]): the trace stops there, that instruction runs as plain
Python and enters the real manager, and the resume function goes on from it (break_before_generator_cms).

NOTE [Generator context managers from outside]: `with cm:` over a `contextlib._GeneratorContextManager`
that came from outside (an argument, a global, an attribute: it has a Source) and was never entered (its
generator has not started: `inspect.getgeneratorstate(cm.gen) == 'GEN_CREATED'`, guarded) is traced as
if it were made here from `cm.func`, `cm.args` and `cm.kwds` (the values contextlib's `__init__` made the
generator from; read through their sources and guarded like any input). Creating a generator runs none
of its code, so tracing a fresh one from its start is what running `cm.gen` would do. What eager leaves
behind on the object is replayed after the graph by `finish_outside_generator_cm` (NOTE [Finishing
calls] in side_effects.py): `__enter__` deleted `args`, `kwds` and `func`, and the generator ended
(closing a generator that never started runs none of its code and leaves it in the state an exhausted
one is in). The `with` statement adopts it, and so does a bare `cm.__enter__()` (then `cm.__exit__(None,
None, None)` resumes the traced generator, as for a manager made here; call_outside_cm_method): a break
while it is live moves before the instruction that adopted it, as for managers made here, and a frame
that returns with it still entered breaks there too (NOTE [Generator managers entered and not exited]),
so an outside manager left entered for the caller to exit is entered by plain Python, for real. Until
the graph's effects are replayed the real object still holds `args`/`kwds`/`func` and an unstarted
generator, so reading any other attribute of an adopted manager is a graph break (attributes.py).

NOTE [Generator managers entered and not exited]: a manager entered with a bare `cm.__enter__()` and not
exited when the root frame returns leaves its generator suspended at its `yield`: eager code may exit it
later (an outside manager, or one the frame returns or stores), or the generator is collected when the
last reference goes and its `finally:` runs then. A traced generator cannot be handed back suspended, so
the return is a graph break moved before the root instruction that made (or adopted) the manager, as a
break while it is live is (break_before_generator_cms): plain Python makes and enters the real manager.

`contextlib.nullcontext(x)` is an instance of that class made directly (its `__init__` only stores
`enter_result`), so its `__enter__`/`__exit__` are inlined like any user context manager's and it is
rebuilt like any object made while tracing, also across a graph break inside its block.

NOTE [Context managers as decorators]: `torch.no_grad()(f)`, `@torch.enable_grad()`, `torch.no_grad(f)`
and `@torch.set_grad_enabled(b)` inside the region give a partial of `call_in_ctx`, which runs `f` in a
clone of the manager, as torch's `context_decorator` does; `set_grad_enabled` first restores the mode its
construction changed, as its `__call__` does. A generator function is not wrapped here (torch wraps it
differently): that is a graph break. A `@contextmanager` manager made here and called on a function
(`@cm(args)` over a nested def) gives a partial of `call_in_generator_cm`, which makes a fresh manager from
the same func/args/kwds around each call, as contextlib's `ContextDecorator.__call__` does with
`_recreate_cm()` (the manager that decorated is never entered itself).
"""
from __future__ import annotations

import contextlib

import torch.autograd.grad_mode as grad_mode

from .breaks import BreakKind, Unsupported, UserException
from .module_hooks import TRACE_TIME
from .sources import ItemSource
from .values import ConstantValue, NewObjectValue, PartialValue, TupleValue, UserFunctionValue, Value


def call_in_ctx(ctx, fn, /, *args, **kwargs):
    """What a torch context manager used as a decorator runs (NOTE [Context managers as decorators])."""
    with ctx.clone():
        return fn(*args, **kwargs)


def call_in_generator_cm(func, args, kwds, fn, /, *call_args, **call_kwargs):
    """What a `@contextmanager` manager used as a decorator runs (NOTE [Context managers as decorators])."""
    with contextlib._GeneratorContextManager(func, args, kwds):
        return fn(*call_args, **call_kwargs)


def decorate_with_generator_cm(tx, ctx: "GenCtxValue", args: list[Value], kwargs: dict[str, Value]) -> Value:
    """`cm(fn)` for a generator context manager value `cm` made here."""
    from .values import DictValue
    fn = args[0] if len(args) == 1 and not kwargs else None
    if not isinstance(fn, UserFunctionValue):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"call of {ctx.describe()}")
    return PartialValue(UserFunctionValue(call_in_generator_cm),
                        [ctx.func, TupleValue(list(ctx.args)), DictValue(dict(ctx.kwargs)), fn], {})


def decorate_with_ctx(tx, ctx: Value, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """`ctx(fn)` for a torch grad-mode context manager value `ctx`."""
    import inspect
    fn = args[0] if len(args) == 1 and not kwargs else None
    if not isinstance(fn, UserFunctionValue) or fn.fn.__code__.co_flags & (inspect.CO_GENERATOR | inspect.CO_COROUTINE):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"call of {ctx.describe()}")
    if hasattr(ctx, "mode_before_init"):  # set_grad_enabled.__call__ undoes what its construction did
        tx.output.set_grad_enabled(ctx.mode_before_init)
    return PartialValue(UserFunctionValue(call_in_ctx), [ctx, fn], {})


def make_generator_cm(func, *args, **kwds):
    """What `contextlib.contextmanager(func)(*args, **kwds)` returns (contextlib's `helper`)."""
    return contextlib._GeneratorContextManager(func, args, kwds)


class GenCtxValue(Value):
    """A `contextlib._GeneratorContextManager` made while tracing (NOTE [Generator context managers])."""

    def __init__(self, func: Value, args: list[Value], kwargs: dict[str, Value], root_index: int | None) -> None:
        self.func = func
        self.args = args
        self.kwargs = kwargs
        self.frame = None  # the generator's translator once entered
        self.done = False
        self.root_index = root_index  # the root frame's instruction that made it

    def python_type(self) -> type:
        return contextlib._GeneratorContextManager

    def describe(self) -> str:
        return f"GeneratorContextManager({self.func.describe()})"


class GenMethodValue(Value):
    """`cm.__enter__` or `cm.__exit__` of a GenCtxValue (BEFORE_WITH pushes the `__exit__` one)."""

    def __init__(self, ctx: GenCtxValue, name: str) -> None:
        self.ctx = ctx
        self.name = name

    def describe(self) -> str:
        return f"{self.name} of {self.ctx.describe()}"


def contextmanager_factory(tx, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """`contextlib.contextmanager(func)` inside the compiled region."""
    if len(args) != 1 or kwargs:
        raise UserException(TypeError("contextmanager() takes exactly one argument"))
    return PartialValue(UserFunctionValue(make_generator_cm), [args[0]], {})


def new_generator_cm(tx, args: list[Value]) -> GenCtxValue:
    """`_GeneratorContextManager(func, args, kwds)` (called by make_generator_cm or contextlib's helper)."""
    func, pos, kw = args
    if not isinstance(pos, TupleValue) or not hasattr(kw, "items") or not isinstance(kw.items, dict):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "a _GeneratorContextManager of unknown arguments")
    return generator_cm(tx, func, list(pos.items), dict(kw.items))


def generator_cm(tx, func: Value, args: list[Value], kwargs: dict[str, Value]) -> GenCtxValue:
    """A GenCtxValue for the generator function `func` called with `args` and `kwargs`."""
    root = tx.output.tx_stack[0] if tx.output.tx_stack else None
    ctx = GenCtxValue(func, args, kwargs, root.current.index if root and root.current else None)
    tx.output.__dict__.setdefault("live_generator_cms", []).append(ctx)
    return ctx


def break_before_generator_cms(out, index: int | None) -> int | None:
    """Where the root frame breaks for an Unsupported at `index`: before the first generator context
    manager still live (entered, not exited) then, if it was entered earlier (NOTE [Generator context
    managers]); a lazy generator, before the instruction that made it."""
    live = [c.root_index for c in [*out.__dict__.get("live_generator_cms", ()),  # NOTE [Generators driven by
                                   *out.__dict__.get("live_lazy_generators", ())]  # send] in lazy_generators.py
            if _live_at(c, index) and c.root_index is not None and not _unentered_gen_cm(c)]
    return min([index, *live]) if index is not None and live else index


# NOTE [Traced exits re-run after a break]: the exit of a torch manager entered by call (EnteredByCall) is
# traced, then a break or an exception is taken at or before the root instruction that ran it (the with-exit of
# an ExitStack whose next callback breaks, a user manager's __exit__ that prints after it, a finally given up
# when its exception leaves the frame): plain Python runs that root instruction again, so it runs the exit
# again, on the manager codegen rebuilds (a fresh no_grad() whose prev is False, an autocast without prev) and
# leaves grad mode or autocast wrong. Such a manager counts as live for breaks at or before `exit_root_index`,
# so the break moves before the root instruction that entered it, where Python enters the real one.
def _live_at(c, index: int | None) -> bool:
    if not c.done:
        return True
    exited_at = getattr(c, "exit_root_index", None)
    return exited_at is not None and (index is None or index <= exited_at)


def exception_in_generator_cms(out, exc: UserException) -> Unsupported | None:
    """NOTE [Exceptions in generator context manager blocks]: an exception raised while a generator
    context manager made (or adopted) by the trace is live (in its block, in its generator, or between
    its entry and its exit) would reach that generator's `except`/`finally` through `__exit__`, which
    the trace does not model. Rather than running the whole frame eagerly (still so with fullgraph=True,
    where the user's exception must be raised, not a graph break), the frame breaks before the
    root instruction that entered the manager (as for a graph break there, break_before_generator_cms): the
    code before it stays captured, and plain Python enters the real manager and raises the exception where
    the real generator handles it. None when no such manager is live (the exception is the frame's)."""
    index = exc.root_index
    moved = break_before_generator_cms(out, index)
    if moved is None or moved == index:
        return None
    e = Unsupported(BreakKind.EXCEPTION_RAISED, f"{type(exc.exc).__name__} raised while a generator context "
                    "manager is live: it is handled as Python", exc.user_stack)
    e.root_index = moved
    return e


# NOTE [Generator managers live from their entry]: a manager made here and not entered yet has run none of its
# generator's code, and codegen rebuilds it as `_GeneratorContextManager(func, args, kwds)` (made once: NOTE
# [One object per value]). So a break moves before the root instruction that *enters* it, not the one that
# made it: `with cm(x):` breaks at its BEFORE_WITH (NOTE [Breaks at BEFORE_WITH]), and
# `stack.enter_context(cm(x))` at the enter_context call, where nothing of the call that made it is left on
# the stack (a break at the inner call inside an ExitStack block ran the rest of the frame as Python).
def _unentered_gen_cm(c) -> bool:
    return isinstance(c, GenCtxValue) and c.frame is None


def gen_enter(tx, ctx: GenCtxValue) -> Value:
    if ctx.frame is not None:
        raise UserException(AttributeError("'_GeneratorContextManager' object has no attribute 'args'"))
    if not isinstance(ctx.func, UserFunctionValue):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"a context manager over {ctx.func.describe()}")
    root = tx.output.tx_stack[0] if tx.output.tx_stack else None
    ctx.root_index = root.current.index if root and root.current else None  # NOTE [Generator managers live
    # from their entry]
    frame = tx.child_frame(ctx.func, ctx.args, ctx.kwargs)
    frame.yielded, frame.suspend_at_yield = [], True
    ctx.frame = frame
    frame.run()
    if not frame.suspended:
        ctx.done = True
        raise UserException(RuntimeError("generator didn't yield"))
    return frame.yielded[-1]


def gen_exit(tx, ctx: GenCtxValue, args: list[Value]) -> Value:
    if ctx.frame is None or ctx.done:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "__exit__ of a generator context manager not entered")
    if len(args) == 3 and exit_traced(tx, ctx, args[1]):
        return _exit_with_exception(tx, ctx, args[1])
    if not all(a.is_constant() and a.as_constant() is None for a in args) or len(args) != 3:
        raise Unsupported(BreakKind.EXCEPTION_RAISED, "an exception leaving a generator context manager")
    frame = ctx.frame
    frame.suspended = False
    frame.run()
    ctx.done = True
    if frame.suspended:
        raise UserException(RuntimeError("generator didn't stop"))
    return ConstantValue(False)  # NOTE: a manager exited is no longer live (break_before_generator_cms)


# NOTE [Exceptions leaving generator context manager blocks]: an exception raised in the block of a `@contextmanager`
# manager made or adopted here reaches contextlib's `__exit__(type, value, tb)`, which throws `value` into the
# generator at its `yield` and answers from what the generator does: it returns (the exception suppressed: True),
# the same exception leaves it (False: the with-block re-raises it), another one leaves it (raised out of
# `__exit__`, with `value` as its context: NOTE [New exceptions leaving callees' handlers]). This was a break before
# the manager's entry (NOTE [Exceptions in generator context manager blocks]), and in an inlined callee a break at
# the call into it (fullgraph: Unsupported). The trace follows the with-block's handler (caught_exceptions.
# traced_exit) and throws the handled exception into the suspended generator frame as a lazy generator's throw()
# does (NOTE [Exceptions thrown into suspended generators]); the generator's handler gets the with-block's own
# CaughtException (`caught_as`: one object, as eager's, whose origin is restored after), so `except E as e` in the
# generator and the new exception's `__context__` are the block's exception. Kept as breaks: a generator suspended
# in a `yield from`, a handler of the generator the trace cannot follow, a StopIteration (PEP 479), a generator
# that yields again ("generator didn't stop after throw()"), an `__exit__` called by hand with another exception.
# An exception leaving the generator frame past a handler the trace did not follow (`callee_break`: its `finally`
# would have run, hhuntG3 HIGH-0) or a StopIteration the generator raises (a RuntimeError in eager, PEP 479; revX
# H1) is a break before the manager's entry too: the block's exception reaches the real generator there.
def exit_followed(ctx: GenCtxValue, exc: BaseException | None) -> bool:
    """The with-block of the entered `ctx` may follow `exc` into its `__exit__` (caught_exceptions.traced_exit):
    otherwise it leaves the block as before (NOTE [Exceptions in generator context manager blocks])."""
    from .lazy_generators import delegating
    frame = ctx.frame
    return frame is not None and not ctx.done and frame.suspended and not delegating(frame) and \
        not isinstance(exc, StopIteration)


def exit_traced(tx, ctx: GenCtxValue, value: Value) -> bool:
    """`__exit__(type, value, tb)` of the entered `ctx` for the exception its with-block handles."""
    handled = tx.handling[-1].caught if tx.handling else None
    return handled is not None and value is handled and exit_followed(ctx, value.value)


def _exit_with_exception(tx, ctx: GenCtxValue, value: Value) -> Value:
    from .caught_exceptions import caught_in_frame, follow_handler
    from .lazy_generators import thrown_error
    frame, exc = ctx.frame, value.value
    root = tx.output.tx_stack[0] if tx.output.tx_stack else None  # NOTE [Traced exits re-run after a break]: the
    ctx.exit_root_index = root.current.index if root and root.current else None  # block's raise breaks before entry
    raised = thrown_error(exc)
    raised.thrown_in, raised.caught_as = True, value
    saved = getattr(value, "origin", None), getattr(value, "origin_tx", None)
    frame.suspended, frame.thrown = False, exc
    try:
        if not follow_handler(frame, frame.current, raised):
            if caught_in_frame(frame.program.insts, frame.current):
                raise Unsupported(BreakKind.EXCEPTION_RAISED, f"{type(exc).__name__} thrown into the generator of "
                                  f"{ctx.describe()} reaches a handler the trace cannot follow")
            ctx.done = True
            return ConstantValue(False)
        try:
            frame.run()
        except UserException as out:
            if getattr(out, "callee_break", None) is not None or isinstance(out.exc, StopIteration):
                raise Unsupported(BreakKind.EXCEPTION_RAISED, f"{type(out.exc).__name__} leaves the generator of "
                                  f"{ctx.describe()} from a handler the trace did not follow") from None
            ctx.done = True
            if out.exc is exc:
                return ConstantValue(False)
            raise
    finally:
        frame.thrown = None
        value.origin, value.origin_tx = saved
    if frame.suspended:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"the generator of {ctx.describe()} yields again after throw()")
    ctx.done = True
    return ConstantValue(True)


def call_gen_method(tx, method: GenMethodValue, args: list[Value], kwargs: dict[str, Value]) -> Value:
    if kwargs:
        raise UserException(TypeError(f"{method.name}() takes no keyword arguments"))
    if method.name == "__enter__":
        return gen_enter(tx, method.ctx)
    return gen_exit(tx, method.ctx, args)


def gen_attr(ctx: GenCtxValue, name: str) -> Value:
    if name in ("__enter__", "__exit__"):
        return GenMethodValue(ctx, name)
    raise Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE, f"attribute {name!r} of a generator context manager")


def check_no_entered_generator_cms(out) -> None:
    """At the root frame's return: NOTE [Generator managers entered and not exited]."""
    entered = [c for c in out.__dict__.get("live_generator_cms", ()) if c.frame is not None and not c.done]
    if entered:
        e = Unsupported(BreakKind.UNSUPPORTED_CALL, f"{entered[0].describe()} is still entered when the frame "
                        "returns: its generator stays suspended at its yield, which only plain Python can leave")
        if any(c.root_index is None for c in entered):  # nowhere to move the break to
            e.frame_eager = True
        raise e


OUTSIDE_CM_METHODS = (contextlib._GeneratorContextManager.__enter__, contextlib._GeneratorContextManager.__exit__)


def call_cm_method(tx, name: str, value: Value, args: list[Value], kwargs: dict[str, Value]) -> Value | None:
    """`_GeneratorContextManager.__enter__`/`__exit__` called with `value` as self: bound (`cm.__enter__()`
    on an outside manager) or as the class's plain function (`ExitStack.enter_context` calls
    `type(cm).__enter__(cm)` and registers `MethodType(type(cm).__exit__, cm)`). A manager made here is
    entered or exited as `with` does; an outside one as call_outside_cm_method does; None where
    contextlib's method is inlined as before."""
    if isinstance(value, GenCtxValue):
        return call_gen_method(tx, GenMethodValue(value, name), args, kwargs)
    return call_outside_cm_method(tx, name, value, args, kwargs)


class EnteredByCall:
    """A torch grad-mode manager entered by a call of its class's `__enter__` (NOTE [Torch managers entered
    by call]); kept in `live_generator_cms` with the same fields a GenCtxValue has there."""

    def __init__(self, ctx: Value, exit_value: Value, root_index: int | None) -> None:
        self.ctx, self.exit_value, self.root_index = ctx, exit_value, root_index
        self.frame, self.done = exit_value, False  # entered (check_no_entered_generator_cms)
        self.exit_root_index: int | None = None  # NOTE [Traced exits re-run after a break]

    def describe(self) -> str:
        return f"{self.ctx.describe()} entered by a call"


# NOTE [Torch managers entered by call]: `ExitStack.enter_context(torch.no_grad())` calls
# `type(cm).__enter__(cm)` and later `MethodType(type(cm).__exit__, cm)(None, None, None)`. For a torch state
# manager (CtxValue of kind 'grad': no_grad, enable_grad, set_grad_enabled; 'autocast'; 'inference') these do
# what a with-block's entry and normal exit do (context.enter / exit_); the state saved at entry lives only in
# the trace, so while the manager is entered it is live like a generator context manager: a graph break, an
# exception, or the frame returning with it still entered moves before the root instruction that entered it
# (break_before_generator_cms), where plain Python enters the real manager. An autocast or inference-mode
# exit is traced only when no block entered after it is still open (`_innermost`: their exits restore what
# their entries saved), otherwise it is a break. A frame's own `ng.__enter__()` and `ng.__exit__(None, None,
# None)` on a manager it made are the same calls (context.ctx_method); a manager made here and rebuilt at a
# break is one object (NOTE [One object per value] in codegen.py), so the `__enter__` run as Python and the
# `__exit__` in the resume function act on one manager and its `prev`.
def call_torch_ctx_method(tx, name: str, ctx: Value, args: list[Value], kwargs: dict[str, Value]) -> Value | None:
    from .context import enter, exit_
    if getattr(ctx, "kind", None) not in ("grad", "autocast", "inference") or kwargs:
        return None
    live = tx.output.__dict__.setdefault("live_generator_cms", [])
    if name == "__enter__" and not args:
        if ctx.kind == "inference" and any(n.target is grad_mode._enter_inference_mode
                                           for n in tx.output.open_regions):
            e = Unsupported(BreakKind.UNSUPPORTED_CALL, f"__enter__ of {ctx.describe()} called inside an "
                            "inference-mode block: it is run as Python")  # NOTE [Inference managers entered
            e.frame_eager = True  # by call in inference blocks]
            raise e
        exit_value, entered = enter(tx, ctx)
        root = tx.output.tx_stack[0] if tx.output.tx_stack else None
        live.append(EnteredByCall(ctx, exit_value, root.current.index if root and root.current else None))
        return ctx if ctx.kind == "autocast" else entered  # autocast.__enter__ returns the manager
    pending = [e for e in live if isinstance(e, EnteredByCall) and not e.done]
    if name != "__exit__" or not pending or pending[-1].ctx is not ctx or len(args) != 3 or \
            not all(a.is_constant() and a.as_constant() is None for a in args) or not _innermost(tx, pending[-1]):
        e = Unsupported(BreakKind.UNSUPPORTED_CALL, f"{name} of {ctx.describe()} called out of with-block order")
        e.frame_eager = ctx.kind != "grad" and bool(tx.output.open_regions)  # a block re-entered around the
        raise e  # exit at a break would undo it (NOTE [Exits of outside managers] in context.py)
    exit_(tx, pending[-1].exit_value)
    pending[-1].done = True
    root = tx.output.tx_stack[0] if tx.output.tx_stack else None
    pending[-1].exit_root_index = root.current.index if root and root.current else None
    return ConstantValue(False if ctx.kind == "autocast" else None)


# NOTE [Inference managers entered by call in inference blocks]: `m = torch.inference_mode(False);
# m.__enter__()` inside `with torch.inference_mode():` followed by a graph break: the break moves before the
# `__enter__` (the manager is live), and that step runs as Python inside the re-entered inference block, whose
# exit (and the resume function's re-entry) undo it, so the tensors made after it were inference tensors
# where eager's are not (review revC HIGH-5). Nothing keeps such a step's inference-mode change for the rest
# of the block (NOTE [Autocast changed by a step in blocks] does it for autocast only), so the frame runs
# eagerly: eager's results.
def _innermost(tx, entered: EnteredByCall) -> bool:
    """An autocast or inference-mode manager entered by call is exited only while no block entered after it
    is still open (their exits restore the state their entries saved: NOTE [Torch managers entered by call])."""
    saved = entered.exit_value.saved
    node = saved if entered.ctx.kind == "autocast" else saved[1] if entered.ctx.kind == "inference" else None
    return node is None or bool(tx.output.open_regions) and tx.output.open_regions[-1] is node


def call_outside_cm_method(tx, name: str, value: Value, args: list[Value], kwargs: dict[str, Value]) -> Value | None:
    """`cm.__enter__()` / `cm.__exit__(...)` on an outside generator context manager: the first adopts it
    and enters the traced generator, the second exits a manager adopted in this trace (NOTE [Generator
    context managers from outside]); None where contextlib's method is inlined as before."""
    from .values import ObjectValue
    if type(value) is not ObjectValue:
        return None
    ctx = tx.output.__dict__.get("adopted_generator_cms", {}).get(id(value.obj))
    if ctx is None and name == "__enter__":
        ctx = adopt_outside_generator_cm(tx, value)
    if ctx is None:
        return None
    return call_gen_method(tx, GenMethodValue(ctx, name), args, kwargs)


def finish_outside_generator_cm(cm) -> None:
    """What entering and leaving `cm` left on it (NOTE [Generator context managers from outside])."""
    del cm.args, cm.kwds, cm.func
    cm.gen.close()


def adopt_outside_generator_cm(tx, value: Value) -> GenCtxValue | None:
    """The GenCtxValue `with value:` traces, for an outside generator context manager never entered
    (NOTE [Generator context managers from outside]); None for any other value."""
    import inspect

    from .sources import AttrSource
    from .values import ObjectValue
    from .values.builder import wrap
    if type(value) is not ObjectValue or value.source is None or \
            type(value.obj) is not contextlib._GeneratorContextManager:
        return None
    out, cm = tx.output, value.obj
    adopted = out.__dict__.setdefault("adopted_generator_cms", {})
    if id(cm) in adopted:  # a second `with` over it: eager's __enter__ finds `args` gone
        raise UserException(AttributeError("'_GeneratorContextManager' object has no attribute 'args'"))
    gen = getattr(cm, "gen", None)
    if not inspect.isgenerator(gen) or inspect.getgeneratorstate(gen) != inspect.GEN_CREATED or \
            not all(hasattr(cm, name) for name in ("func", "args", "kwds")) or \
            type(cm.args) is not tuple or type(cm.kwds) is not dict:
        return None
    gen_source = AttrSource(value.source, "gen")
    state = out.name_of(inspect.getgeneratorstate, "getgeneratorstate")
    out.add_guard("GENERATOR_STATE", f"{state}({gen_source.expr(out.names)}) == 'GEN_CREATED'", gen_source,
                  expected="a generator not started", actual=f"{state}({gen_source.expr(out.names)})")
    func = wrap(out, cm.func, AttrSource(value.source, "func"))
    args = [wrap(out, a, ItemSource(AttrSource(value.source, "args"), i)) for i, a in enumerate(cm.args)]
    kwds_source = AttrSource(value.source, "kwds")
    out.add_guard("DICT_KEYS", f"___len({kwds_source.expr(out.names)}) == {len(cm.kwds)}", kwds_source)
    kwargs = {k: wrap(out, v, ItemSource(kwds_source, k)) for k, v in cm.kwds.items() if type(k) is str}
    if len(kwargs) != len(cm.kwds):
        return None
    out.add_guard("LEN_MATCH", f"___len({AttrSource(value.source, 'args').expr(out.names)}) == {len(cm.args)}",
                  AttrSource(value.source, "args"))
    ctx = generator_cm(tx, func, args, kwargs)
    adopted[id(cm)] = ctx
    out.side_effects.record_finishing_call(finish_outside_generator_cm, [value])
    return ctx


def new_nullcontext(args: list[Value], kwargs: dict[str, Value]) -> NewObjectValue:
    if len(args) + len(kwargs) > 1 or kwargs.keys() - {"enter_result"}:
        raise UserException(TypeError("nullcontext() takes at most one argument"))
    obj = NewObjectValue(contextlib.nullcontext)
    obj.attrs["enter_result"] = args[0] if args else kwargs.get("enter_result", ConstantValue(None))
    return obj


TRACE_TIME[contextlib.contextmanager] = contextmanager_factory


__all__ = ["OUTSIDE_CM_METHODS", "EnteredByCall", "adopt_outside_generator_cm", "call_cm_method", "call_torch_ctx_method", "call_outside_cm_method", "check_no_entered_generator_cms", "call_in_generator_cm", "decorate_with_generator_cm", "finish_outside_generator_cm", "GenCtxValue", "GenMethodValue", "break_before_generator_cms", "exception_in_generator_cms", "call_gen_method", "call_in_ctx", "contextmanager_factory",
           "decorate_with_ctx", "gen_attr", "generator_cm",
           "gen_enter", "make_generator_cm", "new_generator_cm", "new_nullcontext"]
