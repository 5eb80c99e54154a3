"""Recurrent ops kept whole in joint graphs: `nn.LSTM` layers stay one torch op each in forward and backward.

`keep_lstm_layers()` is a context manager, entered while AOT autograd traces a joint graph
(backends/joint.py): inside it, torch's decomposition of `aten.lstm` emits one `aten.mkldnn_rnn_layer`
per layer and direction (whose autograd formula is one `aten.mkldnn_rnn_layer_backward`) instead of
unrolling the recurrence into per-time-step cell ops. `keep_workspace(forward_graph)` then makes the
forward graph call those layers through `framejit::mkldnn_rnn_layer_train`, which returns the
workspace the backward op reads (NOTE [LSTM layers in training graphs]).

`dropout_between_layers()` is another such context, entered around every joint trace: torch's
decompositions of multi-layer RNN/LSTM/GRU apply their `dropout` between layers as eager does (NOTE [RNN
dropout between layers]).

Invariant: outside the contexts nothing of torch's is changed; where torch's decomposition module lacks
what is patched, the context changes nothing (the recurrence is unrolled, as before).
"""
from __future__ import annotations

import contextlib
import functools

import torch
from ..grad_mode import grad_mode

# NOTE [LSTM layers in training graphs]
# torch's decomposition of `aten.lstm` (torch/_decomp/decompositions.py, `lstm_impl`, which AOT autograd's
# joint trace runs at the Autograd key) uses one `mkldnn_rnn_layer` per layer and direction only when the
# input does not require grad; otherwise it unrolls every time step into matmuls and pointwise cell ops
# (the zoo's lstm: a 665-node forward and a 2027-node backward graph). For ORT those are hundreds of tiny
# nodes whose backward ran at 0.45x eager, while eager itself runs the layers with oneDNN kernels
# (`mkldnn_rnn_layer` forward, `mkldnn_rnn_layer_backward`). Inside `keep_lstm_layers()` the layer
# function torch's decomposition selects is oneDNN's whenever its other conditions hold (CPU, float32,
# no projections, mkldnn enabled), traced with `train=True`: autograd records its derivative, one
# `mkldnn_rnn_layer_backward` per layer, and both ops run in torch between ORT parts (torchlib has no
# translation for them). The backward reads the forward's `workspace` output, which the op only fills
# when grad mode is on, and compiled forward graphs run with grad off: so the forward graph calls
# `framejit::mkldnn_rnn_layer_train` instead (the same op, run with grad on below the autograd key: no
# autograd history is recorded). Its fake kernel is the op's meta kernel (an empty workspace; the real
# one's size is known at run time only, and the backward graph is lowered from the real saved tensors).
# The same selection also covers an LSTM whose input does not require grad but whose weights do: torch's
# decomposition then picked the oneDNN layer with `train=False`, whose backward has no workspace to read.


def _decompositions_module(needed=("select_one_layer_lstm_function", "mkldnn_one_layer_lstm")):
    try:
        import torch._decomp.decompositions as decompositions
    except ImportError:  # pragma: no cover - torch without the module
        return None
    return decompositions if all(hasattr(decompositions, name) for name in needed) else None


def _fits_onednn(input, hx, params) -> bool:
    """torch's own conditions for the oneDNN layer, without `input.requires_grad`."""
    if not torch._C._get_mkldnn_enabled():
        return False
    tensors = [input, *hx, *(t for layer in params for t in layer)]
    if any(t.device.type != "cpu" or t.dtype != torch.float32 for t in tensors):
        return False
    return hx[0].size(2) == hx[1].size(2)


def _onednn_training_layer(inp, hidden, params, has_biases, reverse=False):
    """One LSTM layer and direction as `aten.mkldnn_rnn_layer` with `train=True` (time-major input)."""
    w_ih, w_hh = params[0], params[1]
    b_ih, b_hh = (params[2], params[3]) if has_biases else (w_ih.new_zeros(w_ih.size(0)),
                                                           w_hh.new_zeros(w_hh.size(0)))
    hx = hidden[0].unsqueeze(0).contiguous()
    cx = hidden[1].unsqueeze(0).contiguous()
    y, hy, cy, _ = torch.ops.aten.mkldnn_rnn_layer.default(
        inp.contiguous(), w_ih, w_hh, b_ih, b_hh, hx, cx, reverse, [], 2,  # mode 2: ideep's LSTM
        hx.size(2), 1, has_biases, False, False, True)
    return y, (hy.squeeze(0), cy.squeeze(0))


