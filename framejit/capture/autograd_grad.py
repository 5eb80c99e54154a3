"""`MyFunction.apply(...)` with grad mode on: the forward traced, the user's backward kept.

See NOTE [Custom autograd functions in the graph] (function_regions.py) for what the graph holds. Here the
apply is traced: the class's `forward` (and `setup_context`) inlined under grad mode off with a `GradCtx`
that records what a ctx records, then the user's backward inlined once as a probe (grad mode off, zero
output gradients, a ctx holding what the forward stored) so that its reads are guarded and anything it
cannot trace is a graph break; its nodes are dropped when the GraphModule is built. The lookups of
`apply`, `forward`, `setup_context`, `backward` and `vjp` on the class are guarded (identity of each entry).

Arguments other than tensors (a float that changes per call, a list or tuple of tensors, a module, a
dataclass) are values the forward reads: autograd gives them no gradient, and CustomCall's backward
checks the user's backward returns None for them, as eager does.

NOTE [Keyword arguments of apply]: eager's `Function.apply(*args, **kwargs)` turns keywords into
positional inputs (they count in needs_input_grad and need a gradient slot). In the ctx style the C apply
places each keyword at its parameter's position and calls `forward(ctx, *inputs)` (the forward's defaults
then apply as Python applies them; a gap before a keyword raises "missing required argument"); with
`setup_context`, apply first binds `inspect.signature(forward)` and applies the defaults, so a defaulted
parameter is an input that setup_context sees in `inputs`. `_bind` does the same on the traced values
(the defaults read through the forward's guarded `__defaults__`); what eager rejects is a graph break.

Graph breaks (the apply then runs in Python at the break, as eager): keywords eager rejects, or any for a
forward with *, ** or keyword-only parameters; `mark_dirty`; any apply inside a forward-AD dual level; a forward or backward that changes state
outside (or cannot be traced); a forward returning anything but a tensor or a tuple of tensors and
constants; ctx attributes other than constants, tensors, symbolic ints and tuples of them; no backward.
"""
from __future__ import annotations

import inspect

import torch
from torch.autograd.function import BackwardCFunction, Function, _SingleLevelFunction

from . import lookup
from .breaks import BreakKind, Unsupported, UserException
from .function_regions import Boundary, Plan, next_region, user_backward, with_constant_outputs
from .graph_calls import _version
from .values import ConstantValue, NewObjectValue, SymNodeValue, TensorValue, TupleValue, UserFunctionValue
from .values.scalars import SymFloatValue

_CTX_STATE = ("saved_tensors", "needs_input_grad", "fj_non_differentiable", "fj_materialize_grads", "fj_dirty")
_RESERVED = frozenset(dir(BackwardCFunction))  # the real ctx's own attributes (materialize_grads, to_save, ...)


class GradCtx:
    """The `ctx` a forward traced with grad on sees (never built at run time)."""

    def save_for_backward(self, *tensors):
        self.saved_tensors = tensors

    def mark_non_differentiable(self, *tensors):
        self.fj_non_differentiable = self.fj_non_differentiable + tensors

    def set_materialize_grads(self, value):
        self.fj_materialize_grads = value

    def mark_dirty(self, *tensors):
        self.fj_dirty = self.fj_dirty + tensors  # NOTE [Inputs marked dirty]

    def save_for_forward(self, *tensors):
        pass  # only the jvp reads them, and an apply is traced only with no dual level open (NOTE [Custom
        # Functions under forward-mode AD] in autograd_function.py)


class ProbeCtx:
    """The `ctx` the traced backward probe sees: attributes only."""


def _break(cls: type, why: str):
    return Unsupported(BreakKind.UNSUPPORTED_CALL, f"{cls.__name__}.apply with grad mode on: {why}")


def _static(tx, cls: type, name: str):
    """`cls.name` as the function a staticmethod entry holds; its lookup guarded."""
    index, attr = lookup.mro_lookup(cls, name)
    lookup.guard_lookup(tx.output, cls, name)
    if not isinstance(attr, staticmethod) or not hasattr(attr.__func__, "__code__"):
        raise _break(cls, f"{name} is not a Python staticmethod")
    return UserFunctionValue(attr.__func__)


