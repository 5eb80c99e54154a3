"""`torch.utils.checkpoint.checkpoint(fn, *args, use_reentrant=True)` captured: torch's own autograd Function
applied, in the graph, to the traced `fn`.

NOTE [Reentrant checkpoint in the graph]: eager's reentrant checkpoint is `CheckpointFunction.apply(fn,
preserve_rng_state, *args)`: its forward warns "None of the inputs have requires_grad=True" where no tensor
argument requires grad, keeps the RNG state (and autocast state), saves the tensor arguments and runs `fn`
under no_grad; its backward raises under `torch.autograd.grad` (or `backward(inputs=...)`), restores the RNG
state, runs `fn` again under enable_grad on detached arguments, and back-propagates through that run
(accumulating into the parameters `fn` reads). So `fn`'s tensor ops run twice (BatchNorm's running statistics
are updated twice, dropout draws the same mask twice), its parameters get gradients only through the
recomputation (None where no argument requires grad), and its outputs require grad exactly when an argument
does (with grad mode on).

The trace inlines `fn` under grad mode off (as the forward runs it) and tags the nodes it added with a region
number (`meta["fj_reentrant"]`); one boundary node (a `ReentrantBoundary` call) reads the tensor arguments and
`fn`'s tensor results, and its fake run applies a real autograd Function to the fakes, so the results have
the autograd facts eager's have. When the GraphModule is built, `reentrant_regions(gm)` moves each region into
a GraphModule and replaces the boundary by one call of `ReentrantCall`, which runs torch's
`CheckpointFunction.apply` with the region (closing over the values it reads other than the tensor arguments,
as `fn` reads its module's state) as the function: warnings, RNG replay, autocast, the second run of every
tensor op, gradients and the error under autograd.grad are torch's own, at the point eager has them.

What the region cannot repeat as eager's second run would, stays a graph break (torch's checkpoint then runs
at the break with `fn` compiled apart: NOTE [Reentrant checkpoint at a break] in hook.py), decided while
tracing `fn` and guarded as any trace is:
- an effect on Python state (a list append, an attribute store, a Python random draw): eager makes it again in
  the backward; the graph replays it once;
- a read of grad mode (`torch.is_grad_enabled()`, a grad-mode switch, `requires_grad`, a custom Function's
  apply): the forward runs under no_grad and the recomputation under grad, so eager may take another path;
- an in-place write of a tensor argument (eager's backward raises on its saved version; so would the region,
  but the trace's own bookkeeping of the write would not match), a result that is not a tensor made by `fn`
  (an argument returned as is, a closure's tensor, one tensor twice), a result other than a tensor or a tuple
  of tensors and constants, keyword arguments torch rejects, a `preserve_rng_state` not known while tracing,
  and a missing `use_reentrant` (torch warns at the caller's line first);
- a forward-AD dual level or a vmap around the call;
- a tensor argument that `fn` also reads another way (a closure, an attribute): NOTE [Arguments fn also reads
  elsewhere].

State `fn` reads that the program changes between the forward and the backward (eager's recomputation reads
the new state; the region has the trace's values): NOTE [State changed between the forward and the backward] in
reentrant_recall.py checks the frame's guards again in the recomputation and runs `fn` itself where one fails;
state the frame itself stores around the call: NOTE [State the frame writes around a reentrant call] in
reentrant_reads.py.
"""
from __future__ import annotations

import types

import torch

_REGIONS = [0]
_SWITCH = "fj_reentrant_switch"
_TAG = "fj_reentrant"


def _break(why: str):
    from .breaks import BreakKind, Unsupported
    return Unsupported(BreakKind.UNSUPPORTED_CALL, f"torch.utils.checkpoint.checkpoint with use_reentrant=True: {why}")


def check_grad_read(output, what: str) -> None:
    """NOTE [Reentrant checkpoint in the graph]: inside a traced reentrant `fn`, a read of grad mode is a break."""
    if output.__dict__.get("reentrant_depth"):
        raise _break(f"its function reads {what}, which its recomputation in backward (under grad) answers "
                     "otherwise than its forward (under no_grad)")