@contextlib.contextmanager
def keep_lstm_layers():
    """While tracing a joint graph: LSTM layers stay `mkldnn_rnn_layer` ops (NOTE [LSTM layers in training graphs])."""
    module = _decompositions_module()
    if module is None:
        yield
        return
    original = module.select_one_layer_lstm_function

    def select(input, hx, params):
        if _fits_onednn(input, hx, params):
            return _onednn_training_layer
        return original(input, hx, params)

    module.select_one_layer_lstm_function = select
    try:
        yield
    finally:
        module.select_one_layer_lstm_function = original


# NOTE [RNN dropout between layers]
# torch's `_rnn_helper` (torch/_decomp/decompositions.py, used by the decompositions of rnn_tanh/rnn_relu,
# lstm and gru, batched and packed, which AOT autograd's joint trace runs) overwrites its `dropout` argument
# with `dropout if (train and num_layers < i - 1) else 0.0`, which is 0.0 for every layer (torch 2.13 and
# 2.14): the joint of nn.LSTM/GRU/RNN(num_layers=2, dropout=0.5) in train mode had no dropout at all, and
# drew no random numbers (outputs 0.04-0.7 off eager, gradients up to 6, and the generator's state after
# the call differed). Inside `dropout_between_layers()` a call with dropout (train, more than one layer)
# runs torch's helper one layer at a time and applies `torch.dropout(output, p, train=True)` between
# layers, as eager's kernels do (at::dropout of the time-major output of each layer but the last): the
# same shape, the same bernoulli draw from torch's generator (native_dropout, which stays in torch: NOTE
# [Random ops stay whole] in onnxrt/lowering.py), so eager's masks under torch.manual_seed.
def _helper_with_dropout(original):
    def helper(input, hidden, params, has_biases, num_layers, dropout, train, bidirectional, batch_first,
               layer_fn):
        if not (dropout and train and num_layers > 1):
            return original(input, hidden, params, has_biases, num_layers, dropout, train, bidirectional,
                            batch_first, layer_fn)
        per_layer = 2 if bidirectional else 1
        input = input.transpose(0, 1) if batch_first else input
        final_hiddens: list = []
        for i in range(num_layers):
            span = slice(i * per_layer, (i + 1) * per_layer)
            input, hiddens = original(input, hidden[span], params[span], has_biases, 1, 0.0, train,
                                      bidirectional, False, layer_fn)
            final_hiddens += hiddens
            if i < num_layers - 1:
                input = torch.dropout(input, dropout, train=True)
        return (input.transpose(0, 1) if batch_first else input), final_hiddens
    return helper


@contextlib.contextmanager
def dropout_between_layers():
    """While tracing a joint graph: RNN decompositions apply dropout between layers (NOTE [RNN dropout between layers])."""
    module = _decompositions_module(("_rnn_helper",))
    if module is None:
        yield
        return
    original = module._rnn_helper
    module._rnn_helper = _helper_with_dropout(original)
    try:
        yield
    finally:
        module._rnn_helper = original


@functools.lru_cache(maxsize=None)
def _workspace_op():
    """`framejit::mkldnn_rnn_layer_train`, defined on first use (NOTE [LSTM layers in training graphs])."""
    lib = torch.library.Library("framejit", "FRAGMENT")
    lib.define("mkldnn_rnn_layer_train(Tensor input, Tensor w0, Tensor w1, Tensor w2, Tensor w3, Tensor hx, "
               "Tensor cx, bool reverse, int[] batch_sizes, int mode, int hidden_size, int num_layers, "
               "bool has_biases, bool bidirectional, bool batch_first, bool train) "
               "-> (Tensor, Tensor, Tensor, Tensor)")

    def run(*args):
        with torch.enable_grad(), torch._C._AutoDispatchBelowAutograd():  # grad on, nothing recorded
            return tuple(torch.ops.aten.mkldnn_rnn_layer.default(*args))

    def fake(*args):
        return tuple(torch.ops.aten.mkldnn_rnn_layer.default(*args))

    lib.impl("mkldnn_rnn_layer_train", run, "CPU")
    torch.library.register_fake("framejit::mkldnn_rnn_layer_train", fake, lib=lib)
    _LIBRARIES.append(lib)  # a Library deregisters its ops when collected
    return torch.ops.framejit.mkldnn_rnn_layer_train.default


