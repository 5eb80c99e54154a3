"""Custom autograd Functions applied with grad on: the traced forward, run under the user's own backward.

NOTE [Custom autograd functions in the graph]: with grad mode on and an input that requires grad,
`MyFunction.apply(*args)` records a node whose backward is the user's `backward` (or `vjp`), whatever the
forward computes. The trace inlines the forward (autograd_function.py) under grad mode off, as
Function.apply runs it, and tags the nodes it added with a region number (`meta["fj_function"]`); one
boundary node (a `Boundary` call) then reads the apply's tensor arguments, the forward's outputs and the
tensors the forward kept on `ctx` (saved tensors, tensor attributes), and its fake run gives the outputs
eager gives: a real autograd Function applied to the fakes, so they require grad, have a grad_fn, are views
of an input where the forward returned one, and `mark_non_differentiable` holds.

When the GraphModule is built, `function_regions(gm)` moves each region into a GraphModule `region` and
replaces the boundary by one call of `FunctionCall(region, plan)`, whose `CustomCall.apply` runs the region
as its forward (grad off, saves what the user's forward saved, marks what it marked) and, in the backward,
calls the user's backward with a `ReplayedCtx` (saved_tensors, needs_input_grad of the user's arguments,
the attributes the forward set). So the eager backend runs the user's backward as eager does; the AOT
backends (onnxrt, triton) trace it into their backward graph, which is sound because the trace also ran
the backward once (a probe, its nodes dropped here): it is pure tensor code whose facts are guarded.
Inputs of the region other than the apply's tensor arguments (a module's weight read in the forward) are
arguments of CustomCall too and get no gradient, as in eager (the forward runs under no_grad).

A FunctionCall is not persisted (frame or joint cache): it holds the user's class and a GraphModule.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import torch

_REGIONS = [0]


def next_region() -> int:
    _REGIONS[0] += 1
    return _REGIONS[0]


@dataclasses.dataclass(frozen=True)
class Plan:
    """What the traced forward did with its ctx, and how the apply's arguments map to CustomCall's."""
    cls: type
    arg_slots: tuple  # per user argument: an index among CustomCall's tensor inputs, or None (not a tensor)
    n_outputs: int
    single: bool  # forward returned one tensor (apply returns it, not a tuple)
    constant_outputs: tuple  # (position, value): non-tensor items of a returned tuple
    saved: tuple  # per saved tensor: an index among the region's extra outputs, or None
    attrs: tuple  # (name, ("const", value) | ("tensor", extra index))
    non_differentiable: tuple  # output indices
    materialize_grads: bool


class Boundary:
    """The traced call of a custom Function before `function_regions` replaces it (only run on fakes)."""

    def __init__(self, plan: Plan, region: int, n_args: int, n_extras: int) -> None:
        self.plan, self.region, self.n_args, self.n_extras = plan, region, n_args, n_extras
        self.__name__ = f"{plan.cls.__name__}_apply"

    def __call__(self, *fakes):
        tensors = [f for f in fakes if isinstance(f, torch.Tensor)]  # kept values may be symbolic scalars
        if not tensors or not all(isinstance(f, torch._subclasses.fake_tensor.FakeTensor) for f in tensors):
            raise RuntimeError("framejit: a custom Function boundary ran outside tracing")
        args = fakes[:self.n_args]
        outs = fakes[self.n_args:len(fakes) - self.n_extras]
        return _FakeApply.apply(self.plan, outs, *args)

    def __reduce__(self):
        raise TypeError("a custom autograd Function call is not persisted")


class _FakeApply(torch.autograd.Function):
    """Gives the traced outputs the autograd facts eager's apply gives them."""

    @staticmethod
    def forward(ctx, plan, outs, *args):
        ctx.mark_non_differentiable(*[outs[i] for i in plan.non_differentiable])
        return tuple(outs)

    @staticmethod
    def backward(ctx, *grads):  # never run: only fakes pass here
        raise RuntimeError("framejit: backward of a traced boundary")


class ReplayedCtx:
    """The `ctx` the user's backward sees: what the forward stored, and the real saved tensors."""

    def __init__(self, real, needs_input_grad: tuple, attrs: dict) -> None:
        self.__dict__.update(attrs)
        self._real = real
        self.needs_input_grad = needs_input_grad

    @property
    def saved_tensors(self):
        return self._real.saved_tensors

    saved_variables = saved_tensors


class FunctionCall:
    """A graph node's target: the region (traced forward) applied through CustomCall. `refs[k]` says where
    the forward's k-th kept value is at run time: ("in", i) an argument of CustomCall, ("out", i) an
    output of the user's forward, ("extra", i) another value the region returns after those."""

    def __init__(self, region: torch.fx.GraphModule, plan: Plan, refs: tuple, n_args: int) -> None:
        self.region, self.plan, self.refs, self.n_args = region, plan, refs, n_args
        self.__name__ = f"{plan.cls.__name__}_apply"

    def __call__(self, *inputs):
        if not torch.is_grad_enabled() or not any(i.requires_grad for i in inputs[:self.n_args]):
            with torch.no_grad():  # autograd records nothing: the forward as eager runs it (an inference
                return tuple(self.region(*inputs))  # lowering also meets no autograd.Function here)
        return CustomCall.apply(self, *inputs)

    def __reduce__(self):
        raise TypeError("a custom autograd Function call is not persisted")