class ReentrantBoundary:
    """The traced reentrant call before `reentrant_regions` replaces it (only run on fakes)."""

    def __init__(self, region: int, n_args: int, items: tuple, single: bool, preserve: bool, recall: tuple) -> None:
        self.region, self.n_args, self.items, self.single, self.preserve = region, n_args, items, single, preserve
        self.recall = recall  # (recipes, Got, key): NOTE [State changed between the forward and the backward]
        self.n_outs = sum(item is None for item in items)  # then the nodes the recipes hold (reentrant_recall.py)
        self.__name__ = "reentrant_checkpoint"

    def __call__(self, *fakes):
        from .function_regions import _FakeApply
        fakes = fakes[:self.n_args + self.n_outs]
        if not all(isinstance(f, torch._subclasses.fake_tensor.FakeTensor) for f in fakes):
            raise RuntimeError("framejit: a reentrant checkpoint boundary ran outside tracing")
        plan = types.SimpleNamespace(non_differentiable=(), dirty=())
        return _FakeApply.apply(plan, list(fakes[self.n_args:]), *fakes[:self.n_args])

    def __reduce__(self):
        raise TypeError("a reentrant checkpoint boundary is not persisted")


class ReentrantCall:
    """A graph node's target: `CheckpointFunction.apply` of the traced region. Its inputs are the checkpoint's
    tensor arguments (`n_args`, what torch saves and detaches), then the other values the region reads; it
    returns the region's tensor results. `items` is the structure `fn` returned: None for a tensor, else
    ("const", value); `single`: `fn` returned one tensor; the last `n_held` inputs are the values `recall`'s recipes
    hold (the region does not read them)."""

    def __init__(self, region: torch.fx.GraphModule, n_args: int, items: tuple, single: bool,
                 preserve: bool, recall=None, n_held: int = 0) -> None:
        self.region, self.n_args, self.items, self.single, self.preserve = region, n_args, items, single, preserve
        self.recall = recall  # NOTE [State changed between the forward and the backward] (reentrant_recall.py)
        self.n_held = n_held
        self.__name__ = "reentrant_checkpoint"

    fj_eager_only = ("it applies torch's reentrant checkpoint (CheckpointFunction), whose backward no AOT trace "
                     "can run (NOTE [Calls that run as torch runs them] in backends/state.py)")

    def _function(self, rest: tuple, held: tuple, at_call):
        region, items, single, recall, runs = self.region, self.items, self.single, self.recall, [0]

        def run(*args):  # what eager's `fn` returns, from the region's tensors
            runs[0] += 1  # the first run is the forward's; later ones, backwards' recomputations
            if at_call is not None and runs[0] > 1 and not recall.holds(at_call, held):
                return recall.eager(at_call[1], held, args)  # NOTE [State changed between the forward and the ...]
            made = iter(region(*args, *rest))
            if single:
                return next(made)
            return tuple(next(made) if item is None else item[1] for item in items)
        return run

    # NOTE [Persisted reentrant checkpoints]: a graph calling a ReentrantCall is saved by the frame cache with
    # the call as plain data, the region node by node (frame_cache.dump_graph, as NOTE [Persisted transform
    # regions] saves a vmap body), and made again on load; anything in the region that does not pickle keeps
    # the entry in memory only (NotPersistable). So does a call with a Recall (NOTE [State changed between the
    # forward and the backward]): its getter, recipes and the frame binding are made while tracing only, and a
    # loaded call without them recomputed with the forward's state where it changed before the backward
    # (`model.eval()` between them: silently other gradients).
    def __reduce__(self):
        from .frame_cache import dump_graph
        if self.recall is not None:  # NOTE [Persisted reentrant checkpoints]
            from .locators import NotPersistable
            raise NotPersistable("a reentrant checkpoint's recall is not persisted (NOTE [State changed between the "
                                 "forward and the backward]): a loaded entry would recompute with the forward's state")
        return _loaded_call, (dump_graph(self.region), self.n_args, self.items, self.single, self.preserve,
                              self.n_held)

    def __call__(self, *inputs):
        from torch.utils.checkpoint import CheckpointFunction  # what checkpoint(use_reentrant=True) applies
        end = len(inputs) - self.n_held
        args, rest, held = inputs[:self.n_args], inputs[self.n_args:end], inputs[end:]
        at_call = self.recall.at_call() if self.recall is not None else None
        result = CheckpointFunction.apply(self._function(rest, held, at_call), self.preserve, *args)
        if self.single:
            return (result,)
        return tuple(r for r, item in zip(result, self.items) if item is None)


