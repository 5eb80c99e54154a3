"""torch.func's autodiff transforms (`grad`, `grad_and_value`, `jacrev`, `jacfwd`, `hessian`, `jvp`,
`vjp`) captured into the enclosing graph as one node that applies the transform to the traced function.

NOTE [Transform regions]: the same shape as NOTE [vmap regions]. A call of a transformed function is
traced here instead of inlining functorch's machinery (which pushes functorch levels: NOTE [functorch
state]):
- each tensor of the positional arguments (a tensor, or a tuple, list or dict of them, nested; constants
  among them are kept as they are) stands in the body for the wrapped tensor the transform passes: an
  `aten.alias` node with the argument's sizes and strides. Keyword arguments are passed as they are (the
  transforms never differentiate them), so their tensors are read from outside like closure tensors;
- `f` is inlined on those values (guards as for any inlined call); a break anywhere in it is a break at
  the transformed call, which then runs as Python, as eager;
- the body's nodes move into a GraphModule whose placeholders are the stand-ins and the outer values it
  read; the main graph gets one `TransformCall` node that runs the real transform (`torch.func.grad(fn,
  argnums, has_aux)(*args)`, ...) on a function `fn` that takes the arguments in their structure, runs the
  GraphModule on their tensors and rebuilds the body's result (tuples, lists, dicts, constants). Values,
  errors and nesting are eager's: the same transform runs on the same function. A transform in the body
  (vmap(grad(f)), jacfwd(jacrev(f))) is already one such node when the outer region is cut.
- `TransformCall` runs once on the trace's fakes: the transform's own refusals (a non-scalar output of
  grad, argnums out of range, an aux that is not a tuple) are a graph break then, so eager raises them.
  The node returns the flat tensors of the result; the trace rebuilds its structure from the fake run.
- grad, grad_and_value and jacrev run `f` with grad mode on (`torch.enable_grad()` inside the transform),
  so the body is traced with grad mode on (`torch.is_grad_enabled()` answers True there, as in eager);
  grad-mode switches in the body are kept in it when the body ends in the mode it began with.
Graph breaks, never a guess: Python effects the caller can see and the body does not undo (NOTE [Effects
a body undoes]), `t.requires_grad` in the body
(True for the wrapped arguments in eager), a symbolic size or an object among the arguments, a body result
other than tensors in tuples, lists and dicts (with constants), non-constant options, and autocast
switches or custom autograd Functions in the body. A graph holding a TransformCall is not persisted.
"""
from __future__ import annotations

import functools
import inspect
import types
from typing import Any, Callable

import torch

from .breaks import BreakKind, Unsupported
from .values import ConstantValue, DictValue, ListValue, SequenceValue, TensorValue, TupleValue, Value


class _Leaf:
    """A tensor's place in an argument or result structure: the k-th flat tensor."""

    def __init__(self, index: int) -> None:
        self.index = index


def _fill(template: Any, leaves: Any) -> Any:
    """`template` with each `_Leaf(k)` replaced by `leaves[k]`."""
    if isinstance(template, _Leaf):
        return leaves[template.index]
    if type(template) in (tuple, list):
        return type(template)(_fill(t, leaves) for t in template)
    if type(template) is dict:
        return {k: _fill(t, leaves) for k, t in template.items()}
    return template


def _pick(template: Any, value: Any, out: list) -> list:
    """The objects of `value` at the `_Leaf` places of `template` (the same structure), in leaf order."""
    if isinstance(template, _Leaf):
        out.append(value)
    elif type(template) in (tuple, list):
        for t, v in zip(template, value):
            _pick(t, v, out)
    elif type(template) is dict:
        for k, t in template.items():
            _pick(t, value[k], out)
    return out


def _flat_result(result: Any, leaves: list) -> list:
    """The tensors of a result (tensors in nested tuples, lists and dicts), appended to `leaves`."""
    if isinstance(result, torch.Tensor):
        leaves.append(result)
    elif type(result) in (tuple, list):
        for item in result:
            _flat_result(item, leaves)
    elif type(result) is dict:
        for item in result.values():
            _flat_result(item, leaves)
    return leaves


