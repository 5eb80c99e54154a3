"""CPU flash attention (forward and backward) as matrix products and softmax ops, for onnxrt training graphs.

On CPU, `F.scaled_dot_product_attention` in a training graph traces to
`aten._scaled_dot_product_flash_attention_for_cpu` (output and logsumexp) and its backward op; torchlib has no
translation of the backward, and its translation of the forward returns the logsumexp with another shape
(NOTE [Flash attention in training] in compiler.py), so both ran in torch between ORT parts in every
transformer trained on onnxrt. `decomposition()` returns entries for the decomposition table of onnxrt
joints (training.decompositions()): both ops become the attention's math (NOTE [Flash attention as math in
training graphs]).
"""
from __future__ import annotations

import math

import torch

aten = torch.ops.aten

# NOTE [Flash attention as math in training graphs]
# The forward computes S = scale * q k^T (+ the additive mask; is_causal: -inf above the diagonal, aligned
# top-left as the CPU kernel aligns it when L != S), the row max m (0 where the whole row is masked), e =
# exp(S - m), its row sum s, output = (e / s) v and logsumexp = m + log s. A row masked everywhere gives output
# 0 and logsumexp 0, as the kernel does. The backward recomputes P = exp(S - logsumexp) as the kernel's own
# backward does, then dV = P^T dO, dS = P * (dO v^T - rowsum(dO * O)), dQ = scale dS k, dK = scale dS^T q.
# Both decompositions apply under the same conditions (`_supported`: no dropout, float32/float64, q, k, v
# with equal batch and head sizes, a float mask or none, plain int sizes), so a backward that keeps the op
# always reads the op's own forward outputs and the other way round: the logsumexp keeps its meaning
# between them (joint.py, NOTE [Batch norm in training graphs]). Tests compare both with eager's ops in
# float64 (masks, causal with L != S, fully masked rows) and train a causal attention block vs eager
# (tests/backends/test_training_gaps4.py).


def _supported(query, key, value, dropout_p, attn_mask) -> bool:
    tensors = [query, key, value] + ([attn_mask] if attn_mask is not None else [])
    if dropout_p or query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
        return False
    if not all(all(type(s) is int for s in t.shape) for t in tensors):
        return False
    if query.dtype not in (torch.float32, torch.float64) or any(t.dtype != query.dtype for t in tensors):
        return False
    return query.shape[:2] == key.shape[:2] == value.shape[:2] and key.shape[2] == value.shape[2]


def _scores(query, key, is_causal: bool, attn_mask, scale):
    scale = scale if scale is not None else 1.0 / math.sqrt(query.shape[-1])
    scores = aten.mul.Tensor(aten.matmul.default(query, aten.transpose.int(key, -2, -1)), scale)
    if attn_mask is not None:
        scores = aten.add.Tensor(scores, attn_mask)
    if is_causal:
        rows, cols = query.shape[2], key.shape[2]
        above = aten.triu.default(aten.ones.default([rows, cols], dtype=torch.bool, device=query.device), 1)
        scores = aten.masked_fill.Scalar(scores, above, float("-inf"))
    return scores, scale


def flash_attention(query, key, value, dropout_p=0.0, is_causal=False, *, attn_mask=None, scale=None):
    if not _supported(query, key, value, dropout_p, attn_mask):
        return NotImplemented
    scores, _ = _scores(query, key, is_causal, attn_mask, scale)
    row_max = aten.amax.default(scores, [-1], True)
    row_max = aten.where.self(aten.isinf.default(row_max), aten.zeros_like.default(row_max), row_max)
    weights = aten.exp.default(aten.sub.Tensor(scores, row_max))
    total = aten.sum.dim_IntList(weights, [-1], True)
    empty = aten.eq.Scalar(total, 0)
    total = aten.where.self(empty, aten.ones_like.default(total), total)
    output = aten.matmul.default(aten.div.Tensor(weights, total), value)
    logsumexp = aten.add.Tensor(row_max, aten.log.default(total))  # 0 where the row is masked everywhere
    return output, aten.squeeze.dim(logsumexp, -1)


def flash_attention_backward(grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, *,
                             attn_mask=None, scale=None):
    if not _supported(query, key, value, dropout_p, attn_mask):
        return NotImplemented
    scores, scale = _scores(query, key, is_causal, attn_mask, scale)
    probs = aten.exp.default(aten.sub.Tensor(scores, aten.unsqueeze.default(logsumexp, -1)))
    grad_value = aten.matmul.default(aten.transpose.int(probs, -2, -1), grad_out)
    grad_probs = aten.matmul.default(grad_out, aten.transpose.int(value, -2, -1))
    row_dot = aten.sum.dim_IntList(aten.mul.Tensor(grad_out, out), [-1], True)
    grad_scores = aten.mul.Tensor(probs, aten.sub.Tensor(grad_probs, row_dot))
    grad_query = aten.mul.Tensor(aten.matmul.default(grad_scores, key), scale)
    grad_key = aten.mul.Tensor(aten.matmul.default(aten.transpose.int(grad_scores, -2, -1), query), scale)
    return grad_query, grad_key, grad_value


def decomposition() -> dict:
    """The decomposition-table entries (NOTE [Flash attention as math in training graphs])."""
    return {aten._scaled_dot_product_flash_attention_for_cpu.default: flash_attention,
            aten._scaled_dot_product_flash_attention_for_cpu_backward.default: flash_attention_backward}