def _loaded_call(region: bytes, n_args: int, items: tuple, single: bool, preserve: bool,
                 n_held: int = 0) -> ReentrantCall:
    from .frame_cache import load_graph  # NOTE [Persisted reentrant checkpoints]
    return ReentrantCall(load_graph(region), n_args, items, single, preserve, None, n_held)


def _options(kwargs: dict):
    """preserve_rng_state, checked as torch checks the reentrant call's keywords; a break otherwise."""
    from torch.utils.checkpoint import noop_context_fn
    kwargs = dict(kwargs)
    kwargs.pop("use_reentrant", None)
    kwargs.pop("determinism_check", None)  # the reentrant variant ignores both
    kwargs.pop("early_stop", None)
    preserve = kwargs.pop("preserve_rng_state", None)
    context_fn, debug = kwargs.pop("context_fn", None), kwargs.pop("debug", None)
    if kwargs:
        raise _break("keyword arguments for the function (torch raises ValueError)")
    if context_fn is not None and not (context_fn.is_constant() and context_fn.as_constant() is noop_context_fn) \
            and getattr(context_fn, "fn", None) is not noop_context_fn:
        raise _break("a context_fn (torch raises ValueError)")
    if debug is not None and not (debug.is_constant() and debug.as_constant() is False):
        raise _break("debug (torch raises ValueError)")
    if preserve is None:
        return True
    if not preserve.is_constant():
        raise _break("a preserve_rng_state not known while tracing")
    return preserve.as_constant()


def _outputs(result) -> tuple[list, tuple, bool]:
    """`fn`'s tensor results, per result item None (a tensor) or ("const", value), and whether it is one tensor."""
    from .values import TensorValue, TupleValue
    if isinstance(result, TensorValue):
        return [result], (None,), True
    if isinstance(result, TupleValue) and result.python_type() is tuple:
        outs, items = [], []
        for item in result.items:
            if isinstance(item, TensorValue):
                outs.append(item)
                items.append(None)
            elif item.is_constant():
                items.append(("const", item.as_constant()))
            else:
                raise _break("its function returns a tuple holding something other than tensors and constants")
        if outs:
            return outs, tuple(items), False
    raise _break("its function returns something other than a tensor or a tuple of tensors")


_PLAIN = (type(None), bool, int, float, str)


class _PythonState:
    """What the traced `fn` changed in Python state: nothing, or only attribute stores that leave each attribute
    as it was (a context variable set and reset: kernels' `CompileableContextVar` around a hub layer), which a
    second run in backward leaves as it is too. In-place tensor ops are not counted: the region repeats them."""

    def __init__(self, effects) -> None:
        from .values.base import MADE_ORDER
        self.effects = effects
        self.counts = self._counts()
        self.attrs = dict(effects.attrs)
        self.touched = len(effects.touched)
        self.first_new = next(MADE_ORDER)

    def _counts(self) -> tuple:
        e = self.effects
        return (e.version - e.tensor_writes - getattr(e, "attr_stores", 0), len(e.ops), len(e.finishing_calls),
                len(e.tensor_hooks), len(e.item_writes), len(e._moved_iterators()))

    def unchanged(self) -> bool:
        e = self.effects
        if self._counts() != self.counts or any(getattr(v, "serial", -1) < self.first_new
                                                for v in e.touched[self.touched:]):
            return False  # an effect other than attribute stores, or a store into a value made before `fn`
        return all(self._restored(key, entry) for key, entry in e.attrs.items() if self.attrs.get(key) is not entry)

    def _restored(self, key, entry) -> bool:
        obj, name, value = entry
        if key in self.attrs:
            before = self.attrs[key][2]
            if value is before:
                return True
            if not before.is_constant():
                return False
            before = before.as_constant()
        else:
            before = getattr(getattr(obj, "obj", None), "__dict__", {}).get(name, _PythonState)
        if not value.is_constant() or type(before) not in _PLAIN:
            return False
        after = value.as_constant()
        return type(after) is type(before) and after == before


