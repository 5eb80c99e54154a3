"""`aten.lstm` kept whole in inference programs: one torch op, as eager runs it (NOTE [LSTM kept whole]).

`keep_lstm_whole()` is a context manager that lowering.py enters around its make_fx traces. Inside it a
`torch.lstm` call on CPU tensors without dropout is traced as one `framejit::lstm_whole` node, whose
kernel is `aten.lstm.input` itself and whose fake kernel is torch's own decomposition (`lstm_impl`). The op has no torchlib translation,
so the partitioner leaves it to torch.

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


@contextlib.contextmanager
def keep_lstm_whole():
    """While lowering an inference graph: `torch.lstm` calls stay one op (NOTE [LSTM kept whole])."""
    with _KeepWhole():
        yield