class TransformCall:
    """A graph node's target: a torch.func transform applied to a traced body (NOTE [Transform regions]).
    Inputs: the flat tensors of the arguments, then those of `extra` (jvp's tangents), then the outer
    values the body reads. Returns the flat tensors of the transform's result."""

    def __init__(self, name: str, apply: Callable, body: torch.fx.GraphModule, args: Any, n_args: int,
                 extra: Any, n_extra: int, out: Any) -> None:
        self.name, self.apply, self.body = name, apply, body
        self.args, self.n_args, self.extra, self.n_extra, self.out = args, n_args, extra, n_extra, out
        self.random = False  # set by the fake run: the body draws random numbers (NOTE [vjp functions])
        self.__name__ = f"{name}_body"

    def __call__(self, *inputs):
        n, m = self.n_args, self.n_args + self.n_extra
        outer = inputs[m:]

        def fn(*args):
            return _fill(self.out, self.body.forward(*_pick(self.args, args, []), *outer))
        result = self.apply(fn, _fill(self.args, inputs[:n]), _fill(self.extra, inputs[n:m]))
        return tuple(_flat_result(result, []))

    def __reduce__(self):
        raise TypeError("a torch.func transform call is not persisted")


def _break(what: str, reason: str):
    raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"torch.func.{what}: {reason}; the call runs as Python")


class _Trace:
    """What one transformed call collects while its body is traced."""

    def __init__(self, tx, what: str) -> None:
        self.tx, self.what = tx, what
        self.stand_ins: list = []  # the body's stand-in nodes, in leaf order
        self.outer: list = []  # the outer nodes they stand for
        self.extra: list = []  # nodes passed to the transform but not to the body (jvp's tangents)

    def template(self, value: Value, stand_in: bool) -> Any:
        """(template, the value the body sees) for an argument: tensors become `_Leaf`s."""
        if isinstance(value, TensorValue):
            nodes = self.outer if stand_in else self.extra
            leaf = _Leaf(len(nodes))
            nodes.append(value.node)
            if not stand_in:
                return leaf, value
            sample = self.tx.output.call("call_function", torch.ops.aten.alias.default, (value,), {})
            self.stand_ins.append(sample.node)
            return leaf, sample
        if isinstance(value, SequenceValue) and value.cls in (tuple, list):
            pairs = [self.template(item, stand_in) for item in value.items]
            seen = [p[1] for p in pairs]
            return value.cls(p[0] for p in pairs), (TupleValue(seen) if value.cls is tuple else ListValue(seen))
        if isinstance(value, DictValue) and value.cls is dict and all(type(k) in (str, int) for k in value.items):
            pairs = {k: self.template(item, stand_in) for k, item in value.items.items()}
            return {k: p[0] for k, p in pairs.items()}, DictValue({k: p[1] for k, p in pairs.items()})
        if isinstance(value, ConstantValue) and type(value.as_constant()) in (int, float, bool, str, type(None)):
            return value.as_constant(), value
        _break(self.what, f"an argument of type {value.python_type().__name__} (only tensors, constants and "
                          "tuples, lists and dicts of them are captured)")


def result_template(what: str, value: Value, outs: list) -> Any:
    """The structure of a body's result: its tensors become `_Leaf`s (their nodes appended to `outs`),
    tuples, lists and dicts are kept, constants kept as they are."""
    if isinstance(value, TensorValue):
        outs.append(value.node)
        return _Leaf(len(outs) - 1)
    if isinstance(value, SequenceValue) and value.cls in (tuple, list):
        return value.cls(result_template(what, item, outs) for item in value.items)
    if isinstance(value, DictValue) and value.cls is dict and all(type(k) in (str, int) for k in value.items):
        return {k: result_template(what, item, outs) for k, item in value.items.items()}
    if isinstance(value, ConstantValue) and type(value.as_constant()) in (int, float, bool, str, type(None)):
        return value.as_constant()
    _break(what, f"the function returns a {value.python_type().__name__}")


