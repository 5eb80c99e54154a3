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

NOTE [Persisted custom Function calls]: a FunctionCall is persisted (frame cache, joint key) as plain data
(`persisted_data`): the user's class by import locator (verified to import back to the very class), the
plan's fields (constants only), the region node by node, and a digest of the user's backward: its code
hash and the backward probe's nodes as traced (targets by name, constants by value, other nodes by name:
what the backward computed under the facts the probe read). `rebuild` resolves the class again and refuses
it (NotPersistable) unless its backward's code hash is the persisted one. The probe's guards are the
frame entry's own and are persisted with it; a changed backward or helper it inlined changes the callee
hashes the frame cache checks; the joint key hashes this data, so a backward traced into a joint's
backward half under other code or other facts is another key. A class that is not importable by name (a
class made in a function), a plan holding live objects, or a probe node whose target has no stable name
keeps the graph in memory only, as before. Generic pickling (`__reduce__`) is still refused.
"""
from __future__ import annotations

import dataclasses
import hashlib
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
    dirty: tuple = ()  # indices among CustomCall's tensor inputs marked dirty (NOTE [Inputs marked dirty])


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
        ctx.mark_dirty(*[args[i] for i in plan.dirty])
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

    def __init__(self, region: torch.fx.GraphModule, plan: Plan, refs: tuple, n_args: int,
                 backward_digest: str | None = None) -> None:
        self.region, self.plan, self.refs, self.n_args = region, plan, refs, n_args
        self.backward_digest = backward_digest  # NOTE [Persisted custom Function calls]
        self.__name__ = f"{plan.cls.__name__}_apply"

    def __call__(self, *inputs):
        if not torch._C.is_grad_enabled() or not any(i.requires_grad for i in inputs[:self.n_args]):
            with torch.no_grad():  # autograd records nothing: the forward as eager runs it (an inference
                return tuple(self.region(*inputs))  # lowering also meets no autograd.Function here)
        return CustomCall.apply(self, *inputs)

    def __reduce__(self):
        raise TypeError("a custom autograd Function call is not persisted")

    def persisted_data(self) -> tuple:
        """This call as plain data (NOTE [Persisted custom Function calls]); raises NotPersistable."""
        from .locators import NotPersistable, _import_locator, code_hash
        if self.backward_digest is None:
            raise NotPersistable(f"the backward of {self.plan.cls.__qualname__} could not be described")
        fields = tuple(getattr(self.plan, f.name) for f in dataclasses.fields(Plan) if f.name != "cls")
        if not _plain(fields) or not _plain(self.refs):
            raise NotPersistable(f"the plan of {self.plan.cls.__qualname__}.apply holds live objects")
        backward = user_backward(self.plan.cls)
        return (_import_locator(self.plan.cls), code_hash(backward.__code__), self.backward_digest, fields,
                self.refs, self.n_args, region_nodes(self.region))

    @staticmethod
    def rebuild(data: tuple) -> "FunctionCall":
        """The call `persisted_data` described, its class found again; raises NotPersistable where the
        class is not a Function or its backward is not the code the call was traced with."""
        from torch.autograd.function import Function
        from .locators import NotPersistable, code_hash, resolve
        locator, backward_hash, digest, fields, refs, n_args, nodes = data
        cls = resolve(locator, None)
        if not (isinstance(cls, type) and issubclass(cls, Function)):
            raise NotPersistable(f"{locator[1]}.{locator[2]} is no longer an autograd Function")
        if code_hash(user_backward(cls).__code__) != backward_hash:
            raise NotPersistable(f"the backward of {cls.__qualname__} changed since it was cached")
        return FunctionCall(region_graph(nodes), Plan(cls, *fields), refs, n_args, digest)


_PLAIN = (type(None), bool, int, float, complex, str, torch.dtype, torch.device, torch.memory_format, torch.layout)


def _plain(value: Any) -> bool:
    if isinstance(value, (tuple, list)):
        return all(_plain(v) for v in value)
    return type(value) in _PLAIN


@dataclasses.dataclass(frozen=True)
class RegionRef:
    """A node argument of a persisted region: the index of the node it names."""
    index: int


def region_nodes(gm: torch.fx.GraphModule) -> list[tuple]:
    """`gm`'s nodes as (op, name, target, args, kwargs) with node arguments as RegionRef (nested
    FunctionCall targets stay: the pickler that persists them describes them in turn)."""
    from .locators import NotPersistable
    index: dict[torch.fx.Node, int] = {}
    nodes = []
    for node in gm.graph.nodes:
        if node.op in ("get_attr", "call_module"):
            raise NotPersistable(f"a custom Function's region reads module state ({node.op} {node.target})")
        index[node] = len(nodes)
        args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), lambda n: RegionRef(index[n]))
        nodes.append((node.op, node.name, node.target, args, kwargs))
    return nodes


def region_graph(nodes: list[tuple]) -> torch.fx.GraphModule:
    from .pinned_targets import new_graph  # NOTE [Graph targets pinned by identity]
    graph = new_graph()
    made: list[torch.fx.Node] = []
    for op, name, target, args, kwargs in nodes:
        args, kwargs = torch.fx.node.map_aggregate(
            (args, kwargs), lambda a: made[a.index] if isinstance(a, RegionRef) else a)
        made.append(graph.output(args[0]) if op == "output" else graph.create_node(op, target, args, kwargs, name=name))
    return torch.fx.GraphModule(torch.nn.Module(), graph)


def _stable_name(target: Any) -> str | None:
    """A target's name that is the same in every process (None for an object that has none)."""
    if isinstance(target, str):
        return target
    if isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return str(target)
    module = getattr(target, "__module__", None)
    name = getattr(target, "__qualname__", None) or getattr(target, "__name__", None)
    if not isinstance(module, str) or not isinstance(name, str) or "<" in name:
        return None
    return f"{module}.{name}"