class _Effects:
    """What code run between two points changed outside itself: state the replay would write (stores,
    container ops, finishing calls), or a tensor that existed before, written in place (an input, an
    earlier value; `before` holds the graph's nodes then). In-place ops on tensors the code made are fine:
    they are part of the forward, and run again with it."""

    def __init__(self, out, before: set) -> None:
        self.out = out
        se = out.side_effects
        self.start = (se.version - se.tensor_writes, len(se.ops), len(se.finishing_calls))
        self.writes = sum(entry.writes for entry in out.inputs)
        self.versions = [(val, _version(val)) for val in (n.meta.get("val") for n in before)
                         if isinstance(val, torch.Tensor)]

    def changed(self, dirty: tuple = ()) -> bool:
        """Something outside changed, other than the tensors in `dirty` themselves (NOTE [Inputs marked dirty])."""
        se = self.out.side_effects
        return ((se.version - se.tensor_writes, len(se.ops), len(se.finishing_calls)) != self.start
                or sum(entry.writes for entry in self.out.inputs) != self.writes
                or any(_version(val) != version for val, version in self.versions
                       if not any(val is d for d in dirty)))


def _switch(out, mode: bool, tag: str) -> None:
    """The tracer's grad mode set to `mode`; the node it records (if any) tagged as ours."""
    count = len(out.graph.nodes)
    out.set_grad_enabled(mode)
    if len(out.graph.nodes) != count:
        next(iter(reversed(out.graph.nodes))).meta[tag] = True


def call_with_grad(tx, cls: type, args: list, kwargs: dict):
    out = tx.output
    for name in ("forward", "setup_context", "backward", "vjp", "jvp"):
        lookup.guard_lookup(out, cls, name)
    backward = user_backward(cls)
    if backward is Function.backward:
        raise _break(cls, "no backward")
    forward = _static(tx, cls, "forward")
    setup = None
    if cls.setup_context is not _SingleLevelFunction.setup_context:
        setup = _static(tx, cls, "setup_context")
    args = _bind(tx, cls, forward, setup is not None, list(args), kwargs)
    needs = tuple(isinstance(a, TensorValue) and a.fake.requires_grad for a in args)
    ctx = NewObjectValue(GradCtx, {"needs_input_grad": TupleValue([ConstantValue(n) for n in needs]),
                                   "fj_non_differentiable": TupleValue([]),
                                   "fj_materialize_grads": ConstantValue(True), "fj_dirty": TupleValue([])})
    graph = out.graph
    before = set(graph.nodes)
    effects = _Effects(out, before)
    if not any(needs):  # autograd records nothing: the forward as eager runs it (under no_grad)
        out.set_grad_enabled(False)
        try:
            result = _forward(tx, forward, setup, ctx, args)
        finally:
            out.set_grad_enabled(True)
        if ctx.attrs["fj_dirty"].items:  # eager's apply bumps the version once more: NOTE [Inputs marked dirty]
            raise _break(cls, "ctx.mark_dirty with no input that requires grad")
        if effects.changed():
            raise _break(cls, "its forward changes state outside it")
        return result
    _switch(out, False, "fj_function_switch")
    try:
        result = _forward(tx, forward, setup, ctx, args)
    except UserException as e:  # a ctx attribute the stand-in lacks: eager's ctx may have it
        if isinstance(e.exc, AttributeError) and "GradCtx" in str(e.exc):
            raise _break(cls, f"its forward reads a ctx attribute the trace does not model ({e.exc})") from None
        raise
    finally:
        _switch(out, True, "fj_function_switch")
    dirty = _dirty(cls, ctx, args, result)
    if effects.changed(dirty):
        raise _break(cls, "its forward changes state outside it")
    region = next_region()
    for node in graph.nodes:
        if node not in before and node.op in ("call_function", "call_method", "call_module"):
            node.meta["fj_function"] = region
    plan, tensor_args, outs, extras, single, items = _plan(cls, args, result, ctx, dirty)
    boundary = Boundary(plan, region, len(tensor_args), len(extras))
    applied = out.call("call_function", boundary, tuple([*tensor_args, *outs, *extras]), {})
    _probe(tx, cls, backward, plan, args, applied.items, extras)
    if single:
        return applied.items[0]
    made = iter(applied.items)
    return TupleValue([next(made) if item is None else item for item in items])