def values_of(template: Any, items: list) -> Value:
    """The Value of `template` (a result structure) with `_Leaf(k)` as `items[k]`."""
    if isinstance(template, _Leaf):
        return items[template.index]
    if type(template) in (tuple, list):
        values = [values_of(t, items) for t in template]
        return TupleValue(values) if type(template) is tuple else ListValue(values)
    if type(template) is dict:
        return DictValue({k: values_of(t, items) for k, t in template.items()})
    return ConstantValue(template)


# NOTE [Effects a body undoes]: a transform body may change Python state and put it back before it returns:
# `functional_call(module, params, args)` swaps the tensors in each submodule's `_parameters` / `_buffers`
# dict for those of `params` and swaps them back (writing them into `params` again), in every per-sample
# gradient and ensembling program. The node runs the traced graph, not the body's Python: neither the
# writes nor their undoing happen at run time, which leaves the caller's state as eager leaves it exactly
# when the body put everything back (no code runs between the two that could see the difference: the
# body's own code is in the graph). While the body is traced, the first mutation of each list or dict is preceded by a snapshot of its items; at the end the
# body's effects are accepted when every Python write it made was such a container mutation (the side
# effects' version count proves it: attribute, global and cell stores and finishing calls bump it too)
# and every mutated container holds the same values (by identity) under the same keys, in the same order,
# as before, no iterator the caller can reach was drawn from and no cell made in the trace was stored to
# (a chunked vmap runs the body once per chunk: eager draws and counts again each time). Its logged calls are then dropped (they would replay stand-ins that no longer exist). Any
# other write the caller can see is a graph break, as before.
class BodyEffects:
    """The Python effects of one traced transform body (NOTE [Effects a body undoes])."""

    def __init__(self, tx, roots: list) -> None:
        from .vmap_capture import _visible_values
        se = self.side_effects = tx.output.side_effects
        self.visible = _visible_values(tx, roots)
        self.start = (se.version, se.tensor_writes, len(se.touched), len(se.ops), len(se.finishing_calls))
        self.stores = (dict(se.attrs), dict(se.globals), dict(se.cells))
        self.containers = set(se.containers)
        self.positions = _iterator_positions(se, self.visible)
        self.cells = _cell_contents(self.visible)
        self.snapshots: dict[int, tuple] = {}
        self.sourced = 0
        self.previous = se.__dict__.get("mutate_container")  # an enclosing body's
        original = se.mutate_container

        def mutate_container(value) -> None:
            if id(value) not in self.snapshots:
                self.snapshots[id(value)] = (value, _items(value))
            self.sourced += value.source is not None
            original(value)
        se.mutate_container = mutate_container  # this trace's object only, until close()

    def close(self) -> None:
        se = self.side_effects
        if self.previous is None:
            del se.mutate_container
        else:
            se.mutate_container = self.previous

    def finish(self, what: str) -> None:
        se = self.side_effects
        self.close()
        version, tensor_writes, touched, ops, finishing = self.start
        if _drawn(se, self.visible, self.positions):
            # a chunked vmap runs the body once per chunk: each run draws again in eager
            raise Unsupported(BreakKind.SIDE_EFFECT, f"{what}: the function draws from an iterator the caller "
                                                     "holds; the call runs as Python")
        if _cell_contents(self.visible) != self.cells:
            raise Unsupported(BreakKind.SIDE_EFFECT, f"{what}: the function stores to a variable of an enclosing "
                                                     "function (nonlocal); the call runs as Python")
        python_writes = (se.version - version) - (se.tensor_writes - tensor_writes)
        if not python_writes and not any(id(v) in self.visible for v in se.touched[touched:]):
            return
        if python_writes != self.sourced or not self._undone():
            raise Unsupported(BreakKind.SIDE_EFFECT, f"{what}: the function mutates Python state the caller can "
                                                     "see; the call runs as Python")
        se.version -= python_writes
        self.restore_lazy()
        del se.ops[ops:], se.touched[touched:]
        for key in set(se.containers) - self.containers:
            del se.containers[key]

    def _undone(self) -> bool:
        se = self.side_effects
        if len(se.finishing_calls) != self.start[4]:
            return False
        if any(id(v) in self.visible and id(v) not in self.snapshots for v in se.touched[self.start[2]:]):
            return False  # an object made in the trace was changed (an attribute store): not undone here
        for before, now in zip(self.stores, (se.attrs, se.globals, se.cells)):
            if before.keys() != now.keys() or any(before[k] is not now[k] for k in before):
                return False
        for value, items in self.snapshots.values():
            if value.source is None and id(value) not in self.visible:
                continue  # made by the body: the caller cannot see it
            if isinstance(items, _Lazy):
                if not items.undone(value):
                    return False
                continue
            now = _items(value)
            if items is None or now is None or len(now) != len(items) or \
                    any(a[0] != b[0] or a[1] is not b[1] for a, b in zip(items, now)):
                return False
        return True

    def restore_lazy(self) -> None:
        for value, items in self.snapshots.values():
            if isinstance(items, _Lazy):
                value.written = dict(items.written)