def call_reentrant(tx, args: list, kwargs: dict):
    """The traced `checkpoint(fn, *args, use_reentrant=True, ...)` (NOTE [Reentrant checkpoint in the graph])."""
    from torch.utils.checkpoint import CheckpointFunction
    from .autograd_function import _no_forward_ad
    from .values import TensorValue
    out = tx.output
    if not args:
        raise _break("no function (torch raises TypeError)")
    preserve = _options(kwargs)
    if out.__dict__.get("vmap_depth"):
        raise _break("inside torch.vmap or a torch.func transform")
    _no_forward_ad(tx, CheckpointFunction)
    function, fn_args = args[0], list(args[1:])
    tensor_args = [a for a in fn_args if isinstance(a, TensorValue)]
    if any(isinstance(a.fake, torch.Tensor) and type(a.fake) is not torch._subclasses.fake_tensor.FakeTensor
           for a in tensor_args):
        raise _break("a tensor subclass argument")
    graph = out.graph
    recall = _recipes(tx, function, fn_args)
    fn_args, markers = _own_arguments(graph, fn_args)
    try:
        return _traced(tx, function, fn_args, tensor_args, markers, (preserve, recall))
    finally:
        for original, marker in markers:  # NOTE [Arguments fn also reads elsewhere]
            marker.replace_all_uses_with(original)
            graph.erase_node(marker)


def _recipes(tx, function, fn_args: list) -> tuple:
    """(recipes of `function` and `fn_args`, what they read (reentrant_recall.Got), where the call is): NOTE [State
    changed between the forward and the backward] (reentrant_recall.py). A break where one cannot be got again, or
    where an earlier trace found a cell `fn` closes over written after the call (NOTE [Cells written after the
    call])."""
    from .reentrant_recall import Got, breaks_here, recipe
    from .values import TensorValue
    key = (tx.code, tx.current.index if tx.current is not None else -1)
    if breaks_here(tx.output, key):
        raise _break("a closure variable or a value made in the frame that its function reads is written after the "
                     "call, and eager's recomputation in backward reads it then (NOTE [Cells written after the call], "
                     "NOTE [State the frame writes around a reentrant call])")
    got = Got()
    items, k = [recipe(function, got)], 0
    for a in fn_args:  # a tensor argument: torch's detached one at its position (one passed twice: each apart)
        if isinstance(a, TensorValue):
            items.append(("tensor", k))
            k += 1
        else:
            items.append(recipe(a, got))
    if None in items:
        what = "its function" if items[0] is None else f"its argument {items.index(None)}"
        raise _break(f"{what} cannot be got again for the recomputation in backward, which eager's reads from the "
                     "state of that moment (NOTE [State changed between the forward and the backward])")
    from .reentrant_recall import stored_after
    root = (tx.output.__dict__.get("tx_stack") or [tx])[0]
    names = {id(cell): name for name, cell in root.cells.items()}  # the root frame's own cells
    later = stored_after(root) if got.cells else set()
    got.cells = [(cell, held, names.get(id(cell)), names.get(id(cell)) in later) for cell, held in got.cells]
    return tuple(items), got, key


def _argument(t):
    """A tensor argument as `fn`'s parameter reads it, while tracing `fn` only (NOTE [Arguments fn also reads
    elsewhere])."""
    return t


def _own_arguments(graph, fn_args: list) -> tuple[list, list]:
    """NOTE [Arguments fn also reads elsewhere]: torch's recomputation detaches the arguments only where `fn`'s
    parameters read them; a read of the same tensor from a closure (or an attribute) gets the tensor itself, with
    its graph (a hook on it runs twice, a non-leaf's graph is back-propagated twice). While `fn` is traced, its
    parameters read a marker node (the same fake, so `t is x` answers as eager's forward), so a region that reads
    the argument's own node reached it another way: a break (torch's checkpoint runs at it, as eager)."""
    import copy
    from .values import TensorValue
    made, markers, own = {}, [], []
    for a in fn_args:
        if isinstance(a, TensorValue):
            if id(a) not in made:
                marker = graph.call_function(_argument, (a.node,))
                marker.meta = dict(a.node.meta)
                markers.append((a.node, marker))
                made[id(a)] = copy.copy(a)
                made[id(a)].node = marker
            a = made[id(a)]
        own.append(a)
    return own, markers


