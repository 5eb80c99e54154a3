"""Graph code that calls the objects the trace called, not whatever torch's attributes name later.

NOTE [Graph targets pinned by identity]: torch.fx writes a call of a torch object by its qualified name
(`torch.relu(sub)`, `torch._C._nn.gelu(x)`), which the graph's code looks up in the `torch` module on every
run. A program that patches such an attribute (`torch.relu = lambda t: orig(t) + 100`, after the first call
or before it) then had its graph call the patch where the trace had recorded torch's own function: the
patch ran twice (the trace inlined it, and its `orig(t)` node called it again: 200 where eager gives 100,
on the eager backend, and on onnxrt, whose lowering runs the graph); a patch of `torch._C._nn.gelu`, which
eager's `F.gelu` (bound at import) never reads and so nothing guards, changed the compiled results only (red
team h12red). Graphs made by capture use PinnedTargets: the generated source is FX's own, unchanged, but the
`torch` its code reads is a namespace holding, at each qualified name of a call_function target, that target
object; every other name falls through to the real module. FX's import blocks name `torch` by its
registered import ("import torch"), so persisted code is unaffected.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.fx
from torch.fx.graph import _is_from_torch
from torch.fx.node import _get_qualified_name


class _Pinned:
    """`torch` (or one of its attributes) as seen by a graph's code: pinned names, else the real object's."""

    def __init__(self, real: Any) -> None:
        object.__setattr__(self, "_real", real)

    def __getattr__(self, name: str) -> Any:
        # kept after the first read (a dtype, `torch.float32`): later runs find it in the instance dict
        # without this Python call; the graph keeps the object its code read, as it keeps pinned targets
        value = getattr(object.__getattribute__(self, "_real"), name)
        object.__getattribute__(self, "__dict__")[name] = value
        return value

    def __repr__(self) -> str:
        return f"<pinned {object.__getattribute__(self, '_real')!r}>"


def _pin(root: _Pinned, path: list[str], target: Any) -> None:
    node = root
    for name in path[:-1]:
        inner = node.__dict__.get(name)
        if inner is None:
            inner = _Pinned(getattr(node, name))
            node.__dict__[name] = inner
        elif not isinstance(inner, _Pinned):
            return  # a pinned callable with attributes read as a namespace: left to FX's lookup
        node = inner
    if not isinstance(node.__dict__.get(path[-1]), _Pinned):
        node.__dict__[path[-1]] = target


def _pinned_torch(nodes) -> _Pinned | None:
    root = None
    for node in nodes:
        target = node.target
        if node.op != "call_function" or not _is_from_torch(target) or target is torch.device:
            continue
        try:
            path = _get_qualified_name(target).split(".")
        except Exception:  # noqa: BLE001 - FX names it the same way or fails the same way
            continue
        if len(path) < 2 or path[0] != "torch":
            continue
        root = root or _Pinned(torch)
        _pin(root, path[1:], target)
    return root


class PinnedTargets(torch.fx.graph.CodeGen):
    """FX's code generation, with the code's `torch` pinned (NOTE [Graph targets pinned by identity])."""

    def _gen_python_code(self, nodes, *args, **kwargs):
        code = super()._gen_python_code(nodes, *args, **kwargs)
        pinned = _pinned_torch(nodes)
        if pinned is not None and code.globals.get("torch") is torch:
            code.globals["torch"] = pinned
        return code


def new_graph() -> torch.fx.Graph:
    """An FX graph whose code calls its torch targets by identity."""
    graph = torch.fx.Graph()
    graph.set_codegen(PinnedTargets())
    return graph
