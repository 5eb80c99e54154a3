"""`aten.lstm` kept whole in inference programs: one ONNX `LSTM` per layer in ORT (NOTE [LSTM kept whole]).

`keep_lstm_whole()` is a context manager that lowering.py enters around its make_fx traces. Inside it a
`torch.lstm` call on CPU tensors without dropout is traced as one `framejit::lstm_whole` node, whose
kernel is `aten.lstm.input` itself and whose fake kernel is torch's own decomposition (`lstm_impl`).
`register_translation(registry)` gives the op torchlib's translation of `aten::lstm.input` (ONNX `LSTM`
per layer, all directions in one op), so the partitioner sends it to ORT; `stays_in_torch(node)` names
the calls that keep running in torch (the node's kernel, eager's own call).

Invariant: outside the context nothing of torch's is changed; the op is defined when this module is
imported (lowering.py imports it), so a persisted program's source that calls it loads in a new process.
"""
from __future__ import annotations

import contextlib

import torch

# NOTE [LSTM kept whole]
# The lowering never saw `aten.lstm`: it is a CompositeImplicitAutograd op, so make_fx traced what its kernel
# calls, which on CPU (oneDNN enabled, float32) is one `mkldnn_rnn_layer` per layer and direction plus
# `zeros`, `stack`s, `cat`s and a contiguous copy of the (transposed) input; torch's Python decomposition
# (`lstm_impl`, used when the Python dispatcher is on, as in symbolic traces) gives the same. Those run in
# torch between ORT parts (torchlib translates none of them), so the zoo's lstm ran at 0.97x eager: the
# pieces cost more than eager's one `aten::lstm`. Inside `keep_lstm_whole()` a TorchFunctionMode turns each
# `torch.lstm(input, (h0, c0), params, ...)` call (what `nn.LSTM.forward` calls) into one
# `framejit::lstm_whole` node with the same arguments, whose kernel calls `aten.lstm.input`: the torch part
# of the program costs what eager's call costs. Its fake kernel is torch's decomposition, so the results'
# shapes and strides are the ones the lowering had before (batch_first outputs are transposed views, as
# eager's). Kept whole: CPU tensors, calls that draw no dropout (eval mode or dropout 0); any other call
# (packed sequences, CUDA, dropout drawn) is traced as before. Inference programs only: training joints
# keep their layer ops (NOTE [LSTM layers in training graphs] in backends/recurrent.py).
# Run in torch, the node only matched eager (the zoo's lstm at 0.99x, 1 thread). So the node also has
# torchlib's translation of `aten::lstm.input` (`register_translation`): one ONNX `LSTM` per layer, both
# directions in one op, gates reordered from torch's (i, f, g, o) to ONNX's (i, o, f, c) by Slice/Concat of
# the weights, which frozen weights (NOTE [Frozen weights]) fold into initializers once. The program is then
# one ORT part with no eager node (embedding, zero initial states, LSTM and head together). Measured (zoo
# lstm, bench size, CPU clock, 1 thread, loaded machine): eager 51.7 ms, torch-kept 52.8 ms (0.99x), ORT's
# LSTM 50.6 ms (1.02x); 2 threads without spinning: ORT's directions run in parallel and do not compete
# with torch's OpenMP workers. `stays_in_torch` keeps in torch what ORT's op does not compute as eager
# does: dtypes other than float32 (the CPU kernel's type), projections (`proj_size`: ONNX LSTM has none),
# dropout drawn between layers, and empty inputs.
_LIBRARY = torch.library.Library("framejit", "FRAGMENT")
_LIBRARY.define("lstm_whole(Tensor input, Tensor[] hx, Tensor[] params, bool has_biases, int num_layers, "
                "float dropout, bool train, bool bidirectional, bool batch_first) -> (Tensor, Tensor, Tensor)")


def _run(*args):
    return tuple(torch.ops.aten.lstm.input(*args))


def _fake(*args):
    from torch._decomp.decompositions import lstm_impl
    return tuple(lstm_impl(*args))


_LIBRARY.impl("lstm_whole", _run, "CPU")
torch.library.register_fake("framejit::lstm_whole", _fake, lib=_LIBRARY)
LSTM_WHOLE = torch.ops.framejit.lstm_whole.default
_TORCH_LSTM = torch._C._VariableFunctions.lstm


def _keeps_whole(input, hx, params, dropout, train) -> bool:
    tensors = [input, *hx, *params]
    if not all(isinstance(t, torch.Tensor) for t in tensors):
        return False
    draws = train and dropout > 0
    return not draws and input.dim() == 3 and all(t.device.type == "cpu" for t in tensors)


class _KeepWhole(torch.overrides.TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is _TORCH_LSTM and not kwargs and len(args) == 9 and isinstance(args[1], (list, tuple)) \
                and len(args[1]) == 2 and _keeps_whole(args[0], args[1], args[2], args[5], args[6]):
            return LSTM_WHOLE(args[0], list(args[1]), list(args[2]), *args[3:])
        return func(*args, **kwargs)


def register_translation(registry) -> None:
    """Give `framejit::lstm_whole` torchlib's translation of `aten::lstm.input` (NOTE [LSTM kept whole])."""
    decompositions = registry.functions.get("aten::lstm.input")
    if decompositions:  # a torchlib without it: the node stays in torch, as before
        registry.functions[LSTM_WHOLE.name()] = list(decompositions)


def stays_in_torch(node) -> str | None:
    """Why this `framejit::lstm_whole` node runs in torch rather than as ORT's LSTM, or None."""
    input, hx, params, has_biases, num_layers, dropout, train, bidirectional = node.args[:8]
    vals = [a.meta.get("val") for a in (input, *hx, *params)]
    if not all(isinstance(v, torch.Tensor) for v in vals):
        return "lstm: an argument without a tensor value"
    if any(v.dtype != torch.float32 for v in vals):
        return "lstm: ONNX Runtime's CPU LSTM runs float32 only"
    per_layer = (2 if bidirectional else 1) * (4 if has_biases else 2)
    if len(params) != per_layer * num_layers or len(hx) != 2 or vals[1].shape[-1] != vals[2].shape[-1]:
        return "lstm: projections (proj_size) have no ONNX LSTM form"
    if train and dropout > 0:
        return "lstm: dropout between layers draws from torch's generator"
    if any(v.numel() == 0 for v in vals if not isinstance(v.numel(), torch.SymInt)):
        return "lstm: an empty input"
    return None


@contextlib.contextmanager
def keep_lstm_whole():
    """While lowering an inference graph: `torch.lstm` calls stay one op (NOTE [LSTM kept whole])."""
    with _KeepWhole():
        yield