def _bind(tx, cls: type, forward: UserFunctionValue, setup: bool, args: list, kwargs: dict) -> list:
    """The apply's arguments as autograd sees them: positional, one per input (NOTE [Keyword arguments of
    apply]). Whatever eager rejects (a name the forward lacks, a value given twice, a gap) is a break, and
    the apply, run as Python there, raises eager's own TypeError."""
    code = forward.fn.__code__
    skip = 0 if setup else 1  # the ctx parameter of a forward in the ctx style
    names = code.co_varnames[skip:code.co_argcount]
    if setup and len(args) > len(names):
        raise _break(cls, "more arguments than its forward takes (eager raises TypeError)")
    if not kwargs and not (setup and len(args) < len(names)):
        return args
    odd = code.co_posonlyargcount or code.co_kwonlyargcount or code.co_flags & (inspect.CO_VARARGS | inspect.CO_VARKEYWORDS)
    if odd:
        raise _break(cls, "keyword arguments or defaults for a forward with positional-only, keyword-only, * or ** parameters")
    slots: list = list(args) + [None] * max(0, len(names) - len(args))
    for key, value in kwargs.items():
        if key not in names:
            raise _break(cls, f"keyword argument {key!r} that its forward does not take (eager raises TypeError)")
        position = names.index(key)
        if position < len(args):
            raise _break(cls, f"two values for argument {key!r} (eager raises TypeError)")
        slots[position] = value
    if setup:  # Function.apply binds the forward's signature and applies its defaults first
        defaults = tx._wrap_defaults(forward)
        first_default = len(names) - len(defaults)
        for position, value in enumerate(slots):
            if value is None and position >= first_default:
                slots[position] = defaults[position - first_default]
    end = len(slots)
    while end > len(args) and slots[end - 1] is None:
        end -= 1
    if any(value is None for value in slots[:end]) or (setup and end < len(names)):
        raise _break(cls, "a parameter of its forward without a value (eager raises TypeError)")
    return slots[:end]


# NOTE [Inputs marked dirty]: a forward that writes a tensor argument in place and calls `ctx.mark_dirty(x)` returns
# x; eager's apply gives that very tensor (its version bumped by the write) the Function's grad_fn. The trace keeps
# the write in the region, and CustomCall (and the boundary's fake apply) marks that argument dirty, so the output
# is the argument object with the new history, as eager. Only where each dirty tensor is a tensor argument made in
# this graph (writing a graph input, or a view of one, breaks as before), that the forward returns, and not a leaf
# that requires grad (eager's apply raises: a break, and the apply run in Python raises it). Eager's apply bumps the
# version of a dirty tensor once more (2 after one write); CustomCall's apply does too, an inlined forward (no input
# requires grad) would not: that case breaks, as does any apply under no_grad (TracedCtx has no mark_dirty).
def _dirty(cls: type, ctx: NewObjectValue, args: list, result) -> tuple:
    """The fake tensors the forward marked dirty, checked (NOTE [Inputs marked dirty])."""
    outs = [result] if isinstance(result, TensorValue) else [
        i for i in getattr(result, "items", []) if isinstance(i, TensorValue)]
    fakes = []
    for value in ctx.attrs["fj_dirty"].items:
        if not isinstance(value, TensorValue) or not any(isinstance(a, TensorValue) and a.fake is value.fake for a in args):
            raise _break(cls, "ctx.mark_dirty of something other than a tensor argument")
        if value.node.op == "placeholder":
            raise _break(cls, "ctx.mark_dirty of a graph input (its forward writes it in place)")
        if value.fake.is_leaf and value.fake.requires_grad:
            raise _break(cls, "ctx.mark_dirty of a leaf that requires grad (eager raises)")
        if not any(o.fake is value.fake for o in outs):
            raise _break(cls, "ctx.mark_dirty of a tensor its forward does not return")
        fakes.append(value.fake)
    return tuple(fakes)


def _forward(tx, forward, setup, ctx, args: list):
    if setup is None:
        return tx.call(forward, [ctx, *args], {})
    result = tx.call(forward, list(args), {})
    tx.call(setup, [ctx, TupleValue(list(args)), result], {})
    return result