_LIBRARIES: list = []


# NOTE [The workspace's size]
# The op's meta kernel gives an empty workspace: its real size (bytes, uint8) is oneDNN's choice, known
# after the kernel ran (28672 for small layers, 3166208 for 50 steps x 16 x 64; no formula in the shapes).
# A backend that specialises the backward graph to its example inputs (triton: kernels per input shape) got
# examples with a 0-byte workspace (AOT autograd's fake values), so every real call differed from them and
# the backward ran eagerly ('inputs differ ...'). `sized_workspaces` gives each workspace input of a
# backward graph the size the real op gives, measured once per layer configuration on zeros of the same
# sizes and dtypes (the size does not depend on the values, but does on the dtype: a float64 layer
# measured in float32 got a wrong size and its backward ran eagerly); with symbolic sizes the example is
# left as it is.
def sized_workspaces(graph_module: torch.fx.GraphModule, example_inputs: list) -> list:
    """`example_inputs` with each workspace that a `mkldnn_rnn_layer_backward` reads at its real size."""
    examples = list(example_inputs)
    placeholders = [n for n in graph_module.graph.nodes if n.op == "placeholder"]
    for node in graph_module.graph.nodes:
        if node.target is not torch.ops.aten.mkldnn_rnn_layer_backward.default:
            continue
        workspace = node.args[22]
        if workspace not in placeholders:
            continue
        a = node.args
        layer = (a[0], *a[1:5], a[5], a[6], a[13], a[20], a[14], a[15], a[16], a[17], a[19], a[21], a[18])
        sizes = [(tuple(x.meta["val"].shape), x.meta["val"].dtype) for x in layer[:7]]
        if not all(isinstance(d, int) for shape, _ in sizes for d in shape):
            continue
        index = placeholders.index(workspace)
        size = _measured_workspace(tuple(sizes), tuple(layer[7:]))  # NOTE [The workspace's size]
        if isinstance(examples[index], torch.Tensor) and examples[index].shape != (size,):
            examples[index] = examples[index].new_empty(size)
    return examples


@functools.lru_cache(maxsize=64)
def _measured_workspace(sizes: tuple, scalars: tuple) -> int:
    """The workspace's numel for the layer's (shape, dtype) pairs: oneDNN's size depends on the dtype too
    (a float32 measure for a float64 layer gave the backward a wrong-sized example: 'inputs differ')."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    reverse, batch_sizes, *rest = scalars
    with unset_fake_temporarily(), grad_mode(True), torch._C._AutoDispatchBelowAutograd():
        zeros = [torch.zeros(shape, dtype=dtype) for shape, dtype in sizes]
        workspace = torch.ops.aten.mkldnn_rnn_layer.default(*zeros, reverse, list(batch_sizes), *rest)[3]
    return workspace.numel()


def keep_workspace(graph_module: torch.fx.GraphModule) -> int:
    """Make the forward graph's training `mkldnn_rnn_layer` calls return their workspace; returns how many."""
    layer = torch.ops.aten.mkldnn_rnn_layer.default
    count = 0
    for node in graph_module.graph.nodes:
        if node.op == "call_function" and node.target is layer and node.args[-1] is True:
            node.target = _workspace_op()
            count += 1
    if count:
        _drop_saved_detaches(graph_module)
        graph_module.recompile()
    return count


def _drop_saved_detaches(graph_module: torch.fx.GraphModule) -> None:
    """Chains of `detach` that only feed the forward graph's output (AOT autograd saves a layer's outputs
    for its backward as `detach(detach(y))`): the output takes the tensor itself. Compiled forward graphs
    run with grad off, so a detach there only costs a Python call and an alias (3 per layer, twice)."""
    detach = torch.ops.aten.detach.default
    for node in reversed(list(graph_module.graph.nodes)):
        if node.op != "call_function" or node.target is not detach:
            continue
        if all(user.op == "output" or user.target is detach for user in node.users):
            node.replace_all_uses_with(node.args[0])
            graph_module.graph.erase_node(node)
