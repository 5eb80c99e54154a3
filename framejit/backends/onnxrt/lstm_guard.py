"""Eager's values for non-finite LSTM inputs in ORT programs (NOTE [ORT's LSTM eats NaN]).

`guard(graph, node, values)` is called by translate.py right after a `framejit::lstm_whole` node became ONNX
`LSTM` ops: it replaces the node's three results by an `If` that takes them when every input, state and
weight is finite, and otherwise the LSTM written out as ONNX cell ops in a `Loop` per layer and direction.
"""
from __future__ import annotations

import itertools

# NOTE [ORT's LSTM eats NaN]
# ONNX Runtime's CPU LSTM (1.32) clamps its gate pre-activations before its sigmoid and tanh: a NaN in the
# input, the initial states or the weights gave finite outputs (tanh(1) for a NaN input, /tmp/hperf/adv3.py)
# where eager's LSTM carries the NaN on (a NaN at step t of batch row b makes that row's later steps NaN,
# and every step of the next layer's reverse direction). ORT's elementwise Sigmoid and Tanh keep NaN. So the
# LSTM's results are guarded: `IsNaN(sum of x * 0 over every input)` is true iff some input, state or
# weight holds NaN or +-inf (frozen weights make their terms constants, which ORT folds); then an `If`
# computes the LSTM as eager's formula, cell by cell: gates = x W_ih^T + b_ih + b_hh + h W_hh^T in torch's
# (i, f, g, o) order, c' = sigmoid(f) c + sigmoid(i) tanh(g), h' = sigmoid(o) tanh(c'), one `Loop` over
# the time steps per layer and direction, the reverse direction over the reversed sequence. Finite inputs
# (every normal call) cost the check's one pass over the input and states.


class _Builder:
    """Appends ONNX nodes named node_<fx name>__lstm<k> (translate.py's naming invariant) to a graph."""

    def __init__(self, graph, fx_name: str, counter):
        self.graph, self.fx_name, self.counter = graph, fx_name, counter

    def __call__(self, op_type, inputs, outputs=1, **attrs):
        import onnx_ir as ir

        attributes = []
        for key, value in attrs.items():
            if isinstance(value, ir.Graph):
                attributes.append(ir.AttrGraph(key, value))
            elif isinstance(value, ir.TensorProtocol):
                attributes.append(ir.AttrTensor(key, value))
            elif isinstance(value, (list, tuple)):
                attributes.append(ir.AttrInt64s(key, list(value)))
            else:
                attributes.append(ir.AttrInt64(key, value))
        name = f"node_{self.fx_name}__lstm{next(self.counter)}"
        made = ir.Node("", op_type, inputs, attributes=attributes, num_outputs=outputs, name=name)
        self.graph.append(made)
        for k, out in enumerate(made.outputs):
            out.name = f"{name}_{k}"
        return made.outputs[0] if outputs == 1 else list(made.outputs)

    def const(self, values, dtype="int64"):
        import numpy as np
        import onnx_ir as ir

        return self("Constant", [], value=ir.tensor(np.array(values, dtype=dtype)))


def _non_finite(b: _Builder, tensors: list):
    """A bool scalar: some tensor holds NaN or +-inf (x * 0 is NaN exactly there)."""
    zero = b.const(0.0, "float32")
    total = None
    for t in tensors:
        term = b("ReduceSum", [b("Mul", [t, zero])], keepdims=0)
        total = term if total is None else b("Add", [total, term])
    return b("IsNaN", [total])


