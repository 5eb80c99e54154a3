"""Strides of a lowered graph's outputs, as eager lays them out.

NOTE [Output strides follow eager]
Eager's pointwise ops keep their input's memory layout: `x + 1` on a channels_last or permuted `x`
returns a tensor with `x`'s stride order, so `.stride()`, `.is_contiguous()` and `.view(-1)` afterwards
behave accordingly. The lowered backends (onnxrt, triton) write every computed value densely in row-major
order. The captured graph's output nodes carry eager's layout in their fake value (`meta["val"]`), so
`output_layouts(gm)` records, for each flat output whose eager layout is dense but not contiguous, its
stride order (and its exact strides where they are plain ints), and `restore(result, layouts, inputs)`
copies such an output into that layout after the run. Only contiguous outputs that share storage with
no input and no other output are copied: a returned view keeps its aliasing, and an output that is
already laid out as in eager costs one stride comparison. Graphs whose outputs are all contiguous in
eager (nearly all) return `None` from `output_layouts` and pay nothing.
"""
from __future__ import annotations

import torch
import torch.utils._pytree as pytree

Layout = tuple  # (stride order: dims from outermost to innermost, exact strides or None)


def _hint(n):
    return n if type(n) is int else n.node.hint


def _contiguous(sizes: list[int], strides: list[int]) -> bool:
    """Row-major contiguity from the hints. NOTE [Layouts read from hints]: `val.is_contiguous()` on a fake
    value with symbolic sizes asks the frontend's ShapeEnv, which guards (`x[1:n - 1]`: `n - 2 == 1`?) and
    even specialises the symbol (`n == 3`): the frame's entry then served one size only, on onnxrt and
    triton but not eager (red team, issue 13). A backend only reads the hints; sizes 0 and 1 are static in
    the frontend, so the layout of the hints is that of every size the entry serves."""
    if 0 in sizes:
        return True
    expected = 1
    for size, stride in zip(reversed(sizes), reversed(strides)):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def eager_layout(val) -> Layout | None:
    """The layout of the fake value `val` when it is dense but not contiguous, else None."""
    if not isinstance(val, torch.Tensor) or val.dim() < 2:
        return None
    try:
        strides = tuple(val.stride())
        hints = [_hint(s) for s in strides]
        sizes = [_hint(s) for s in val.shape]
    except Exception:  # symbolic sizes or strides without a hint, other fake-tensor trouble: leave it
        return None
    if any(h is None for h in hints + sizes) or _contiguous(sizes, hints):
        return None
    order = tuple(sorted(range(val.dim()), key=lambda d: (-hints[d], -sizes[d], d)))
    expected = 1  # dense and not overlapping: the stride order is a permutation of a contiguous layout
    for d in reversed(order):
        if sizes[d] != 1 and hints[d] != expected:
            return None
        expected *= sizes[d]
    exact = strides if all(type(s) is int for s in strides) else None
    return order, exact


def output_layouts(gm: torch.fx.GraphModule) -> dict[int, Layout] | None:
    """Flat output index -> eager layout, for the outputs eager does not lay out contiguously."""
    output = next((n for n in reversed(gm.graph.nodes) if n.op == "output"), None)
    if output is None:
        return None
    leaves = pytree.tree_leaves(output.args[0])
    layouts = {}
    for k, leaf in enumerate(leaves):
        layout = eager_layout(leaf.meta.get("val")) if isinstance(leaf, torch.fx.Node) else None
        if layout is not None:
            layouts[k] = layout
    return layouts or None


def _relaid(t: torch.Tensor, layout: Layout) -> torch.Tensor:
    order, exact = layout
    if exact is not None and len(exact) == t.dim():
        if t.stride() == exact:
            return t
        out = torch.empty_strided(t.shape, exact, dtype=t.dtype, device=t.device)
        if out.stride() == exact:
            return out.copy_(t)  # differentiable: copy_ records the graph when `t` requires grad
    if len(order) != t.dim():
        return t
    inverse = [0] * len(order)
    for position, dim in enumerate(order):
        inverse[dim] = position
    return t.permute(order).contiguous().permute(inverse)


def restore(result, layouts: dict[int, Layout] | None, inputs) -> object:
    """`result` with each output listed in `layouts` copied into eager's layout (NOTE above)."""
    if not layouts:
        return result
    flat, spec = pytree.tree_flatten(result)
    storages: dict[int, int] = {}
    for t in list(flat) + [a for a in inputs if isinstance(a, torch.Tensor)]:
        if isinstance(t, torch.Tensor) and t.numel():
            key = t.untyped_storage().data_ptr()
            storages[key] = storages.get(key, 0) + 1
    changed = False
    for k, layout in layouts.items():
        t = flat[k] if k < len(flat) else None
        if not isinstance(t, torch.Tensor) or t.dim() != len(layout[0]) or t.numel() <= 1:
            continue
        if not t.is_contiguous() or storages.get(t.untyped_storage().data_ptr(), 0) != 1:
            continue  # already laid out by the backend, or aliases something: keep it
        flat[k] = _relaid(t, layout)
        changed = True
    return pytree.tree_unflatten(flat, spec) if changed else result