def _iterator_positions(se, visible: dict) -> dict:
    """How far each iterator the caller can reach (made in the trace, or a list iterator from outside) is
    drawn (NOTE [Effects a body undoes])."""
    from .values import IteratorValue
    its = [v for v in visible.values() if isinstance(v, IteratorValue)] + list(se.iterators.values())
    return {id(v): (v.index, getattr(v, "exhausted", False)) for v in its}


def _cell_contents(visible: dict) -> dict:
    """What each cell made in the trace that the caller can reach holds: its value's identity, or the root
    frame argument it holds (a LazyArg until first read, then the value wrapped from that local)."""
    from .sources import LocalSource
    from .values import CellValue, UserFunctionValue
    from .values.base import LazyArg
    cells = [c for v in visible.values() if isinstance(v, UserFunctionValue) for c in v.closure or ()]

    def held(contents):
        if isinstance(contents, LazyArg):
            return LocalSource(contents.name)
        source = getattr(contents, "source", None)
        return source if isinstance(source, LocalSource) else id(contents)
    return {id(c): held(c.contents) for c in cells if isinstance(c, CellValue)}


def _drawn(se, visible: dict, before: dict) -> bool:
    """Whether the body drew from an iterator the caller can reach (one from outside first read in the body
    counts when it moved from where it was found)."""
    now = _iterator_positions(se, visible)
    return any(before.get(key, position) != position for key, position in now.items()) or any(
        it.index != it.start or it.exhausted for key, it in se.iterators.items() if key not in before)


class _Lazy:
    """The snapshot of a dict from outside not read whole (values/outside.OutsideDictValue: a module's
    `_parameters` swapped by functional_call): its stores so far. Reading it whole here would guard all
    its keys and make later module walks over it a break (NOTE [Module slots written while tracing])."""

    def __init__(self, value) -> None:
        self.written = dict(value.written)

    def undone(self, value) -> bool:
        """Still not read whole, and every key stored in the body holds what it held before: the real
        entry's value (wrapped again, it is the same value: NOTE [Objects by identity]) or the earlier store."""
        if value.materialized:
            return False
        for key, now in list(value.written.items()):
            if key in self.written:
                before = self.written[key]
            else:
                del value.written[key]
                present = value.has(key)  # whether the real dict holds it (guarded)
                value.written[key] = now
                before = value._value(key) if present else None
            if now is not before:
                return False
        return True


def _items(value) -> Any:
    """(key, value) pairs of a dict or list value; None for anything else (a set: never accepted)."""
    from .values.outside import OutsideDictValue
    if isinstance(value, OutsideDictValue) and not value.materialized:
        return _Lazy(value)
    if isinstance(value, DictValue):
        return list(value.items.items())
    if isinstance(value, SequenceValue):
        return list(enumerate(value.items))
    return None