def _plan(cls: type, args: list, result, ctx: NewObjectValue, dirty: tuple):
    positions = [i for i, a in enumerate(args) if isinstance(a, TensorValue)]
    tensor_args = [args[i] for i in positions]
    arg_slots = tuple(positions.index(i) if i in positions else None for i in range(len(args)))
    single = isinstance(result, TensorValue)
    outs, items = _plan_outputs(cls, result)
    extras: list = []

    def extra(value) -> int:
        for k, e in enumerate(extras):
            if e.node is value.node:
                return k
        extras.append(value)
        return len(extras) - 1

    saved = []
    for value in getattr(ctx.attrs.get("saved_tensors"), "items", []):
        if isinstance(value, TensorValue):
            saved.append(extra(value))
        elif value.is_constant() and value.as_constant() is None:
            saved.append(None)
        else:
            raise _break(cls, "save_for_backward of something other than tensors")

    def attr_spec(value):
        if isinstance(value, (TensorValue, SymNodeValue, SymFloatValue)):  # a float input stays symbolic
            return ("value", extra(value))
        if isinstance(value, TupleValue) and not value.is_constant():
            return ("tuple", tuple(attr_spec(v) for v in value.items))
        if value.is_constant():
            return ("const", value.as_constant())
        raise _break(cls, f"a ctx attribute holding {value.describe()}")
    for name in ctx.attrs:
        if name not in _CTX_STATE and name in _RESERVED:
            raise _break(cls, f"a store to ctx.{name}, which autograd reads")
    attrs = tuple((name, attr_spec(v)) for name, v in ctx.attrs.items() if name not in _CTX_STATE)
    non_differentiable = []
    for value in ctx.attrs["fj_non_differentiable"].items:
        index = next((k for k, o in enumerate(outs) if isinstance(value, TensorValue) and o.node is value.node), None)
        if index is None:
            raise _break(cls, "mark_non_differentiable of something other than an output")
        non_differentiable.append(index)
    materialize = ctx.attrs["fj_materialize_grads"]
    if not materialize.is_constant():
        raise _break(cls, "set_materialize_grads with a value not known while tracing")
    constant_outputs = tuple((k, item.as_constant()) for k, item in enumerate(items) if item is not None)
    plan = Plan(cls, arg_slots, len(outs), single, constant_outputs, tuple(saved), attrs,
                tuple(non_differentiable), bool(materialize.as_constant()),
                tuple(k for k, a in enumerate(tensor_args) if any(a.fake is d for d in dirty)))
    return plan, tensor_args, outs, extras, single, items


def _plan_outputs(cls: type, result) -> tuple[list, list]:
    """The forward's tensor results, and per result item None (a tensor) or the constant it is."""
    if isinstance(result, TensorValue):
        return [result], [None]
    if isinstance(result, TupleValue) and result.python_type() is tuple and any(
            isinstance(i, TensorValue) for i in result.items):
        outs, items = [], []
        for item in result.items:
            if isinstance(item, TensorValue):
                outs.append(item)
                items.append(None)
            elif item.is_constant():
                items.append(item)
            else:
                raise _break(cls, "its forward returns a tuple holding something other than tensors and constants")
        return outs, items
    raise _break(cls, "its forward returns something other than a tensor or a tuple of tensors")


def _attr_value(spec, extras: list):
    kind, value = spec
    if kind == "const":
        return ConstantValue(value)
    if kind == "tuple":
        return TupleValue([_attr_value(s, extras) for s in value])
    return extras[value]


def _probe(tx, cls: type, backward, plan: Plan, args: list, outs: list, extras: list) -> None:
    """Trace the user's backward once (NOTE [Custom autograd functions in the graph]); its nodes are
    tagged and dropped later. Graph breaks and state changes inside it are breaks at the apply."""
    out = tx.output
    graph = out.graph
    before = set(graph.nodes)
    effects = _Effects(out, before)
    needs = [isinstance(a, TensorValue) and a.fake.requires_grad for a in args]
    attrs = {name: _attr_value(spec, extras) for name, spec in plan.attrs}
    attrs["saved_tensors"] = TupleValue([ConstantValue(None) if k is None else extras[k] for k in plan.saved])
    attrs["needs_input_grad"] = TupleValue([ConstantValue(n) for n in needs])
    ctx = NewObjectValue(ProbeCtx, attrs)
    _switch(out, False, "fj_function_probe")
    try:
        grads = []
        for k, o in enumerate(outs):
            if plan.materialize_grads or (k not in plan.non_differentiable and o.fake.requires_grad):
                grads.append(out.call("call_function", torch.zeros_like, (o,), {}))
            else:
                grads.append(ConstantValue(None))
        fn = UserFunctionValue(backward.__func__ if isinstance(backward, staticmethod) else backward)
        result = tx.call(fn, [ctx, *with_constant_outputs(plan, grads, ConstantValue(None))], {})
    except UserException:  # eager raises it in the backward, not at the apply
        raise _break(cls, "its backward raises while traced") from None
    finally:
        _switch(out, True, "fj_function_probe")
    for node in graph.nodes:  # graph inputs the backward read stay (unused); its operations go
        if node not in before and node.op in ("call_function", "call_method", "call_module"):
            node.meta["fj_function_probe"] = True
    if effects.changed():
        raise _break(cls, "its backward changes state outside it")
    items = result.items if isinstance(result, TupleValue) else [result]
    if not all(isinstance(i, TensorValue) or (i.is_constant() and i.as_constant() is None) for i in items):
        raise _break(cls, "its backward returns something other than tensors and None")
