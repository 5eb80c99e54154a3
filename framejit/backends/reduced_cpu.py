"""Reduced-precision ops whose eager CPU kernels no lowering reproduces bit for bit: kept whole, run in torch.

NOTE [Reduced-precision kernels kept whole on CPU]: for bfloat16/float16 tensors on a CPU device (Triton's
interpreter; onnxrt, whose CPU provider runs neither dtype itself), eager's kernels compute in float32 and
round once, in an order of their own:
- `native_layer_norm` and its backward reduce each row with the kernel's vectorized summation order (and the
  backward's dgamma/dbeta across rows in blocks): torch._decomp's decomposition, lowered as reductions of
  another order, gave bfloat16 gradients an ulp apart (Linear-LayerNorm-GELU-Linear in bfloat16, 3 SGD
  steps: 10-150 elements of each gradient on triton, the norm's weight and bias gradients on onnxrt);
- `gelu` and `gelu_backward` use ATen's own vectorized erf/exp/tanh (`Vectorized<float>::erf`, not libm's,
  and libm's `std::erf` on the tail of each row): float32 erf computed otherwise differs in the last bit,
  which moves some bfloat16 roundings (7 of 1536 elements of a bfloat16 GELU on triton).
While a graph is traced to aten (joints, triton's decompositions), these ops' decompositions give way
(return NotImplemented) when an argument is a bfloat16/float16 CPU tensor, so the op stays one node, which
triton runs as an extern fallback with this reason (lowering_reductions.py, lowering_pointwise.py), logged on
`output_code` and listed in the graph's `fallbacks`. onnxrt runs no op of these dtypes in ORT (translate.py:
bfloat16 is no ORT dtype here, float16 reads run in torch), so there every decomposition of its table gives
way for them (`keep_all_whole`): decomposed, the pieces ran in torch with roundings of their own between them
(AdamW's `lerp_`/`addcdiv_` on bfloat16 parameters, compiled: 14 of 128 elements an ulp apart after one
step), or as float32 ORT programs between casts (a bfloat16 `sum`); whole, each is eager's kernel. For the
same reason torch.onnx's type promotion pass leaves such nodes as they are (translate.insert_type_promotion).
Float32/float64 tensors and other devices decompose and lower as before.
"""
from __future__ import annotations

from typing import Any, Callable

import torch
import torch.utils._pytree as pytree

aten = torch.ops.aten
REDUCED = (torch.bfloat16, torch.float16)
KEPT_WHOLE = (aten.native_layer_norm.default, aten.native_layer_norm_backward.default,
              aten.gelu.default, aten.gelu_backward.default)
REASON = ("eager's CPU kernel for bfloat16/float16 computes in float32 in its own order "
          "(NOTE [Reduced-precision kernels kept whole on CPU])")


def reduced_on_cpu(args: Any) -> bool:
    """Some tensor among `args` (any nesting) is bfloat16/float16 on a CPU device."""
    return any(isinstance(t, torch.Tensor) and t.dtype in REDUCED and t.device.type == "cpu"
               for t in pytree.tree_leaves(args))


def _giving_way(fn: Callable) -> Callable:
    def decomposition(*args, **kwargs):
        if reduced_on_cpu((args, kwargs)):
            return NotImplemented  # make_fx then records the op itself (proxy_tensor.maybe_handle_decomp)
        return fn(*args, **kwargs)
    decomposition.__name__ = getattr(fn, "__name__", "decomposition")
    decomposition.gives_way_on_reduced_cpu = True
    return decomposition


def keep_whole(table: dict) -> dict:
    """`table` with the decompositions of KEPT_WHOLE giving way for reduced-precision CPU tensors."""
    out = dict(table)
    for op in KEPT_WHOLE:
        for key in (op, op.overloadpacket):
            if key in out and not getattr(out[key], "gives_way_on_reduced_cpu", False):
                out[key] = _giving_way(out[key])
    return out


def keep_all_whole(table: dict) -> dict:
    """`table` with every decomposition giving way for reduced-precision CPU tensors (onnxrt)."""
    return {op: fn if getattr(fn, "gives_way_on_reduced_cpu", False) else _giving_way(fn) for op, fn in table.items()}
