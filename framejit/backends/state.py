"""What a captured graph does to torch's global state, as lowered backends need to know it.

framejit's graphs keep state changes as nodes (`torch._C._set_grad_enabled`, `_enter_autocast`/
`_exit_autocast`, `_enter_inference_mode`/`_exit_inference_mode`; see capture/context.py) and end in the
state they started with. A backend that lowers the graph with make_fx runs those nodes at trace time, so
autocast's casts and grad mode's effect on tracing are baked into the lowered program; what the lowered
program cannot reproduce at run time is:
- autograd: a graph that turns grad mode on inside (`torch.enable_grad()`, `inference_mode(False)`) may
  produce outputs that require grad even when the call starts with grad off;
- inference tensors: values computed inside `torch.inference_mode()` are inference tensors in eager.
Backends run such graphs (or calls) eagerly.

A placeholder with `meta["dynamic_float"]` is a Python float that framejit passes as a graph input because
it changes between calls (NOTE [Dynamic floats]); a backend that would specialise on its value should
run the graph eagerly instead of compiling once per value (onnxrt and triton pass it as a 0-d tensor where
the graph allows: NOTE [Float inputs as tensors] in float_inputs.py).
"""
from __future__ import annotations

import torch
from torch.autograd.grad_mode import _enter_inference_mode


def switches_grad_on(gm: torch.fx.GraphModule) -> bool:
    """The graph turns grad mode on somewhere inside."""
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.args:
            if node.target is torch._C._set_grad_enabled and node.args[0] is True:
                return True
            if node.target is _enter_inference_mode and node.args[0] is False:
                return True
    return False


# NOTE [Calls that run as torch runs them]: a node whose target carries `fj_eager_only` (a reason) is a call no
# lowering may trace: capture's reentrant checkpoint (NOTE [Reentrant checkpoint in the graph]) applies torch's
# CheckpointFunction, whose backward rejects the torch.autograd.grad an AOT joint is traced with, and whose
# forward warns where eager warns (a lowering's trace would warn once more, at compile time). Lowering backends
# run such a graph eagerly (logged), with the values, gradients and warnings eager has. A submodule carrying
# `fj_eager_only` counts too: capture's non-reentrant checkpointed region with preserve_rng_state=False, whose
# recomputation in backward draws new random numbers, which an AOT joint (saving the forward's mask) never
# draws (review revBC HIGH-3).
def eager_only_reason(gm: torch.fx.GraphModule) -> str | None:
    """Why a node of `gm` must run as torch runs it, or None (NOTE [Calls that run as torch runs them])."""
    for module in gm.modules():  # a submodule's graph too (a checkpointed region holding such a call)
        if isinstance(getattr(module, "fj_eager_only", None), str):  # a module call (a checkpointed region's)
            return module.fj_eager_only
        for node in module.graph.nodes if isinstance(module, torch.fx.GraphModule) else ():
            reason = getattr(node.target, "fj_eager_only", None) if node.op == "call_function" else None
            if isinstance(reason, str):
                return reason
    return None


def higher_order_reason(gm: torch.fx.GraphModule) -> str | None:
    """A higher-order op in `gm` (flex_attention, NOTE [Flex attention in the graph]: its score_mod and mask_mod
    are GraphModules it vmaps), which a backend without a lowering for it runs as torch runs it, or None."""
    for node in gm.graph.nodes:
        if node.op == "call_function" and isinstance(node.target, torch._ops.HigherOrderOperator):
            return f"the graph calls torch.ops.higher_order.{node.target.name()}, which this backend does not lower"
    return None


def refuse_eager_only(gm: torch.fx.GraphModule) -> None:
    """Raises RuntimeError (the reason) where a node of `gm` must run as torch runs it."""
    reason = eager_only_reason(gm)
    if reason is not None:
        raise RuntimeError(reason)


def enters_inference_mode(gm: torch.fx.GraphModule) -> bool:
    """The graph enters `torch.inference_mode()` (its outputs made inside are inference tensors)."""
    return any(node.op == "call_function" and node.target is _enter_inference_mode and node.args and node.args[0]
               for node in gm.graph.nodes)


