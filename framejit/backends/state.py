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


def has_dynamic_float_input(gm: torch.fx.GraphModule) -> bool:
    return any(node.op == "placeholder" and node.meta.get("dynamic_float") for node in gm.graph.nodes)