def _trace_body(tx, trace: _Trace, func: Value, body_args: list, kwargs: dict, grad_on: bool) -> Value:
    output = tx.output
    effects = BodyEffects(tx, [func, *body_args, *kwargs.values()])
    mode_before = output.grad_enabled
    output.grad_enabled = mode_before or grad_on  # the transform's own enable_grad: no node (the body moves)
    output.vmap_depth = output.__dict__.get("vmap_depth", 0) + 1  # read by check_grad_fact
    try:
        result = tx.call(func, body_args, kwargs)
        if output.grad_enabled != (mode_before or grad_on):
            _break(trace.what, "the function leaves grad mode switched")
    except BaseException:
        effects.close()
        raise
    finally:
        output.vmap_depth -= 1
        output.grad_enabled = mode_before
    effects.finish(f"torch.func.{trace.what}")
    return result


def _rebuild(tx, template: Any, items: list) -> Value:
    """The Value of a transform result: `template` is the fake result, `items` the values of its tensors."""
    if isinstance(template, torch.Tensor):
        return items.pop(0)
    if type(template) in (tuple, list):
        values = [_rebuild(tx, t, items) for t in template]
        return TupleValue(values) if type(template) is tuple else ListValue(values)
    if type(template) is dict:
        return DictValue({k: _rebuild(tx, t, items) for k, t in template.items()})
    return ConstantValue(template)


def capture(tx, what: str, apply: Callable, func: Value, args: list[Value], kwargs: dict[str, Value],
            *, extra: Value | None = None, grad_on: bool) -> Value:
    """Trace `func(*args, **kwargs)` and record `apply(fn, args, extra)` as one node (NOTE [Transform regions])."""
    return _capture(tx, what, apply, func, args, kwargs, extra, grad_on)[0]


def _capture(tx, what: str, apply: Callable, func: Value, args: list[Value], kwargs: dict[str, Value],
             extra: Value | None, grad_on: bool) -> tuple[Value, TransformCall, list]:
    from .vmap_capture import _body_module, _region, _Slots
    output = tx.output
    before = set(output.graph.nodes)
    trace = _Trace(tx, what)
    pairs = [trace.template(arg, True) for arg in args]
    extra_template = trace.template(extra, False)[0] if extra is not None else ()
    result = _trace_body(tx, trace, func, [p[1] for p in pairs], kwargs, grad_on)
    outs: list = []
    out_template = result_template(what, result, outs)
    slots = _Slots(outer=trace.outer, dims=[], nodes=trace.stand_ins)
    region, externals = _region(output.graph, before, slots, outs, allow_grad_mode=True)
    body = _body_module(region, slots, externals, outs, False, tuple)
    call = TransformCall(what, apply, body, tuple(p[0] for p in pairs), len(trace.outer), extra_template,
                         len(trace.extra), out_template)
    inputs = [*trace.outer, *trace.extra, *externals]
    fake = _fake_run(output, call, inputs, what)
    for node in reversed(region):
        output.graph.erase_node(node)
    node = output.graph.create_node("call_function", call, tuple(inputs), {})
    node.meta["stack_trace"] = output.stack_trace()
    output.op_count += 1
    leaves = list(fake)
    node.meta["val"] = tuple(leaves)
    flat = output.wrap_result(node, tuple(leaves)) if leaves else TupleValue([])
    return _rebuild(tx, call.fake_result, list(flat.items)), call, inputs  # the fake run's structure


class _SeededOps(torch.utils._python_dispatch.TorchDispatchMode):
    """Notes whether an op drawing from a random generator ran (for NOTE [vjp functions])."""
    found = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if torch.Tag.nondeterministic_seeded in getattr(func, "tags", ()):
            self.found = True
        return func(*args, **(kwargs or {}))


def _fake_run(output, call: TransformCall, inputs: list, what: str) -> Any:
    from .breaks import UserException
    fakes = [n.meta.get("val") for n in inputs]
    tensors = [f for f in fakes if isinstance(f, torch.Tensor) and not f.is_inference()]
    versions = [f._version for f in tensors]
    structured: list = []
    apply = call.apply

    def keep(fn, args, extra):
        with _SeededOps() as seeded:
            result = apply(fn, args, extra)
        structured.append(result)
        call.random = seeded.found
        return result
    call.apply = keep
    try:
        flat = output._run_fake("call_function", call, tuple(fakes), {})
    except (Unsupported, UserException) as e:
        _break(what, f"the transform refuses the traced function ({getattr(e, 'exc', e)})")
    finally:
        call.apply = apply
        torch._C._autograd._unsafe_set_version_counter(tuple(tensors), tuple(versions))
    call.fake_result = structured[-1]
    return flat