def leaves_inference_mode(gm: torch.fx.GraphModule) -> bool:
    """NOTE [Graphs that leave inference mode]: the graph has an `inference_mode(False)` block. Called under an
    outer `torch.inference_mode()`, eager makes the values computed in that block normal tensors; a lowered
    program makes every output under the caller's mode, so they came back as inference tensors (onnxrt and
    triton then raised "Inference tensors do not track version counter" where eager returns normally, and
    the user's own `y._version` or in-place write on them raises too). Backends run such graphs eagerly."""
    return any(node.op == "call_function" and node.target is _enter_inference_mode and node.args
               and node.args[0] is False for node in gm.graph.nodes)


def _same_device(a: torch.device, b: torch.device) -> bool:
    return a.type == b.type and (a.index or 0) == (b.index or 0)  # fake "cpu:0"/"cuda" vs real "cpu"/"cuda:0"


def off_device_nodes(gm: torch.fx.GraphModule, device: torch.device) -> dict[str, str]:
    """NOTE [Tensors on another device]: lowered backends run a graph (or an ORT part) on the device of its
    inputs. A node that makes or reads a tensor elsewhere (`x.to("cuda")` on CPU inputs, `x.cpu()` on CUDA
    ones, `torch.ones(2, device="meta")`) computed on the inputs' device instead: `x.to("meta") + 1` came
    back as a CPU tensor holding 2.0 on onnxrt and triton (eager: a meta tensor). Such nodes, name -> why,
    must run in torch (onnxrt blocks them from its parts). Triton, which runs the whole graph on the device,
    needs only its outputs where eager puts them (`off_device_outputs`): a tensor made elsewhere and moved
    back (`torch.arange(n).to(x.device)`) holds the same values wherever it was computed."""
    found = {}
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        vals = [node.meta.get("val")] + [arg.meta.get("val") for arg in node.all_input_nodes]
        for val in vals:
            for t in (val if isinstance(val, (list, tuple)) else (val,)):
                if isinstance(t, torch.Tensor) and not _same_device(t.device, device):
                    found[node.name] = f"it uses a tensor on {t.device}, the graph runs on {device}"
    return found


def off_device_outputs(gm: torch.fx.GraphModule, device: torch.device) -> list[str]:
    """The devices, other than `device`, of the graph's tensor outputs (NOTE [Tensors on another device])."""
    output = next(node for node in gm.graph.nodes if node.op == "output")
    vals = [node.meta.get("val") for node in torch.utils._pytree.tree_leaves(output.args)
            if isinstance(node, torch.fx.Node)]
    return [str(v.device) for v in vals if isinstance(v, torch.Tensor) and not _same_device(v.device, device)]


def has_dynamic_float_input(gm: torch.fx.GraphModule) -> bool:
    return any(node.op == "placeholder" and node.meta.get("dynamic_float") for node in gm.graph.nodes)


def changes_default_dtype(gm: torch.fx.GraphModule) -> bool:
    """The graph calls `torch.set_default_dtype` (NOTE [Default dtype in the lowered graph])."""
    return any(node.op == "call_function" and node.target is torch.set_default_dtype for node in gm.graph.nodes)


# NOTE [Default dtype in the lowered graph]: `torch.set_default_dtype(d)` inside a traced region is a node
# of the graph (NOTE [Default dtype changes], capture/state_blocks.py) that make_fx runs while tracing: it
# leaves no node in the aten graph, and an aten factory traced after it (`aten.ones([2])`, `aten.full`,
# `aten.arange` with float bounds) has `dtype=None`, which means the default dtype *when the node runs*.
# Nodes that run in torch (a factory whose result feeds no ORT computation: NOTE [Copies stay in torch])
# then ran under the caller's default dtype (red team 6: float32 where eager made float64). In a graph that
# changes the default dtype, every op with a `dtype` argument left unset gets its traced result's dtype,
# right after the first trace (a second one, of the aten graph, no longer runs the set_default_dtype calls).
# The halves of a training graph (joint.py) are such aten graphs too: AOT autograd ran the calls while
# tracing, and onnxrt and triton lowered its `aten.ones([2])` under the caller's float32 (issue 12/14:
# a function that sets float64 inside returned float32 when its input required grad): JointGraph pins
# both halves of a graph that changes the default dtype before handing them to the backend.
def pin_default_dtypes(gm: torch.fx.GraphModule) -> int:
    """Give every op of `gm` that leaves `dtype` unset its traced dtype; returns how many were pinned."""
    pinned = 0
    for node in gm.graph.nodes:
        schema = getattr(node.target, "_schema", None) if node.op == "call_function" else None
        val = node.meta.get("val")
        if schema is None or not isinstance(val, torch.Tensor) or node.kwargs.get("dtype") is not None:
            continue
        if any(a.name == "dtype" and a.kwarg_only for a in schema.arguments):  # ScalarType? (shown as int?)
            node.kwargs = {**node.kwargs, "dtype": val.dtype}
            pinned += 1
    gm.recompile()
    return pinned


