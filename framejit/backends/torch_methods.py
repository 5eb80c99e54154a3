"""Tracing a captured graph to aten with torch's own Tensor methods, whatever the user patched, and with
eager's dropout draws (NOTE [Dropout drawn as eager draws it]).

NOTE [Patched Tensor methods while lowering]: make_fx and AOT autograd trace under a TorchFunctionMode, and
torch's C implementation of an operator (`a + b`) hands that mode the function it finds as
`torch.Tensor.add` at that moment. A user program that patched `torch.Tensor.add = f` (framejit inlines f
where the program calls `x.add`, NOTE [Patched tensor methods] in capture/attributes.py) would then have
every `+` of the graph traced as f, though eager's `a + b` never calls it. While a backend traces a graph,
the Python functions shadowing a method of torch's C tensor base are taken off `torch.Tensor` and put back
after (eager code that another thread runs during that tracing would see torch's own method: a patched
Tensor method and concurrent compilation together are not supported).
"""
from __future__ import annotations

import contextlib
import math
import types
from typing import Iterator

import torch


@contextlib.contextmanager
def original_tensor_methods() -> Iterator[None]:
    patched = {name: value for name, value in vars(torch.Tensor).items()
               if isinstance(value, types.FunctionType) and not (value.__module__ or "").startswith("torch")
               and name in vars(torch._C.TensorBase)}
    for name in patched:
        delattr(torch.Tensor, name)
    try:
        yield
    finally:
        for name, value in patched.items():
            setattr(torch.Tensor, name, value)


# NOTE [Patched torch functions while lowering]: torch's C functions of `torch._C._nn`, `_fft`, `_linalg`,
# `_special`, ... hand a TorchFunctionMode the function found at their name in that module at that moment,
# not themselves (python_arg_parser's handle_torch_function). A program that patched `torch._C._nn.gelu`
# (which eager's `F.gelu`, bound at import, never reads) had a graph calling torch's own gelu (NOTE [Graph
# targets pinned by identity] in capture/pinned_targets.py) traced to aten as the patch, under each mode
# the lowering stacks: onnxrt's program for a new dynamic shape gave gelu(x) + 300 where eager gives
# gelu(x) (h12red finding 7). While a backend traces a graph, each such C function the graph calls is put
# back at its name in its module for its own call only (the graph's node calls a wrapper that does so and
# restores the name after), not for the whole trace: a Python function of the same graph (`F.silu`, kept
# whole as one node) reads the name when it runs, as eager reads it, and must find the user's binding.
# With `torch._C._nn.gelu, torch._C._nn.silu = silu, gelu` (a swap), `F.gelu(x) + torch._C._nn.gelu(x) * 2 +
# F.silu(x)` is G + 2S + G in eager; with the names put back for the whole trace onnxrt and triton computed
# G + 3S (revC C3). The graph's targets are the wrappers only inside the context (recompiled, and put back
# and recompiled after); the same concurrency caveat as above.
@contextlib.contextmanager
def original_api_functions(gm: torch.fx.GraphModule) -> Iterator[None]:
    import sys
    wrapped = []
    for node in gm.graph.nodes:
        target = node.target
        if node.op != "call_function" or not isinstance(target, types.BuiltinFunctionType):
            continue
        module = sys.modules.get(getattr(target, "__module__", None) or "")
        name = getattr(target, "__name__", None)
        if module is None or not module.__name__.startswith("torch._C.") or not isinstance(name, str):
            continue
        current = getattr(module, name, None)
        if current is not target and current is not None:
            wrapped.append((node, target))
            node.target = _at_its_name(module, name, target)
    if wrapped:
        gm.recompile()
    try:
        yield
    finally:
        if wrapped:
            for node, target in wrapped:
                node.target = target
            gm.recompile()


def _at_its_name(module: types.ModuleType, name: str, target) -> types.FunctionType:
    """`target` called with itself at `module.<name>` for the call (NOTE [Patched torch functions while
    lowering])."""
    def call(*args, **kwargs):
        saved = getattr(module, name)
        setattr(module, name, target)
        try:
            return target(*args, **kwargs)
        finally:
            setattr(module, name, saved)
    call.__name__ = call.__qualname__ = f"{name}_at_its_name"
    return call


# NOTE [Dropout drawn as eager draws it]
# Eager's dropout on CPU fills `empty_like(input)` in place with bernoulli_: the numbers land in the input's
# memory order. Lowering an inference graph functionalizes it, and the functional bernoulli that replaces
# the in-place one fills a contiguous tensor: for a channels_last or transposed input, each element got
# another number than in eager (F.dropout in train mode under no_grad, onnxrt and triton). While a backend
# lowers a graph, dropout (F.dropout, torch.dropout, torch.dropout_; training, 0 < p < 1, a float input)
# is traced as `native_dropout`, as torch's own Python decomposition of aten::dropout does (and so AOT
# autograd's joints): one op that stays whole (NOTE [Random ops stay whole] in onnxrt/lowering.py) and draws
# into a mask with its input's layout, eager's numbers at eager's elements.
#
# Alpha dropout (F.alpha_dropout, torch.alpha_dropout[_]) draws the same way into `empty_like(input)` and then
# scales and shifts: traced as native_dropout's mask (the same draws, in the input's layout) and eager's
# arithmetic in eager's order (ATen's _dropout_impl), so each element gets eager's number and eager's value.
class _EagerDropout(torch.overrides.TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        alpha = func in _ALPHA_DROPOUTS
        call = _ALPHA_DROPOUTS.get(func) or _DROPOUTS.get(func)
        bound = call(*args, **kwargs) if call is not None else None
        if bound is not None:
            input, p, inplace = bound
            if isinstance(input, torch.Tensor) and input.is_floating_point() and 0 < p < 1:
                out = _alpha_dropout(input, p) if alpha else torch.native_dropout(input, p, True)[0]
                return input.copy_(out) if inplace else out
        return func(*args, **kwargs)


def _alpha_dropout(input: torch.Tensor, p: float) -> torch.Tensor:
    alpha = 1.7580993408473766  # ATen's constant
    a = 1.0 / math.sqrt((alpha * alpha * p + 1) * (1 - p))
    noise = torch.native_dropout(input, p, True)[1].to(input.dtype)  # bernoulli(1 - p), eager's draws
    b = noise.add(-1).mul(alpha * a).add(alpha * a * p)
    return input.mul(noise.mul(a)).add(b)


def _functional_dropout(input, p=0.5, training=True, inplace=False):
    return (input, p, inplace) if training else None


_DROPOUTS = {
    torch.nn.functional.dropout: _functional_dropout,
    torch.dropout: lambda input, p, train: (input, p, False) if train else None,
    torch.dropout_: lambda input, p, train: (input, p, True) if train else None,
}


_ALPHA_DROPOUTS = {
    torch.nn.functional.alpha_dropout: _functional_dropout,
    torch.alpha_dropout: lambda input, p, train: (input, p, False) if train else None,
    torch.alpha_dropout_: lambda input, p, train: (input, p, True) if train else None,
}


def eager_dropout() -> torch.overrides.TorchFunctionMode:
    """A mode to trace under: dropout as native_dropout (NOTE [Dropout drawn as eager draws it])."""
    return _EagerDropout()
