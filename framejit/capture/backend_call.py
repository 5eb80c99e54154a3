"""Handing a captured graph to the backend, and what happens when the backend fails.

`call_backend(gm, example_inputs, backend, options, backend_name, frame_name)` returns the callable the
backend made of `gm`, or raises `BackendCompilerFailed` (`framejit.BackendCompilerFailed`).

NOTE [Backend failures raise]
A backend that raises while compiling a graph, or returns something that is not callable (None, a
tensor), is a configuration problem of the user's (bad options, a bug in a custom backend), not a graph
framejit could not capture: running the graph eagerly instead would hide it, and the user would believe
the backend ran. So, as with `torch.compile`, the call raises `BackendCompilerFailed`, naming the backend
and the compiled function, with the backend's exception as `__cause__`; with `fullgraph=False` too (a
graph break is for code framejit cannot capture, not for backends that fail). Built-in backends keep
their own documented fallbacks inside (onnxrt runs unsupported nodes in torch, triton runs graphs it
cannot lower as Python): they raise only for what the user gave them, such as unknown options.
Options of a built-in backend named by string are checked earlier, by `framejit.compile` itself.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from .breaks import FramejitError


class BackendCompilerFailed(FramejitError):
    """The backend raised while compiling a graph, or returned a non-callable (NOTE [Backend failures
    raise]). `.backend_name` names the backend; `__cause__` is the backend's own exception, if any."""

    def __init__(self, message: str, backend_name: str) -> None:
        super().__init__(message)
        self.backend_name = backend_name


def backend_name(backend: Callable, version_key: str) -> str:
    """A readable name: the registered name of a built-in backend, else the callable's qualified name."""
    if version_key and not version_key.startswith("user:"):
        return version_key.split("[")[0]
    name = getattr(backend, "__qualname__", None) or type(backend).__qualname__
    return f"{getattr(backend, '__module__', '?')}.{name}"


def call_backend(gm: torch.fx.GraphModule, example_inputs: list, backend: Callable, options: dict | None,
                 name: str, frame_name: str) -> Callable:
    """`backend(gm, example_inputs[, options=...])`, checked (NOTE [Backend failures raise])."""
    try:
        if options:
            compiled: Any = backend(gm, example_inputs, options=options)
        else:
            compiled = backend(gm, example_inputs)
    except Exception as e:
        raise BackendCompilerFailed(
            f"backend {name!r} failed to compile a graph of {frame_name}: {type(e).__name__}: {e}", name) from e
    if not callable(compiled):
        raise BackendCompilerFailed(
            f"backend {name!r} returned {type(compiled).__name__} for a graph of {frame_name}; a backend must "
            f"return a callable that takes the graph's inputs (the torch.compile backend contract)", name)
    from ..backends.eager import conditions_first
    return conditions_first(gm, compiled)