def _cell_loop(b: _Builder, inp, h0, c0, w_ih, w_hh, biases):
    """(Y (T, B, H), h_T, c_T) of one layer and direction over time-major `inp`, as eager's formula."""
    import onnx_ir as ir

    projected = b("MatMul", [inp, b("Transpose", [w_ih], perm=[1, 0])])
    for bias in biases:
        projected = b("Add", [projected, bias])
    w_hh_t = b("Transpose", [w_hh], perm=[1, 0])
    body = ir.Graph([], [], nodes=[], name=f"{b.fx_name}_lstm_step{next(b.counter)}")
    inner = _Builder(body, b.fx_name, b.counter)
    step = ir.Value(name=f"{body.name}_t", type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape([]))
    keep = ir.Value(name=f"{body.name}_cond", type=ir.TensorType(ir.DataType.BOOL), shape=ir.Shape([]))
    h = ir.Value(name=f"{body.name}_h", type=ir.TensorType(ir.DataType.FLOAT))
    c = ir.Value(name=f"{body.name}_c", type=ir.TensorType(ir.DataType.FLOAT))
    body.inputs.extend([step, keep, h, c])
    gates = inner("Add", [inner("Gather", [projected, step], axis=0), inner("MatMul", [h, w_hh_t])])
    i, f, g, o = inner("Split", [gates], outputs=4, axis=-1, num_outputs=4)
    c_next = inner("Add", [inner("Mul", [inner("Sigmoid", [f]), c]),
                           inner("Mul", [inner("Sigmoid", [i]), inner("Tanh", [g])])])
    h_next = inner("Mul", [inner("Sigmoid", [o]), inner("Tanh", [c_next])])
    body.outputs.extend([inner("Identity", [keep]), inner("Identity", [h_next]), inner("Identity", [c_next]),
                         inner("Identity", [h_next])])
    steps = b("Squeeze", [b("Shape", [inp], start=0, end=1), b.const([0])])
    true = b.const(True, "bool")
    h_t, c_t, ys = b("Loop", [steps, true, h0, c0], outputs=3, body=body)
    return ys, h_t, c_t


def _reversed(b: _Builder, value):
    return b("Slice", [value, b.const([-1]), b.const([-(2 ** 63)]), b.const([0]), b.const([-1])])


def _eager_formula(b: _Builder, x, hx, params, has_biases, num_layers, bidirectional, batch_first):
    """The LSTM's (output, h_n, c_n) from ONNX cell ops (NOTE [ORT's LSTM eats NaN])."""
    directions = 2 if bidirectional else 1
    per = 4 if has_biases else 2
    layer_input = b("Transpose", [x], perm=[1, 0, 2]) if batch_first else x
    hs, cs = [], []
    for layer in range(num_layers):
        outs = []
        for d in range(directions):
            k = layer * directions + d
            h0 = b("Gather", [hx[0], b.const(k)], axis=0)
            c0 = b("Gather", [hx[1], b.const(k)], axis=0)
            w = params[k * per:(k + 1) * per]
            inp = layer_input if d == 0 else _reversed(b, layer_input)
            ys, h_t, c_t = _cell_loop(b, inp, h0, c0, w[0], w[1], w[2:])
            outs.append(ys if d == 0 else _reversed(b, ys))
            hs.append(b("Unsqueeze", [h_t, b.const([0])]))
            cs.append(b("Unsqueeze", [c_t, b.const([0])]))
        layer_input = outs[0] if directions == 1 else b("Concat", outs, axis=-1)
    out = b("Transpose", [layer_input], perm=[1, 0, 2]) if batch_first else layer_input
    h_n = hs[0] if len(hs) == 1 else b("Concat", hs, axis=0)
    c_n = cs[0] if len(cs) == 1 else b("Concat", cs, axis=0)
    return [out, h_n, c_n]


def guard(graph, node, values: dict) -> None:
    """Replace values[node.name] (ORT's LSTM results) by an If keeping eager's values on non-finite inputs."""
    import onnx_ir as ir

    x_node, hx_nodes, param_nodes, has_biases, num_layers, _dropout, _train, bidirectional, batch_first = node.args
    x = values[x_node.name]
    hx = [values[n.name] for n in hx_nodes]
    params = [values[n.name] for n in param_nodes]
    fast = list(values[node.name])
    counter = itertools.count()
    b = _Builder(graph, node.name, counter)
    bad = _non_finite(b, [x, *hx, *params])
    slow_graph = ir.Graph([], [], nodes=[], name=f"{node.name}_eager_formula")
    slow = _eager_formula(_Builder(slow_graph, node.name, counter), x, hx, params, has_biases, num_layers,
                          bidirectional, batch_first)
    slow_graph.outputs.extend(slow)
    fast_graph = ir.Graph([], [], nodes=[], name=f"{node.name}_ort_lstm")
    fb = _Builder(fast_graph, node.name, counter)
    fast_graph.outputs.extend(fb("Identity", [v]) for v in fast)
    choice = b("If", [bad], outputs=3, then_branch=slow_graph, else_branch=fast_graph)
    for k, (old, new) in enumerate(zip(fast, choice)):
        new.shape, new.type = old.shape, old.type
        old.name, new.name = f"{node.name}__{k}_ort", f"{node.name}__{k}"
    values[node.name] = choice
