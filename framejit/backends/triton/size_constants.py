"""Constants the lowering made from an int input or a size, computed per call in a size-generic module.

NOTE [Constants fitted to sizes]: `y[:, :n] = n` with an int argument n (symbolic once it changed) is lowered
at each probe with n a number: the fill value becomes a 0-d constant tensor (aten.scalar_tensor(n), NOTE
[Constants made from sizes], dynamic.py) whose value differs between the probes, so the graph compiled one
module per value of n (6 modules over 6 values; stock torch.compile 1 graph). Such a constant is now fitted
as the kernels' literals are (`_fit`: a monomial of the symbols or one of the graph's size expressions), at
every probe and at the odd probes (always made when a constant differs, so a value such as `n * 0.5`, whole
at the even probes only, is not fitted), and the module's call makes it per call:
`torch.scalar_tensor(value, dtype, device)`, the conversion of a Python int that eager's fill makes. Taken
only for 0-d constants holding whole numbers at every probe (below 2**24, exact in every float dtype here)
that need no gradient; any other differing constant keeps the graph per shape, as before. A module with
such constants is not persisted (a warm process compiles it again).
"""
from __future__ import annotations

from typing import Callable

import torch

_EXACT = 2 ** 24


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a is b or (a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b))


def same_constants(graphs: list) -> bool:
    """The probes' graphs hold the same constants (NOTE [Constants made from sizes], dynamic.py)."""
    found = differing(graphs)
    return found is not None and not found


def differing(graphs: list) -> list[str] | None:
    """Names of the constants whose values differ between the probes' graphs; None when the graphs do not
    have the same constants by name."""
    first = graphs[0].constants
    if any(list(g.constants) != list(first) for g in graphs[1:]):
        return None
    return [name for name in first if not all(_same(g.constants[name], first[name]) for g in graphs[1:])]


def _whole(t: torch.Tensor) -> int | None:
    if t.dim() != 0 or t.requires_grad or t.is_complex() or t.dtype == torch.bool:
        return None
    value = t.item()
    if value != value or abs(value) >= _EXACT or value != int(value):
        return None
    return int(value)


class SizeConstants:
    """The constants of a size-generic module computed per call from the bound symbols."""

    def __init__(self, fitted: list[tuple[int, str, torch.dtype, torch.device]], names: list[str]) -> None:
        self.fitted, self.names = fitted, list(names)
        self._codes = [(pos, compile(text, "<size constant>", "eval"), dtype, device)
                       for pos, text, dtype, device in fitted]

    def __bool__(self) -> bool:
        return bool(self.fitted)

    def apply(self, constants: list, sizes: tuple) -> list:
        values = dict(zip(self.names, sizes))
        out = list(constants)
        for pos, code, dtype, device in self._codes:
            out[pos] = torch.scalar_tensor(eval(code, {"__builtins__": {}}, values), dtype=dtype, device=device)
        return out


def fit_constants(graphs: list, probes: list, names: list[str], fit: Callable) -> SizeConstants | None:
    """The differing constants of `graphs` (one per probe) fitted over `names` (NOTE [Constants fitted to
    sizes]); None where one cannot be."""
    names_differing = differing(graphs)
    if names_differing is None:
        return None
    if not names_differing:
        return SizeConstants([], names)
    order = list(graphs[0].constants)
    fitted = []
    for name in names_differing:
        tensors = [g.constants[name] for g in graphs]
        values = [_whole(t) for t in tensors]
        if None in values or len({(t.dtype, t.device) for t in tensors}) != 1:
            return None
        text = fit(values, probes)
        if text is None or "/" in text.replace("//", ""):
            return None
        fitted.append((order.index(name), text, tensors[0].dtype, tensors[0].device))
    return SizeConstants(fitted, names)
