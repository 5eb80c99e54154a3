"""`tensor.register_hook(fn)` inside compiled code (issue 11).

NOTE [Tensor hooks registered after the graph]: a gradient hook registered on an intermediate (`y = x * 2;
y.register_hook(fn)`) or on an input was a graph break (2 graphs where stock torch.compile makes 1). A tensor
hook does nothing until the backward reaches that tensor, and it applies to the tensor's whole gradient,
whatever uses of the tensor came before or after the registration; so registering it when the graph has
returned, on the same tensor object, is what eager's registration inside the frame does. The tensor becomes
a graph output (an input is reloaded from its source), the hook is rebuilt like any value the replay
needs (a function from outside, a closure of the trace), and `codegen_runtime.register_tensor_hook`
registers it after the graph with the id eager's handle took: the counter at entry plus the ids the trace
handed out before it (NOTE [Hooks registered in the trace]); a finishing call advances the counter after,
and no guard on the counter is needed for it. A break later in the frame replays it before the unsupported
instruction runs (a `backward()` or `torch.autograd.grad` call inside the frame then sees it).

For an intermediate, that is the same tensor only while the graph runs as its own code: a backend's joint
(AOT autograd: onnxrt, triton) returns a new output tensor whose gradient the graph's own uses do not reach.
Such a graph therefore runs as the graph module's own code (convert._backend_compile, with a line under
`eager_fallback`), and the entry is not persisted (its runtime differs from what the backend made). A write
in place to the tensor (or a view of it) after the registration is a graph break before the write (`check_hooked_unchanged`), so the hook is registered
before it as in eager (the write gives it a new grad_fn, whose gradient the hook would see otherwise).
Handled here only when the handle is discarded
(the next instruction is POP_TOP; a handle kept, `h = y.register_hook(fn)` for a later `h.remove()`, is a
break as before), the tensor requires grad (else eager's RuntimeError), and the hook is a value the replay
can rebuild; other cases are a graph break.

NOTE [Autograd nodes of a graph's results]: `y.grad_fn` of an intermediate is a graph break, and after it the
Python code sees the graph's output y. From a backend's joint that is the node of the whole graph
(CompiledFunctionBackward), not the node of y's last op: `y.grad_fn.register_hook(h)` saw the gradients of
the graph's inputs (eager: of the op's inputs; a hook returning one value where the op has two raised in eager
and passed compiled), `register_prehook` saw every output's gradient. So a graph one of whose results has its
`grad_fn` read at the break runs as its own code too (`grad_fn_break`); reads later in the frame (and hooks,
retain_grad, autograd.grad on its results there): NOTE [Autograd state observed after a break]
(`mark_results_across_break`). Reads of `grad_fn` of a tensor that an earlier frame's graph returned (a compiled callee's
result) see that graph's node, as with stock torch.compile.

NOTE [Retained gradients of inputs written in place]: `y.retain_grad()` is a graph break; when a later graph
writes y in place (`y.mul_(3)`), eager's retained gradient follows y to its new version (the gradient of the
uses after the write), but a joint's write-back (`y.copy_(new)` after the autograd.Function) gives y a node
that the graph's own later uses do not reach: y.grad stayed None. A graph that records autograd therefore runs
as its own code at a call where one of its tensor arguments retains its gradient (saved_hooks.HookAware, a check
at the call as for saved-tensors hooks).
"""
from __future__ import annotations

from .breaks import BreakKind, Unsupported, UserException
from .values import (BoundMethodValue, ConstantValue, NNModuleValue, ObjectValue, PartialValue, TensorValue,
                     UserFunctionValue, Value)


def register_hook(tx, tensor: TensorValue, args: list[Value], kwargs: dict[str, Value]) -> Value:
    if len(args) != 1 or kwargs or not _handle_discarded(tx):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "Tensor.register_hook() whose handle is kept")
    hook = args[0]
    if not _rebuildable(hook):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"Tensor.register_hook() of {hook.describe()}")
    if not tensor.fake.requires_grad:
        raise UserException(RuntimeError("cannot register a hook on a tensor that doesn't require gradient"))
    from .hook_handles import _taken, advance_tensor_hook_id
    offset = _taken(tx.output)  # the ids handed out before this one in the trace
    tx.output.side_effects.record_finishing_call(advance_tensor_hook_id, [], walks_unchanged=True)
    if tensor.source is None:
        # runs as the graph's own code (convert._backend_compile), logged under eager_fallback
        tx.output.__dict__["hooked_outputs"] = "a tensor hook is registered on one of its results"
        tx.output.__dict__["process_local"] = "the graph registers tensor hooks on its outputs"
    elif _written_input(tx.output, tensor):  # NOTE [Hooks on inputs written in place]
        tx.output.__dict__["hooked_outputs"] = "a tensor hook is registered on an input it writes in place"
        tx.output.__dict__["process_local"] = "the graph registers tensor hooks on inputs it writes"
    tx.output.side_effects.record_tensor_hook(tensor, hook, offset)
    tx.output.__dict__.setdefault("hooked_fakes", []).append((tensor.fake, tensor.fake._version))
    return ConstantValue(None)