def _traced(tx, function, fn_args: list, tensor_args: list, markers: list, options: tuple):
    """`call_reentrant` once each argument has its own node (NOTE [Arguments fn also reads elsewhere])."""
    from .autograd_grad import _switch
    from .breaks import UserException
    from .graph_calls import _version
    from .reentrant_reads import traced, tracing
    out = tx.output
    graph = out.graph
    preserve, recall = options
    before = set(graph.nodes)
    state = _PythonState(out.side_effects)
    versions = [_version(a.fake) for a in tensor_args]
    _REGIONS[0] += 1
    region, grad = _REGIONS[0], out.grad_enabled
    if grad:  # an inner reentrant call (grad already off) switches nothing
        _switch(out, False, _SWITCH)
    out.reentrant_depth = out.__dict__.get("reentrant_depth", 0) + 1
    outer = tracing(out.side_effects)  # NOTE [State the frame writes around a reentrant call]
    out.side_effects.region_reads.got = recall[1]
    try:
        result = tx.call(function, fn_args, {})
    except UserException:  # eager raises it from the forward: the call runs as Python at a break
        raise _break("its function raises while traced") from None
    finally:
        recall[1].reads = traced(out.side_effects, outer)
        out.reentrant_depth -= 1
        if grad:
            _switch(out, True, _SWITCH)
    if not state.unchanged():
        raise _break("its function has effects on Python state (eager's backward makes them again)")
    if [_version(a.fake) for a in tensor_args] != versions:
        raise _break("its function writes an argument in place")
    outs, items, single = _outputs(result)
    made = [n for n in graph.nodes if n not in before]
    made_set = set(made)
    originals = {original for original, _ in markers}
    if any(read in originals for node in made for read in node.all_input_nodes):
        raise _break("its function reads a tensor argument other than through its parameters (eager's "
                     "recomputation detaches only the parameters)")
    if len({id(o.node) for o in outs}) != len(outs) or any(o.node not in made_set or o.node.op == "placeholder"
                                                          for o in outs):
        raise _break("its function returns a tensor it did not make, or one tensor twice")
    for node in made:
        if node.meta.get(_SWITCH):
            node.meta[_SWITCH] = region
        elif node.op in ("call_function", "call_method", "call_module"):
            node.meta.setdefault(_TAG, region)  # an inner reentrant region keeps its own number
    boundary = ReentrantBoundary(region, len(tensor_args), items, single, bool(preserve), recall)
    held = recall[1].nodes  # the values the recipes hold: NOTE [State changed between the forward and the backward]
    applied = out.call("call_function", boundary, tuple([*tensor_args, *outs, *held]), {})
    results = iter(applied.items)
    if single:
        return next(results)
    from .values import ConstantValue, TupleValue
    return TupleValue([next(results) if item is None else ConstantValue(item[1]) for item in items])


def reentrant_regions(gm: torch.fx.GraphModule, frame: tuple | None = None) -> None:
    """Replace each ReentrantBoundary node and its region by one ReentrantCall (NOTE [Reentrant checkpoint in the
    graph]); `frame`: (output, shape, fn, whether the graph is the one before a break) of the frame, for NOTE [State
    changed between the forward and the
    backward], or None."""
    from .nonreentrant_cells import check
    check(frame)  # NOTE [Non-reentrant checkpoint over cells written later] (before any region is replaced)
    graph = gm.graph
    boundaries = [n for n in graph.nodes if n.op == "call_function" and isinstance(n.target, ReentrantBoundary)]
    if not boundaries:
        return
    for boundary in boundaries:  # graph order: an inner region is replaced before the one around it
        _replace(gm, boundary, frame)
    graph.lint()
    gm.recompile()


