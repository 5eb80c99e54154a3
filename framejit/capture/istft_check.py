"""`torch.istft` in the graph, its window check kept as a run-time check.

NOTE [istft's window check]: eager's istft divides the overlap-added signal by the window envelope (the sum
of the squared window over the frames covering each sample) and first checks that the envelope is nowhere
below 1e-11 (the NOLA condition: `RuntimeError: istft(...) window overlap add min: 1`). The check reads
tensor data (`aten.equal` on the fake tensors: DataDependentOutputException), so the call was a graph break
and istft ran outside the graph (stock torch.compile captures it: its reference decomposition skips the
check). Here the call is recorded when the graph so far can be rerun exactly (NOTE [Speculated checks]):
- the envelope's check is computed in the graph (`window_ok`, the ops eager runs for it) and recorded as a
  speculated `torch._assert_async`, before the istft node; a bad window fails it at run time, and the call
  reruns eagerly, where istft raises its own error;
- the istft node's fake result comes from torch's reference decomposition (`torch._refs.istft`, called
  directly: the aten op's `int? length` would specialise a symbolic length), the same shapes without the data read; at run time the backend runs
  istft itself (eager) or its decomposition (onnxrt).
A `length` beyond the signal (eager pads with zeros and warns once) keeps the break.
"""
from __future__ import annotations

import inspect
from typing import Any

import torch
from torch.utils._pytree import tree_map

from .graph_calls import _fake_of, _is_value


def _signature(input, n_fft, hop_length=None, win_length=None, window=None, center=True, normalized=False,
               onesided=None, length=None, return_complex=False):
    """torch.istft's parameters, for binding a call's arguments."""


_PARAMETERS = inspect.signature(_signature)


def window_ok(input: torch.Tensor, window: Any, n_fft: int, hop_length: Any, win_length: Any, center: bool,
              length: Any) -> torch.Tensor:
    """A 0-d bool tensor: eager's istft finds the window envelope at least 1e-11 everywhere it divides by it
    (the ops eager runs for its check, at::istft). A graph target (NOTE [istft's window check])."""
    hop = hop_length if hop_length is not None else n_fft // 4
    win = win_length if win_length is not None else n_fft
    n_frames = input.size(-1)
    if window is None:
        window = torch.ones(win, dtype=input.real.dtype, device=input.device)
    if win != n_fft:
        left = (n_fft - win) // 2
        window = torch.constant_pad_nd(window, (left, n_fft - win - left), 0)
    signal = n_fft + hop * (n_frames - 1)
    envelope = torch.ops.aten.unfold_backward(window.pow(2).expand(1, n_frames, n_fft), [1, signal], 1, n_fft, hop)
    start = n_fft // 2 if center else 0
    end = start + length if length is not None else (signal - n_fft // 2 if center else signal)
    return envelope[:, start:end].abs().min().ge(1e-11)


def istft_call(out, kind: str, target: Any, args: tuple, kwargs: dict) -> Any:
    """The value of `torch.istft(...)` / `t.istft(...)` recorded with its window check (NOTE [istft's window
    check]), or None: the call is recorded as usual (a data-dependent break)."""
    from .speculated_checks import rerun_would_be_exact
    from .values import TensorValue
    try:
        bound = _PARAMETERS.bind(*args, **kwargs)
    except TypeError:
        return None
    bound.apply_defaults()
    values = bound.arguments
    tensors = [v for v in (values["input"], values["window"]) if isinstance(v, TensorValue)]
    if values["input"] not in tensors or any(t.cls is not torch.Tensor for t in tensors) \
            or not rerun_would_be_exact(out):
        return None
    fake = tree_map(_fake_of, dict(values), is_leaf=_is_value)
    if not all(isinstance(fake[k], (int, torch.SymInt, type(None))) for k in ("hop_length", "win_length", "length")) \
            or type(fake["n_fft"]) is not int or type(fake["center"]) is not bool or _pads(fake):
        return None
    check = (values["input"], values["window"], values["n_fft"], values["hop_length"], values["win_length"],
             values["center"], values["length"])
    try:
        result = _reference(out, fake)
        ok = out.call("call_function", window_ok, check, {})
    except Exception:
        return None
    out.record_effect(torch._assert_async, (ok.node,))
    out.speculated_checks = getattr(out, "speculated_checks", 0) + 1
    return out._record_node(kind, target, args, kwargs, result, False)


def _pads(fake: dict) -> bool:
    """The call asks for more samples than the frames give (eager pads them with zeros and warns)."""
    if fake["length"] is None:
        return False
    n_fft = fake["n_fft"]
    hop = fake["hop_length"] if fake["hop_length"] is not None else n_fft // 4
    start = n_fft // 2 if fake["center"] else 0
    return bool(start + fake["length"] > n_fft + hop * (fake["input"].size(-1) - 1))


def _reference(out, fake: dict) -> Any:
    """The result's fake tensor from torch's reference istft (no data read)."""
    import torch._refs
    return out._run_fake("call_function", torch._refs.istft, tuple(fake.values()), {})  # sizes stay symbolic