# NOTE [Autograd nodes known absent or present]: `y.grad_fn is not None` (or `is None`, `if y.grad_fn is None:`)
# broke the graph, and the resume function then got the autograd node on its stack, which no break can pass
# on: the whole resume frame ran eagerly (hhuntG3 MED-4). Whether a tensor has a node is known where eager's
# answer follows from what the trace knows: a tensor that does not require grad has none (an input's
# requires_grad is guarded; a result's is the fake's, made under the traced grad mode), and a result of the
# graph that requires grad has one exactly when its fake has one (an op recorded under grad mode; a factory
# with requires_grad=True is a leaf). So `y.grad_fn` of a tensor that does not require grad is None, and of a
# result that requires grad, where the next instructions only compare it with None (LOAD_CONST None + IS_OP,
# POP_JUMP_IF_NONE / POP_JUMP_IF_NOT_NONE) or test its truth (`if p.grad_fn:`, as Module.register_parameter
# does; a node is always truthy), a stand-in that is not None (`_NODE`, consumed at once). Kept as
# breaks: an input that requires grad (its is_leaf is not guarded), an input the graph wrote in place (NOTE
# [Hooks on inputs written in place]), a tensor subclass, any other use of a node.
class _Node:
    def __repr__(self) -> str:
        return "<autograd node>"


_NODE = _Node()


def grad_fn_value(tx, tensor: TensorValue) -> Value:
    """`tensor.grad_fn` where eager's answer is known (NOTE [Autograd nodes known absent or present]), else the
    break of NOTE [Autograd nodes of a graph's results]."""
    from .tensor_subclasses import is_subclass_type
    from .vmap_capture import check_grad_fact
    if is_subclass_type(tensor.cls):
        raise grad_fn_break(tensor, tx.output)
    check_grad_fact(tx.output, "requires_grad")
    if not tensor.fake.requires_grad:
        return ConstantValue(None)
    if tensor.source is not None or _written_input(tx.output, tensor) or not _compared_with_none(tx):
        raise grad_fn_break(tensor, tx.output)
    return ConstantValue(None if tensor.fake.grad_fn is None else _NODE)


def _compared_with_none(tx) -> bool:
    insts, here = tx.program.insts, tx.current
    if here is None or here.name != "LOAD_ATTR" or here.index + 1 >= len(insts):
        return False
    after = insts[here.index + 1]
    if after.name in ("POP_JUMP_IF_NONE", "POP_JUMP_IF_NOT_NONE", "POP_JUMP_IF_FALSE", "POP_JUMP_IF_TRUE"):
        return True  # (an autograd node is always truthy: no __bool__, no __len__)
    return after.name == "LOAD_CONST" and after.arg is None and here.index + 2 < len(insts) and \
        insts[here.index + 2].name == "IS_OP"


def grad_fn_break(tensor: TensorValue, output=None) -> Unsupported:
    """The graph break at `tensor.grad_fn` (NOTE [Autograd nodes of a graph's results]): for a result of the
    graph (or an input it wrote in place: the joint's write-back gave it another node, NOTE [Hooks on inputs
    written in place]), it carries what `mark_result_node_reads` gives the graph compiled before the break."""
    e = Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE, "Tensor.grad_fn is state outside the graph")
    if tensor.fake.requires_grad and (tensor.source is None or _written_input(output, tensor)):
        e.reads_result_node = True
    return e


def mark_result_node_reads(exc, output) -> None:
    """The graph traced up to the break at `exc` runs as its own code when the break reads a result's
    `grad_fn` (convert._break_entry, on the trace made again up to the break)."""
    if getattr(exc, "reads_result_node", False):
        output.__dict__.setdefault("hooked_outputs", "Tensor.grad_fn of one of its results is read after it")
        output.__dict__["process_local"] = "the graph's results have their autograd nodes read"


