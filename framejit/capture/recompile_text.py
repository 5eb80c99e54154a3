"""The recompile log's text of a failing guard: int literals, shapes' dimensions, a compiled module's names
(moved out of hook.py, which reads them when it logs or marks a recompile)."""
from __future__ import annotations

import ast
import inspect
import re
from typing import Any


def int_text(text: str, sizes: bool = False) -> bool:
    """`text` (a guard's expected value) is an int literal (not a bool), or with `sizes` a torch.Size (a
    shape carried into a resume function: NOTE [Dynamic ints] in shapes.py)."""
    if sizes and text.startswith("torch.Size(["):
        text = text[len("torch.Size("):-1]
        try:
            return all(type(v) is int for v in ast.literal_eval(text))
        except (ValueError, SyntaxError, TypeError):
            return False
    try:
        return type(ast.literal_eval(text)) is int
    except (ValueError, SyntaxError):
        return False


def module_call_names(module: Any, args: tuple, kwargs: dict, text: str) -> tuple[str, str]:
    """NOTE [Recompiles of compiled modules]: a compiled module's calls run through `module_call(module,
    *args, **kwargs)`, so its guards name `L['args'][1]` and the frame is framejit's own wrapper. The
    recompile log names the module's forward and its parameters instead: `L['args'][i]` becomes the
    forward's i-th positional parameter (`L['offset']`), `L['kwargs']['k']` becomes `L['k']`,
    `L['module']` becomes `L['self']`, `L['args']`/`L['kwargs']` name the positional/keyword arguments, and
    a location inside module_frame.py is dropped."""
    forward = getattr(type(module), "forward", None)
    code = getattr(forward, "__code__", None)
    if code is None:
        return f"{type(module).__qualname__}.forward", text
    names = list(code.co_varnames[1:code.co_argcount])  # after self
    star = code.co_varnames[code.co_argcount + code.co_kwonlyargcount] if code.co_flags & inspect.CO_VARARGS else None

    def positional(match: re.Match) -> str:
        i = int(match.group(1))
        if i < len(names):
            return f"L[{names[i]!r}]"
        return f"L[{star!r}][{i - len(names)}]" if star else match.group(0)

    text = re.sub(r"L\['args'\]\[(\d+)\]", positional, text)
    text = re.sub(r"L\['kwargs'\]\[('[^']*')\]", r"L[\1]", text)
    text = re.sub(r"L\['kwargs'\](?!\[)", "the keyword arguments", text)
    text = re.sub(r"L\['args'\](?!\[)", "the positional arguments", text)
    text = text.replace("L['module']", "L['self']")
    text = re.sub(r" \(from [^()]*module_frame\.py:\d+: return module\(\*args, \*\*kwargs\)\)", "", text)
    name = f"{type(module).__qualname__}.forward ({code.co_filename}:{code.co_firstlineno})"
    return name, text


def named_dims(failure) -> str:
    """A failure as the recompile log shows it: a tensor shape check names the dimensions that differ."""
    text = str(failure)
    if failure.guard.kind == "TENSOR_SHAPE":
        expected, actual = dims(failure.guard.expected), dims(failure.actual)
        if len(expected) != len(actual):
            return f"{text}; rank {len(expected)} -> {len(actual)}"
        changed = [f"dim {d}: {a} -> {b}" for d, (a, b) in enumerate(zip(expected, actual)) if a != b]
        if changed:
            return f"{text}; size of {', '.join(changed)}"
    return text


def dims(shape_text: str) -> list[str]:
    """The dimensions of a shape as text, `(s0, 3)` -> ['s0', '3']."""
    return re.findall(r"[^(),\s]+", shape_text.replace("torch.Size", ""))


__all__ = ["dims", "int_text", "module_call_names", "named_dims"]
