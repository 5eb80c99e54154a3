"""Packed sequences (`nn.utils.rnn`) captured: the packed RNN kernels and the sizes read from `batch_sizes`.

NOTE [Packed sequences]: `pack_padded_sequence` -> `nn.LSTM`/`nn.GRU`/`nn.RNN` -> `pad_packed_sequence`. A
PackedSequence holds `data` (the steps of all sequences, `sum(lengths)` rows) and `batch_sizes` (a CPU
int64 tensor: how many sequences are still running at each step). Packing itself has a data-dependent
output size (`sum(lengths)`): it stays a graph break. After it, `batch_sizes` is a graph input, and what
the rest needs from its data is little:
- the batch size, `batch_sizes[0]`: `nn.LSTM` sizes its zero initial state with it
  (`torch.zeros(layers, batch_sizes[0], hidden)`) and `pad_packed_sequence` pads to it. Eager converts
  that element to a Python int (`__index__`), so it is read like an int argument of the frame: a graph
  input whose source is `int(<batch_sizes source>[i])`, a symbol of the trace's ShapeEnv (NOTE [Dynamic
  ints]), guarded by the relations the trace relies on. This is only sound while the element is the
  input's value at frame entry: the input must be a 1-d CPU integer tensor that nothing in this graph has
  written (its version counter unchanged); otherwise the call stays a break. Only size arguments of
  factory calls (`torch.zeros/ones/empty/rand/randn`, `new_zeros/new_ones/new_empty`) and `int()`,
  `.item()`, `__index__` of such an element are read this way.
- `pack_padded_sequence`/`pack_sequence` are called whole (one break at the call, run as Python): inlined,
  they broke at the packing kernel all the same, and their sort and permutation inversion became two
  graphs of a few ops each, plus recompiles as `sum(lengths)` changed. The rest of `torch.nn.utils.rnn`
  (`pad_packed_sequence`, PackedSequence's methods) is inlined.
- the packed kernels (`_VF.lstm/gru/rnn_tanh/rnn_relu` given `batch_sizes`) read its data in C++, which
  fake tensors do not have, but their outputs' shapes follow from their inputs' shapes alone: the output
  has `data`'s rows and `D * hidden` columns, the final states the initial states' shapes. Those fake
  results are made here; the graph node calls the real kernel, which eager backends run as eager does.
- `_VF._pad_packed_sequence(data, batch_sizes, batch_first, padding, total_length)` returns the padded
  `(total_length, batch)` (or batch-first) tensor and the CPU int64 lengths `(batch,)`, batch being
  `batch_sizes[0]` as above.
"""
from __future__ import annotations

import operator
from typing import Any

import torch

from .sources import CallSource, ItemSource, Ref
from .values import TensorValue

_VF = torch._C._VariableFunctions
_FACTORIES = {torch.zeros, torch.ones, torch.empty, torch.rand, torch.randn}
_NEW_FACTORIES = {"new_zeros", "new_ones", "new_empty"}
_RNNS = {_VF.lstm: 3, _VF.gru: 2, _VF.rnn_tanh: 2, _VF.rnn_relu: 2}  # kernel -> outputs
PACKING_FUNCTIONS = frozenset({"pack_padded_sequence", "pack_sequence"})  # called whole, not inlined


def _integer_cpu(t: torch.Tensor) -> bool:
    return t.device.type == "cpu" and not t.dtype.is_floating_point and not t.dtype.is_complex \
        and t.dtype is not torch.bool


def _input_of(out, node: Any):
    for entry in out.inputs:
        if isinstance(entry.value, TensorValue) and entry.value.node is node:
            return entry
    return None


def _unchanged_cpu_vector(out, entry) -> bool:
    """A 1-d CPU integer input nothing in this graph has written (NOTE [Packed sequences])."""
    tensor = entry.tensor
    return isinstance(tensor, torch.Tensor) and tensor.dim() == 1 and _integer_cpu(tensor) \
        and entry.version is not None and not entry.value.fake.is_inference() \
        and entry.value.fake._version == entry.version


def _element_int(out, entry, index: int):
    """`int(entry[index])` as an int input of the graph (a SymNodeValue, or a constant for 0/1 sizes)."""
    tensor = entry.tensor
    if not -tensor.numel() <= index < tensor.numel():
        return None
    source = CallSource(Ref(int, "int"), ItemSource(entry.source, index))
    cached = out.cached(source)
    if cached is not None:
        return cached
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    with unset_fake_temporarily():  # the real input: under the trace's fake mode int() raised (review revAB HIGH-1)
        value = int(tensor[index])
    return out.add_int_input(value, source)


