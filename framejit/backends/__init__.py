"""Backends: compilers of FX graphs following the torch.compile contract `backend(gm, example_inputs)`.

Concrete backends are imported lazily through `registry`; `framejit.backends.onnxrt` and
`framejit.backends.triton` are modules that can themselves be passed as backends.
"""
from .registry import list_backends, lookup_backend, register_backend

__all__ = ["list_backends", "lookup_backend", "register_backend"]