# NOTE [Default dtype of promotions in joint halves]: pinning (NOTE [Default dtype in the lowered graph]) covers
# ops with a `dtype` argument; an op that promotes an integer or bool tensor to a float reads the default dtype
# too, with no argument to pin: `n * 1.5`, `n / 2`, `torch.sqrt(n)` or `torch.where(m, n, 0.5)` for an int `n`
# (float64 in eager under `set_default_dtype(float64)`, float32 from onnxrt and triton, which lower a training
# graph's halves under the caller's default). Casting the inputs would be wrong where an int or bool argument is
# not promoted (a mask, an index), so such a node gets its default dtype back around it, as graph nodes:
# `previous = get_default_dtype(); set_default_dtype(d); node; set_default_dtype(previous)`, which the backends'
# make_fx runs while lowering (as in the captured graph). A node is found by running its op on meta stand-ins
# of its inputs under another default dtype: a result dtype that changes depends on the default.
_FLOAT_OF = {torch.complex128: torch.float64, torch.complex64: torch.float32, torch.complex32: torch.float16}


def _reads_default_dtype(node: torch.fx.Node, val: torch.Tensor) -> bool:
    inputs = [arg.meta.get("val") for arg in node.all_input_nodes]
    if not all(isinstance(v, torch.Tensor) for v in inputs) or not any(
            not (v.is_floating_point() or v.is_complex()) for v in inputs):
        return False  # every tensor input is a float: promotion never reaches the default dtype

    def stand_in(arg: torch.fx.Node):
        v = arg.meta["val"]
        return torch.empty((1,) * v.dim(), dtype=v.dtype, device="meta")
    args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), stand_in)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float32 if _FLOAT_OF.get(val.dtype, val.dtype) is torch.float64 else torch.float64)
    try:
        from torch._subclasses.fake_tensor import unset_fake_temporarily
        with unset_fake_temporarily():
            result = node.target(*args, **kwargs)
    except Exception:  # an op that needs real sizes: it does not promote (shape and view ops)
        return False
    finally:
        torch.set_default_dtype(previous)
    return isinstance(result, torch.Tensor) and result.dtype != val.dtype


def keep_promotion_dtypes(gm: torch.fx.GraphModule) -> int:
    """NOTE [Default dtype of promotions in joint halves]; returns how many nodes got their default dtype back."""
    kept = 0
    for node in list(gm.graph.nodes):
        val = node.meta.get("val")
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload) or \
                not isinstance(val, torch.Tensor) or not (val.is_floating_point() or val.is_complex()):
            continue
        if not _reads_default_dtype(node, val):
            continue
        with gm.graph.inserting_before(node):
            previous = gm.graph.call_function(torch.get_default_dtype, ())
            gm.graph.call_function(torch.set_default_dtype, (_FLOAT_OF.get(val.dtype, val.dtype),))
        with gm.graph.inserting_after(node):
            gm.graph.call_function(torch.set_default_dtype, (previous,))
        kept += 1
    if kept:
        gm.recompile()
    return kept


def keep_traced_dtypes(gm: torch.fx.GraphModule) -> None:
    """A half of a training graph that changes the default dtype, before a backend lowers it under the caller's
    default: NOTE [Default dtype in the lowered graph] and NOTE [Default dtype of promotions in joint halves]."""
    pin_default_dtypes(gm)
    keep_promotion_dtypes(gm)
