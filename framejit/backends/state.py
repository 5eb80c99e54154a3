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