# --- the transforms -------------------------------------------------------------------------------------

def _constant(what: str, value: Value | None, default: Any = None) -> Any:
    if value is None:
        return default
    if not value.is_constant():
        _break(what, "an option that is not a constant")
    return value.as_constant()


def _apply_grad(argnums, has_aux, fn, args, extra):
    return torch.func.grad(fn, argnums, has_aux)(*args)


def _apply_grad_and_value(argnums, has_aux, fn, args, extra):
    return torch.func.grad_and_value(fn, argnums, has_aux)(*args)


def _grad_handler(name: str, apply: Callable):
    """`grad_impl(func, argnums, has_aux, args, kwargs)` (what `torch.func.grad(f)(*args)` calls)."""
    def handler(tx, args: list[Value], kwargs: dict[str, Value]) -> Value:
        if len(args) != 5 or kwargs or not isinstance(args[3], TupleValue) or not isinstance(args[4], DictValue):
            _break(name, "called in an unexpected way")
        func, argnums, has_aux, call_args, call_kwargs = args
        options = (_constant(name, argnums), _constant(name, has_aux))
        if not all(type(k) is str for k in call_kwargs.items):
            _break(name, "keyword arguments that are not strings")
        return capture(tx, name, functools.partial(apply, *options), func, list(call_args.items),
                       dict(call_kwargs.items), grad_on=True)
    return handler


def _jacrev_call(func, argnums, has_aux, chunk_size, preallocate, args):
    """What `jacrev(f, ...)(*args)` computes (the factory below returns a wrapper that calls this)."""
    from torch._functorch.eager_transforms import jacrev
    return jacrev(func, argnums, has_aux=has_aux, chunk_size=chunk_size, _preallocate_and_copy=preallocate)(*args)


def _jacfwd_call(func, argnums, has_aux, randomness, args):
    from torch._functorch.eager_transforms import jacfwd
    return jacfwd(func, argnums, has_aux, randomness=randomness)(*args)


def _jacrev(func, argnums=0, *, has_aux=False, chunk_size=None, _preallocate_and_copy=False):
    """Inlined in place of `torch.func.jacrev`: returns a wrapper whose call is `_jacrev_call`."""
    @functools.wraps(func)
    def wrapper_fn(*args):
        return _jacrev_call(func, argnums, has_aux, chunk_size, _preallocate_and_copy, args)
    return wrapper_fn


def _jacfwd(func, argnums=0, has_aux=False, *, randomness="error"):
    """Inlined in place of `torch.func.jacfwd`: returns a wrapper whose call is `_jacfwd_call`."""
    @functools.wraps(func)
    def wrapper_fn(*args):
        return _jacfwd_call(func, argnums, has_aux, randomness, args)
    return wrapper_fn


def _apply_jacrev(options, fn, args, extra):
    from torch._functorch.eager_transforms import jacrev
    argnums, has_aux, chunk_size, preallocate = options
    return jacrev(fn, argnums, has_aux=has_aux, chunk_size=chunk_size, _preallocate_and_copy=preallocate)(*args)


def _apply_jacfwd(options, fn, args, extra):
    from torch._functorch.eager_transforms import jacfwd
    argnums, has_aux, randomness = options
    return jacfwd(fn, argnums, has_aux, randomness=randomness)(*args)


def _jac_handler(name: str, apply: Callable, grad_on: bool):
    def handler(tx, args: list[Value], kwargs: dict[str, Value]) -> Value:
        if kwargs or not isinstance(args[-1], TupleValue):
            _break(name, "called in an unexpected way")
        func, *options, call_args = args
        options = tuple(_constant(name, o) for o in options)
        return capture(tx, name, functools.partial(apply, options), func, list(call_args.items), {},
                       grad_on=grad_on)
    return handler