class CustomCall(torch.autograd.Function):
    """The user's Function as AOT autograd can trace it too (functorch wants `setup_context`): the forward
    returns the user's outputs, then the extra values the user's forward kept on ctx (non-differentiable)."""

    @staticmethod
    def forward(call: FunctionCall, *inputs):
        return tuple(call.region(*inputs))

    @staticmethod
    def setup_context(ctx, inputs, output):
        call, args = inputs[0], inputs[1:]
        plan = call.plan
        outs, extras = output[:plan.n_outputs], output[plan.n_outputs:]

        def value(k):
            kind, index = call.refs[k]
            return args[index] if kind == "in" else outs[index] if kind == "out" else extras[index]

        def attr(spec):
            kind, v = spec
            return v if kind == "const" else tuple(attr(s) for s in v) if kind == "tuple" else value(v)
        ctx.call = call
        ctx.save_for_backward(*[None if k is None else value(k) for k in plan.saved])
        ctx.fj_attrs = {name: attr(spec) for name, spec in plan.attrs}
        ctx.fj_outputs = [(o.shape, o.dtype, o.device) for o in outs]
        ctx.mark_non_differentiable(*[outs[i] for i in plan.non_differentiable],
                                    *[e for e in extras if isinstance(e, torch.Tensor)])
        ctx.set_materialize_grads(False)  # the extras' gradients are never materialised; the user's below

    @staticmethod
    def backward(ctx, *grads):
        call = ctx.call
        plan = call.plan
        grads = list(grads[:plan.n_outputs])
        if plan.materialize_grads:
            for k, (shape, dtype, device) in enumerate(ctx.fj_outputs):
                if grads[k] is None:
                    grads[k] = torch.zeros(shape, dtype=dtype, device=device)
        needs = ctx.needs_input_grad[1:]
        user_needs = tuple(False if slot is None else needs[slot] for slot in plan.arg_slots)
        user_ctx = ReplayedCtx(ctx, user_needs, ctx.fj_attrs)
        result = user_backward(plan.cls)(user_ctx, *with_constant_outputs(plan, grads))
        if not isinstance(result, tuple):
            result = (result,)
        n = len(plan.arg_slots)
        if len(result) != n:
            if len(result) < n or any(g is not None for g in result[n:]):
                raise RuntimeError(f"function {plan.cls.__name__}Backward returned an incorrect number of "
                                   f"gradients (expected {n}, got {len(result)})")
            result = result[:n]
        grads_in: list[Any] = [None] * len(needs)
        for position, (slot, grad) in enumerate(zip(plan.arg_slots, result)):
            if slot is None:
                if grad is not None:
                    raise RuntimeError(f"function {plan.cls.__name__}Backward returned a gradient different "
                                       f"than None at position {position + 1}, but the corresponding forward "
                                       "input was not a Variable")
                continue
            grads_in[slot] = grad
        return (None, *grads_in)


def with_constant_outputs(plan: Plan, grads: list, none: Any = None) -> list:
    """The gradients the user's backward takes: one per output of its forward, `none` (None) for the
    non-tensor ones (as eager passes them)."""
    grads = list(grads)
    for position, _ in plan.constant_outputs:
        grads.insert(position, none)
    return grads


def user_backward(cls: type):
    """What autograd calls as `cls`'s backward: `vjp` where the class overrides it, else `backward`."""
    from torch.autograd.function import Function
    return cls.vjp if cls.vjp is not Function.vjp else cls.backward


def function_regions(gm: torch.fx.GraphModule) -> None:
    """Replace each Boundary node and its region by one FunctionCall
    (NOTE [Custom autograd functions in the graph])."""
    graph = gm.graph
    boundaries = [n for n in graph.nodes if n.op == "call_function" and isinstance(n.target, Boundary)]
    probes = [n for n in graph.nodes if "fj_function_probe" in n.meta]
    for node in reversed(probes):  # the backward's trace: checked, then dropped
        if not node.users:
            graph.erase_node(node)
    if not boundaries:
        if probes:
            gm.recompile()
        return
    for boundary in boundaries:
        _replace(gm, boundary)
    graph.lint()
    gm.recompile()


def _replace(gm: torch.fx.GraphModule, boundary: torch.fx.Node) -> None:
    graph = gm.graph
    target: Boundary = boundary.target
    members = [n for n in graph.nodes if n.meta.get("fj_function") == target.region]
    member_set = set(members)
    for node in members:
        if any(user not in member_set and user is not boundary for user in node.users):
            raise RuntimeError("framejit: a custom Function's traced forward is read outside it")
    args = list(boundary.args)
    tensor_args = args[:target.n_args]
    results = args[target.n_args:]
    inputs = list(tensor_args)
    for node in members:
        for read in node.all_input_nodes:
            if read not in member_set and read not in inputs:
                inputs.append(read)
    for read in results:
        if read not in member_set and read not in inputs:
            inputs.append(read)
    outs, kept = results[:target.plan.n_outputs], results[target.plan.n_outputs:]
    refs, extras = [], []
    for node in kept:
        if node in outs:
            refs.append(("out", outs.index(node)))
        elif node in tensor_args or node not in member_set:
            refs.append(("in", inputs.index(node)))
        else:
            if node not in extras:
                extras.append(node)
            refs.append(("extra", extras.index(node)))
    sub = torch.fx.Graph()
    env = {}
    for k, node in enumerate(inputs):
        env[node] = sub.placeholder(f"input_{k}")
        env[node].meta = dict(node.meta)
    for node in members:
        if node.meta.get("fj_function_switch"):
            continue  # the grad-mode switches around the forward: CustomCall.forward runs under no_grad
        env[node] = sub.node_copy(node, lambda n: env[n])
    sub.output(tuple(env[n] for n in [*outs, *extras]))
    region = torch.fx.GraphModule(gm, sub)
    call = FunctionCall(region, target.plan, tuple(refs), target.n_args)
    with graph.inserting_before(boundary):
        new = graph.call_function(call, tuple(inputs))
        new.meta = dict(boundary.meta)
    boundary.replace_all_uses_with(new)
    graph.erase_node(boundary)
    for node in reversed(members):
        graph.erase_node(node)