def element_as_int(out, value: Any):
    """The Python int eager reads from `value` when it is `<input>[i]` of a 1-d CPU integer input not
    written in this graph, as a graph int input; None otherwise (NOTE [Packed sequences])."""
    if not isinstance(value, TensorValue) or value.fake.dim() != 0 or not _integer_cpu(value.fake):
        return None
    node = value.node
    if node.op != "call_function" or node.target is not operator.getitem or len(node.args) != 2:
        return None
    base, index = node.args
    if type(index) is not int:
        return None
    entry = _input_of(out, base)
    if entry is None or not _unchanged_cpu_vector(out, entry):
        return None
    return _element_int(out, entry, index)


def _ints_for_elements(out, values: list) -> tuple[list, bool]:
    replaced, changed = [], False
    for v in values:
        if isinstance(v, (list, tuple)):
            inner, inner_changed = _ints_for_elements(out, list(v))
            replaced.append(type(v)(inner) if inner_changed else v)
            changed |= inner_changed
            continue
        as_int = element_as_int(out, v)
        replaced.append(v if as_int is None else as_int)
        changed |= as_int is not None
    return replaced, changed


def size_args(out, kind: str, target: Any, args: tuple) -> tuple | None:
    """`args` of a factory call with each size given as an input element replaced by its int, or None
    when the call is not one of those or has no such size."""
    try:
        if kind == "call_function" and target in _FACTORIES:
            replaced, changed = _ints_for_elements(out, list(args))
            return tuple(replaced) if changed else None
    except TypeError:  # an unhashable target
        return None
    if kind == "call_method" and target in _NEW_FACTORIES and args:
        replaced, changed = _ints_for_elements(out, list(args[1:]))
        return (args[0], *replaced) if changed else None
    return None


def is_packed_rnn(target: Any, fake_args: tuple) -> bool:
    try:
        outputs = _RNNS.get(target)
    except TypeError:
        return False
    if outputs is None or len(fake_args) < 4 or not isinstance(fake_args[1], torch.Tensor):
        return False
    if outputs == 3:  # lstm.data(data, batch_sizes, hx: list, params: list, ...)
        return isinstance(fake_args[2], (list, tuple))
    return isinstance(fake_args[2], torch.Tensor) and isinstance(fake_args[3], (list, tuple))


def _with_grad_of(result: torch.Tensor, tensors: list) -> torch.Tensor:
    """`result` requiring grad as the kernel's would: a zero depending on every differentiable input."""
    inputs = [t for t in tensors if isinstance(t, torch.Tensor) and t.requires_grad]
    if not inputs or not torch._C.is_grad_enabled():
        return result
    return result + sum(t.sum() for t in inputs) * 0


def packed_rnn_fake(data, batch_sizes, hx, params, has_biases, num_layers, dropout, train, bidirectional):
    """Fake outputs of a packed RNN kernel: `data`'s rows by `D * hidden`, final states shaped as hx."""
    states = list(hx) if isinstance(hx, (list, tuple)) else [hx]
    grads = [data, *states, *params]
    columns = (2 if bidirectional else 1) * states[0].size(-1)
    output = _with_grad_of(data.new_empty((data.size(0), columns)), grads)
    finals = [_with_grad_of(s.new_empty(s.shape), grads) for s in states]
    return (output, *finals)


def pad_packed_fake(out, args: tuple, kwargs: dict):
    """A function of the fake arguments making `_pad_packed_sequence`'s fake outputs, or None."""
    if kwargs or len(args) != 5 or not isinstance(args[1], TensorValue):
        return None
    return _pad_packed_rule(out, _input_of(out, args[1].node))


def symbolic_pad_packed_rule(out, target: Any, fake_args: tuple):
    """pad_packed_fake for `_pad_packed_sequence` called with a symbolic size (the fake kernel would pin it:
    NOTE [Packed kernels with symbolic sizes]), or None."""
    if target is not _VF._pad_packed_sequence or len(fake_args) != 5 or not (
            _is_symbolic(fake_args[0]) or _is_symbolic(fake_args[1]) or isinstance(fake_args[4], torch.SymInt)):
        return None
    entry = next((e for e in out.inputs if isinstance(e.value, TensorValue) and e.value.fake is fake_args[1]), None)
    return _pad_packed_rule(out, entry)


def _pad_packed_rule(out, entry):
    if entry is None or not _unchanged_cpu_vector(out, entry):
        return None
    batch = _element_int(out, entry, 0)
    if batch is None:
        return None
    batch = batch.sym if hasattr(batch, "sym") else batch.as_constant()

    def fake(data, batch_sizes, batch_first, padding_value, total_length):
        steps = total_length if total_length > 0 else batch_sizes.size(0)  # as the kernel reads it
        lead = (batch, steps) if batch_first else (steps, batch)
        padded = _with_grad_of(data.new_empty((*lead, *data.shape[1:])), [data])
        return padded, torch.empty((batch,), dtype=torch.int64, device="cpu")
    return fake