def _apply_jvp(options, fn, args, extra):
    strict, has_aux = options
    return torch.func.jvp(fn, args, extra, strict=strict, has_aux=has_aux)


def _jvp_handler(tx, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """`torch.func.jvp(func, primals, tangents, *, strict=False, has_aux=False)`."""
    names = ("func", "primals", "tangents")
    bound = dict(zip(names, args))
    if len(args) > 3 or set(kwargs) - {*names[len(args):], "strict", "has_aux"}:
        _break("jvp", "called in an unexpected way")
    bound.update(kwargs)
    primals, tangents = bound.get("primals"), bound.get("tangents")
    if not all(isinstance(v, (TupleValue, ListValue)) and v.cls in (tuple, list) for v in (primals, tangents)):
        _break("jvp", "primals or tangents that are not a tuple or list")
    options = (_constant("jvp", bound.get("strict"), False), _constant("jvp", bound.get("has_aux"), False))
    return capture(tx, "jvp", functools.partial(_apply_jvp, options), bound["func"], list(primals.items), {},
                   extra=tangents, grad_on=False)


# NOTE [vjp functions]: `out, vjp_fn = torch.func.vjp(f, *primals)` is captured as one node computing `out`
# (and aux) under the real vjp, and `vjp_fn` is a VjpFnValue: calling it in the same trace records a second
# node that runs `torch.func.vjp(f, *primals)[1](*cotangents)` on the same traced body and the same inputs,
# i.e. computes f's forward again. That equals eager's saved-graph backward only when the forward draws no
# random numbers (checked on the fake run: an op tagged nondeterministic_seeded) and nothing was written in
# place since the vjp call (the primals and the body's outer tensors keep their values: no in-place op in
# the body, none in the trace between the two calls). Otherwise, and wherever vjp_fn outlives the graph
# (returned, stored, live at a break: a real function would be needed), the break moves to the vjp call,
# which then runs as Python, as before.
class VjpFnValue(Value):
    """The `vjp_fn` of a captured `torch.func.vjp` call (NOTE [vjp functions])."""

    def __init__(self, call: TransformCall, inputs: list, has_aux: bool, made_at: int | None, writes: int) -> None:
        self.call, self.inputs, self.has_aux, self.made_at, self.writes = call, inputs, has_aux, made_at, writes
        self.source = None

    def python_type(self) -> type:
        return type(lambda: None)

    def describe(self) -> str:
        return "vjp_fn"

    def escape_break(self, why: str = "its vjp_fn outlives the graph") -> Unsupported:
        """The break a vjp_fn that outlives the graph takes: at the vjp call (NOTE [Breaks moved earlier])."""
        e = Unsupported(BreakKind.UNSUPPORTED_CALL, f"torch.func.vjp: {why}; the vjp call runs as Python")
        e.root_index = self.made_at
        return e

    def call_in_trace(self, tx, args: list[Value], kwargs: dict[str, Value]) -> Value:
        if self.call.random:
            raise self.escape_break("the function draws random numbers or writes in place (vjp_fn would "
                                    "compute it again)")
        if tx.output.side_effects.tensor_writes != self.writes:
            raise self.escape_break("a tensor was written in place between vjp and the vjp_fn call")
        options = tuple(_constant("vjp", kwargs.pop(k, None), d) for k, d in (("retain_graph", True),
                                                                           ("create_graph", None)))
        if kwargs:
            _break("vjp", "vjp_fn called with unexpected keywords")
        trace = _Trace(tx, "vjp")
        cotangents = trace.template(TupleValue(list(args)), False)[0]
        old = self.call
        call = TransformCall("vjp_fn", functools.partial(_apply_vjp_backward, self.has_aux, options), old.body,
                             old.args, old.n_args, cotangents, len(trace.extra), old.out)
        n = old.n_args
        inputs = [*self.inputs[:n], *trace.extra, *self.inputs[n + old.n_extra:]]
        output = tx.output
        fake = _fake_run(output, call, inputs, "vjp")
        node = output.graph.create_node("call_function", call, tuple(inputs), {})
        node.meta["stack_trace"] = output.stack_trace()
        node.meta["val"] = tuple(fake)
        output.op_count += 1
        flat = output.wrap_result(node, tuple(fake)) if fake else TupleValue([])
        return _rebuild(tx, call.fake_result, list(flat.items))


def _apply_vjp_forward(has_aux, fn, args, extra):
    result = torch.func.vjp(fn, *args, has_aux=has_aux)
    return (result[0], result[2]) if has_aux else result[0]


def _apply_vjp_backward(has_aux, options, fn, args, cotangents):
    retain_graph, create_graph = options
    return torch.func.vjp(fn, *args, has_aux=has_aux)[1](*cotangents, retain_graph=retain_graph,
                                                        create_graph=create_graph)


def _vjp_handler(tx, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """`torch.func.vjp(func, *primals, has_aux=False)` (NOTE [vjp functions])."""
    from .lazy_combinators import _root_index
    if not args or set(kwargs) - {"has_aux"}:
        _break("vjp", "called in an unexpected way")
    has_aux = _constant("vjp", kwargs.get("has_aux"), False)
    writes = tx.output.side_effects.tensor_writes
    made_at = _root_index(tx)
    result, call, inputs = _capture(tx, "vjp", functools.partial(_apply_vjp_forward, has_aux), args[0],
                                    list(args[1:]), {}, None, True)
    if tx.output.side_effects.tensor_writes != writes:
        call.random = True  # the body wrote in place: vjp_fn cannot compute the forward again
    vjp_fn = VjpFnValue(call, inputs, has_aux, made_at, tx.output.side_effects.tensor_writes)
    if has_aux:
        return TupleValue([result.items[0], vjp_fn, result.items[1]])
    return TupleValue([result, vjp_fn])


def _inlined(fn: Any):
    from .values import UserFunctionValue
    return lambda tx, args, kwargs: tx.inline(UserFunctionValue(fn), args, kwargs)


def register() -> None:
    from .builtins import BUILTIN_HANDLERS
    from .module_hooks import TRACE_TIME
    from torch._functorch import eager_transforms
    handlers = {
        eager_transforms.grad_impl: _grad_handler("grad", _apply_grad),
        eager_transforms.grad_and_value_impl: _grad_handler("grad_and_value", _apply_grad_and_value),
        _jacrev_call: _jac_handler("jacrev", _apply_jacrev, True),
        _jacfwd_call: _jac_handler("jacfwd", _apply_jacfwd, False),
        eager_transforms.jvp: _jvp_handler,
        eager_transforms.vjp: _vjp_handler,
    }
    for fn, handler in handlers.items():
        BUILTIN_HANDLERS[fn] = handler
        TRACE_TIME[fn] = handler
    BUILTIN_HANDLERS[eager_transforms.jacrev] = _inlined(_jacrev)
    BUILTIN_HANDLERS[eager_transforms.jacfwd] = _inlined(_jacfwd)
    BUILTIN_HANDLERS[eager_transforms.hessian] = _inlined(_hessian)
    _never_traced(eager_transforms)


def _hessian(func, argnums=0):
    """Inlined in place of `torch.func.hessian` (eager's own definition, over the substitutes above)."""
    return _jacfwd(_jacrev(func, argnums), argnums)


def _never_traced(module) -> None:
    """NOTE [functorch state]: the code of functorch's transforms (and every closure they make: vjp's
    vjp_fn, jacrev's wrapper_fn) runs as Python, never traced or hooked, also when called from residual code
    or made outside the compiled function: traced, it pushed levels, ran wrapped tensors through the fake
    ops or broke a dozen times inside. The transforms themselves are captured by the handlers above."""
    from .breaks import DISABLED
    todo = [inspect.unwrap(f).__code__ for f in vars(module).values() if isinstance(f, types.FunctionType)]
    while todo:
        code = todo.pop()
        if code.co_filename == module.__file__ and code not in DISABLED:
            DISABLED.add(code)
            todo.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