def probe_digest(gm: torch.fx.GraphModule, probes: list, classes: set) -> str | None:
    """The backward digest of NOTE [Persisted custom Function calls]: the probe nodes (`probes`, in graph
    order) and the code of each class's backward; None where a target or constant has no stable form."""
    from .locators import code_hash
    digest = hashlib.sha256()
    for cls in sorted(classes, key=lambda c: (c.__module__, c.__qualname__)):
        digest.update(f"{cls.__module__}.{cls.__qualname__}:{code_hash(user_backward(cls).__code__)}".encode())
    for node in probes:
        target = _stable_name(node.target)
        if target is None:
            return None
        unstable = []

        def arg(a):
            if isinstance(a, torch.fx.Node):
                return ("node", a.name)
            if isinstance(a, (tuple, list)):
                return (type(a).__name__, tuple(arg(v) for v in a))
            if isinstance(a, dict):
                return ("dict", tuple((k, arg(v)) for k, v in a.items()))
            if isinstance(a, slice):
                return ("slice", arg(a.start), arg(a.stop), arg(a.step))
            if type(a) in _PLAIN or a is Ellipsis or isinstance(a, torch.Size):
                return repr(a)
            unstable.append(a)
            return None
        described = (node.op, node.name, target, arg(node.args), arg(node.kwargs))
        if unstable:
            return None
        digest.update(repr(described).encode())
    return digest.hexdigest()


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
        ctx.mark_dirty(*[args[i] for i in plan.dirty])  # NOTE [Inputs marked dirty]
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
    # NOTE [Persisted custom Function calls]: every call in the graph gets the digest of all probes
    digest = probe_digest(gm, probes, {b.target.plan.cls for b in boundaries}) if boundaries else None
    for node in reversed(probes):  # the backward's trace: checked, then dropped
        if not node.users:
            graph.erase_node(node)
    if not boundaries:
        if probes:
            gm.recompile()
        return
    for boundary in boundaries:
        _replace(gm, boundary, digest)
    graph.lint()
    gm.recompile()


def _replace(gm: torch.fx.GraphModule, boundary: torch.fx.Node, digest: str | None) -> None:
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
    from .pinned_targets import new_graph  # NOTE [Graph targets pinned by identity]
    sub = new_graph()
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
    call = FunctionCall(region, target.plan, tuple(refs), target.n_args, digest)
    with graph.inserting_before(boundary):
        new = graph.call_function(call, tuple(inputs))
        new.meta = dict(boundary.meta)
    boundary.replace_all_uses_with(new)
    graph.erase_node(boundary)
    for node in reversed(members):
        graph.erase_node(node)