# NOTE [Padded RNN kernels with symbolic lengths]: the padded kernels (`_VF.lstm(input, hx, params, ...,
# batch_first)` and the GRU/RNN ones) have no fake rule of their own: fake tensors run their composite,
# which unrolls the time loop and so specialises the sequence length (and guards the batch size), one
# recompile per length until the limit sent the frame to eager (nn.GRU over 10 lengths: 8 compiles). Their
# outputs' shapes follow from the inputs' alone: the output has the input's two leading sizes and
# `D * hidden` features, the final states the initial states' shapes. With a symbolic size in the input or
# the states, the fake result is made from those shapes, laid out as the composite lays them out at small
# concrete sizes (batch 2, length 3: the same stride order), and requires grad as the kernel's would. Only
# for contiguous inputs and states (the layout run cannot stand for other strides).
# NOTE [Packed kernels with symbolic sizes]: with `data` and `batch_sizes` symbolic (NOTE [Results shaped by data
# are dynamic in resume functions] in carried_loops.py), fake tensors RAN the packed LSTM's composite, which loops
# over batch_sizes and so pinned its length (one entry per longest sequence length; the GRU's composite raised,
# which took packed_rnn_fake). packed_rnn_fake is the rule for every packed kernel with a symbolic size: its
# shapes need no data.
def _is_symbolic(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and any(isinstance(d, torch.SymInt) for d in t.shape)


def _contiguous(t: torch.Tensor) -> bool:
    from torch.fx.experimental.symbolic_shapes import statically_known_true
    return statically_known_true(t.is_contiguous())


def padded_rnn_rule(target: Any, fake_args: tuple, out: Any = None):
    """A fake function for a padded RNN kernel called with symbolic sizes, or None (also for a packed kernel or
    `_pad_packed_sequence` given a symbolic size: NOTE [Packed kernels with symbolic sizes])."""
    try:
        outputs = _RNNS.get(target)
    except TypeError:
        return None
    if outputs is None and out is not None:
        return symbolic_pad_packed_rule(out, target, fake_args)
    if outputs is not None and len(fake_args) == 9 and is_packed_rnn(target, fake_args) \
            and (_is_symbolic(fake_args[0]) or _is_symbolic(fake_args[1])):
        return packed_rnn_fake
    if outputs is None or len(fake_args) != 9 or not isinstance(fake_args[-1], bool):
        return None
    hx = fake_args[1]
    states = list(hx) if isinstance(hx, (list, tuple)) else [hx]
    if (outputs == 3) != isinstance(hx, (list, tuple)) or not isinstance(fake_args[2], (list, tuple)):
        return None
    tensors = [fake_args[0], *states]
    if not all(isinstance(t, torch.Tensor) and t.dim() == 3 for t in tensors) or not any(map(_is_symbolic, tensors)):
        return None
    if not all(map(_contiguous, tensors)):
        return None

    def fake(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
        lead = (2, 3) if batch_first else (3, 2)
        small_states = [s.new_empty((s.size(0), 2, s.size(2))) for s in states]
        small = target(input.new_empty((*lead, input.size(2))), small_states if outputs == 3 else small_states[0],
                       params, has_biases, num_layers, dropout, train, bidirectional, batch_first)
        grads = [input, *states, *params]
        sizes = [(input.size(0), input.size(1), small[0].size(2)), *[tuple(s.shape) for s in states]]
        return tuple(_with_grad_of(_laid_out(input, shape, like), grads) for shape, like in zip(sizes, small))
    return fake


def _laid_out(anchor: torch.Tensor, sizes: tuple, like: torch.Tensor) -> torch.Tensor:
    """An empty tensor of `sizes` whose dims are ordered in memory as `like`'s."""
    order = sorted(range(like.dim()), key=lambda d: (-like.stride(d), d))
    base = anchor.new_empty([sizes[d] for d in order])
    return base.permute([order.index(d) for d in range(like.dim())])


def fake_rule(out, kind: str, target: Any, args: tuple, kwargs: dict, fake_args: tuple):
    """A replacement fake function for a packed-sequence kernel the fake tensors cannot run, or None."""
    if kind != "call_function":
        return None
    if is_packed_rnn(target, fake_args) and not kwargs and len(fake_args) == 9:
        return packed_rnn_fake
    if target is _VF._pad_packed_sequence:
        return pad_packed_fake(out, args, kwargs)
    return None
