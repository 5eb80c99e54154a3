"""Tracing a captured graph to aten with torch's own Tensor methods, whatever the user patched.

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