def mark_results_across_break(output, live: list, gen=None) -> None:
    """NOTE [Autograd state observed after a break]: a backend's joint (onnxrt, triton: AOT autograd, one
    autograd.Function per graph) hands the Python code after a break new output tensors: their `grad_fn` is the
    node of the whole graph, and the graph's own uses of an intermediate do not flow through the output tensor.
    Code after the break that looks at the autograd graph of a result sees what eager never shows:
    `y.grad_fn.register_hook(h)` saw other gradients (review revG G4), `type(y.grad_fn).__name__` named the
    joint (revE E7), `y.register_hook(h)`, `y.retain_grad()`, `torch.autograd.grad(loss, y)`,
    `backward(inputs=[y])` missed the gradient of y's uses before the break; an input the graph wrote in place
    got the joint's write-back as its node (G7). None of it can be repaired once the joint ran, and what the code
    after the break does cannot be known from its instructions: a submodule's forward, a helper in another
    module, a functools.partial, a bound method taken before the break or torch.autograd under another name
    (review revI I2/I4) defeated a scan of that code (025dbb8). So a graph that ends at a break and passes on
    a tensor that requires grad (a result live at the break, or an input it wrote in place) runs as its own
    code (its autograd records eager's nodes) where it records autograd (`own_code_reason`): logged under
    `eager_fallback`, counted in `framejit.stats()["graphs_own_code"]`, the entry not persisted. The graph the
    frame returns from is not concerned: its results go to the caller, which sees the joint's node as with stock
    torch.compile. Cost: a training frame with a break runs its graphs before the break as eager autograd on
    the training backends (the graph after the last break keeps the joint), except where the break is plain and
    the code after it provably passes those results only to graphs: NOTE [Joints kept across a plain break]
    (kept_joints.py)."""
    passed = [v for v in live if isinstance(v, TensorValue) and v.source is None and v.fake.requires_grad]
    written = [e for e in output.mutated_entries if getattr(getattr(e, "value", None), "fake", None) is not None
               and e.value.fake.grad_fn is not None]  # a write autograd recorded (not an optimizer step)
    if passed and not written and gen is not None:
        from .kept_joints import speculable  # NOTE [Joints kept across a plain break]
        if speculable(output, gen, live):
            output.__dict__["speculated"] = True  # kept_joints.speculated wraps the backend's joint
            return
    if passed or written:
        output.__dict__["observed_after_break"] = "a tensor that requires grad lives across its break " \
            "(the code after it may observe its autograd node)"


def own_code_reason(output, gm, example_inputs: list, compiled_is_own: bool = False) -> str | None:
    """Why the graph must run as its own code rather than the backend's (convert._backend_compile), or None.
    `compiled_is_own`: the backend returned the graph's own code (the eager backend), whose autograd is eager's:
    a tensor passed across a break needs nothing then, and the entry persists as before."""
    if output.__dict__.get("hooked_outputs"):
        return output.__dict__["hooked_outputs"]
    reason = output.__dict__.get("observed_after_break")
    from .saved_hooks import records_autograd
    if reason and not compiled_is_own and records_autograd(gm, output.grad_enabled, example_inputs):
        output.__dict__["process_local"] = "the code after the graph observes its results' autograd state"
        return reason
    return None


def _written_input(output, tensor: TensorValue) -> bool:
    """NOTE [Hooks on inputs written in place]: `y.add_(w); y.register_hook(h)` on an input y. Eager's hook goes
    on y's new version, whose gradient the uses after the write carry. A joint computes those uses from its own
    copy of the new value and writes it back into y afterwards (`y.copy_(new)`: another node), so the hook saw
    no gradient at all (x.grad 6.3 where eager gives 31.5, review revG G7) and `y.grad_fn` named the copy.
    Such a graph runs as its own code. A hook registered before the write is a break before it
    (`check_hooked_unchanged`); one registered by the caller before the call sees the old version's gradient,
    which the joint computes as eager does."""
    if output is None or tensor.source is None:
        return False
    return any(entry.value is tensor or getattr(entry.value, "fake", None) is tensor.fake
               for entry in output.mutated_entries)


def check_hooked_unchanged(out) -> None:
    """An in-place op just ran while tracing: one that wrote a tensor (or a view of it) after a hook was
    registered on it is a graph break before the op, so the hook is registered where eager registers it (the
    write gives the tensor a new grad_fn; registered after it, the hook would see the new version's gradient)."""
    if any(fake._version != version for fake, version in out.__dict__.get("hooked_fakes", ())):
        raise Unsupported(BreakKind.SIDE_EFFECT, "an in-place write to a tensor after a hook was registered on it")


def _handle_discarded(tx) -> bool:
    insts = tx.program.insts
    return tx.pc < len(insts) and insts[tx.pc].name == "POP_TOP"


def _rebuildable(hook: Value) -> bool:
    if isinstance(hook, UserFunctionValue):
        return True  # from outside (its source) or made in the trace (rebuilt as a closure)
    if isinstance(hook, PartialValue):
        return _rebuildable(hook.func) and all(a.is_constant() or isinstance(a, TensorValue) for a in hook.args)
    if isinstance(hook, BoundMethodValue):
        return isinstance(hook.func, UserFunctionValue) and getattr(hook.self_value, "source", None) is not None
    return isinstance(hook, (ObjectValue, NNModuleValue)) and hook.source is not None