def frame_binding(gm: torch.fx.GraphModule):
    """A FrameBinding where a ReentrantCall of `gm` has a Recall, else None (NOTE [State changed between the
    forward and the backward], reentrant_recall.py)."""
    if not any(isinstance(n.target, ReentrantCall) and n.target.recall is not None for n in gm.graph.nodes):
        return None
    from .reentrant_recall import FrameBinding
    return FrameBinding()


def _written(node: torch.fx.Node) -> torch.fx.Node | None:
    """The tensor an in-place op `node` writes and returns (its first argument), or None."""
    name = node.target if node.op == "call_method" else getattr(node.target, "__name__", "")
    if isinstance(name, str) and name.endswith("_") and not name.endswith("__") and node.args \
            and isinstance(node.args[0], torch.fx.Node):
        return node.args[0]
    return None


def _replace(gm: torch.fx.GraphModule, boundary: torch.fx.Node, frame: tuple | None) -> None:
    graph = gm.graph
    target: ReentrantBoundary = boundary.target
    members = [n for n in graph.nodes if n.meta.get(_TAG) == target.region]
    member_set = set(members)
    for node in members:  # an in-place write's result read after the call: the tensor it wrote, as in eager
        outside = [u for u in node.users if u not in member_set and u is not boundary]
        if not outside:
            continue
        written = _written(node)
        while written is not None and written in member_set:
            written = _written(written)
        if written is None:
            raise RuntimeError("framejit: a reentrant checkpoint's traced function is read outside it")
        for user in outside:
            user.replace_input_with(node, written)
    n_args, n_outs = target.n_args, target.n_outs
    tensor_args, outs = list(boundary.args[:n_args]), list(boundary.args[n_args:n_args + n_outs])
    held = list(boundary.args[n_args + n_outs:])  # NOTE [State changed between the forward and the backward]
    inputs = list(tensor_args)
    rest = []
    for node in members:
        for read in node.all_input_nodes:
            if read not in member_set and read not in inputs and read not in rest:
                rest.append(read)
    from .pinned_targets import new_graph  # NOTE [Graph targets pinned by identity]
    sub = new_graph()
    env = {}
    for k, node in enumerate([*inputs, *rest]):
        placeholder = sub.placeholder(f"input_{k}")
        placeholder.meta = dict(node.meta)
        env.setdefault(node, placeholder)  # a tensor passed twice: its first position, as fn's parameters read it
    for node in members:
        env[node] = sub.node_copy(node, lambda n: env[n])
    sub.output(tuple(env[n] for n in outs))
    recall = None
    if frame is not None:  # NOTE [State changed between the forward and the backward]
        from .reentrant_recall import make_recall
        by_node = {getattr(inp.value, "node", None): inp.source for inp in frame[0].inputs}
        watched = [by_node[n] for n in rest if n in by_node]  # graph inputs the region reads: eager reads them again
        recall = make_recall(*target.recall, watched, *frame)
    call = ReentrantCall(torch.fx.GraphModule(gm, sub), n_args, target.items, target.single,
                         target.preserve, recall, len(held))
    with graph.inserting_before(boundary):
        new = graph.call_function(call, tuple([*inputs, *rest, *held]))
        new.meta = dict(boundary.meta)
    boundary.replace_all_uses_with(new)
    graph.erase_node(boundary)
    for node in reversed(members):
        graph.erase_node(node)
    for node in [n for n in graph.nodes if n.meta.get(_SWITCH) == target.region]:
        graph.erase_node(node)  # the grad-mode switches around the traced forward: torch's Function runs it


def register() -> None:
    """`torch.is_grad_enabled()` read inside a traced reentrant `fn` is a break (NOTE [Reentrant checkpoint in
    the graph]); elsewhere its handler answers as before."""
    from .builtins import BUILTIN_HANDLERS
    plain = BUILTIN_HANDLERS[torch._C.is_grad_enabled]

    def is_grad_enabled(tx, args, kwargs):
        check_grad_read(tx.output, "torch.is_grad_enabled()")
        return plain(tx, args, kwargs)
    BUILTIN_HANDLERS[torch._C.is_grad_enabled] = is_grad_enabled
