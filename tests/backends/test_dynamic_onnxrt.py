"""Symbolic shapes on the onnxrt backend: one compilation serves every size (NOTE [One program for every
size] in onnxrt/compiler.py), and on the eager backend (graphs with SymInt placeholders run as is).

Graphs come from tests/backends/symbolic_graphs.py (placeholders with fake values over a ShapeEnv, as the
capture frontend makes them). Every test calls the compiled graph with fresh inputs of many sizes and
compares with eager; the number of ORT programs and sessions is asserted.
"""
import pytest
import torch
import torch.nn.functional as F

from framejit.backends import eager as eager_backend
from framejit.backends.onnxrt import OnnxrtCompiled, lowering, load, onnxrt, save
from tests.backends.symbolic_graphs import sizes_graph, symbolic_graph

BATCHES = (2, 3, 5, 8, 13)
SEQS = (4, 7, 16)
D = 12


class Block(torch.nn.Module):
    """A small attention block whose views read the batch and sequence sizes."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.qkv = torch.nn.Linear(D, 3 * D)
        self.out = torch.nn.Linear(D, D)
        self.norm = torch.nn.LayerNorm(D)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = self.qkv(self.norm(x)).view(b, s, 3, 2, D // 2).unbind(2)
        scores = torch.einsum("bshd,bthd->bhst", q, k) / (D // 2) ** 0.5
        att = torch.einsum("bhst,bthd->bshd", scores.softmax(-1), v).reshape(b, s, D)
        return x + F.gelu(self.out(att)), att.sum(1)


def _sizes_seen(compiled: OnnxrtCompiled) -> tuple[int, int]:
    """(symbolic programs, per-signature programs)."""
    return sum(len(v) for v in compiled.dynamic_programs.values()), len(compiled.programs)


def test_block_one_session_for_every_batch_and_sequence():
    model = Block().eval()
    example = torch.randn(3, 5, D)
    gm = symbolic_graph(model, [example], static={0: [2]})
    compiled = onnxrt(gm, [example])
    sessions = compiled.session_count()
    assert sessions == 1
    with torch.no_grad():
        for b in BATCHES:
            for s in SEQS:
                x = torch.randn(b, s, D)
                torch.testing.assert_close(compiled(x), model(x), atol=1e-5, rtol=1e-5)
    assert _sizes_seen(compiled) == (1, 0)
    assert compiled.session_count() == sessions
    (row,) = compiled.summary()
    assert row["symbolic"] and "shape0 = inputs[0].shape" in row["bind"] and "shape0[2] == 12" in row["bind"]


def test_symbolic_int_input_is_a_scalar_input():
    def fn(x, n):
        return (x * n).view(x.shape[0] * x.shape[1], 1).sum(0) + x.new_ones(n, 2).sum(0) + x.shape[1]

    gm = symbolic_graph(fn, [torch.randn(3, 4), 5])
    compiled = onnxrt(gm, [torch.randn(3, 4), 5])
    for rows, cols, n in [(3, 4, 5), (6, 2, 2), (2, 9, 7), (10, 3, 3), (4, 4, 4)]:
        x = torch.randn(rows, cols)
        torch.testing.assert_close(compiled(x, n), fn(x, n))
    assert _sizes_seen(compiled) == (1, 0)
    assert compiled.session_count() == 1


def test_size_placeholder_derived_from_a_tensor():
    gm = sizes_graph(lambda s0, x: (x.view(s0, 2, -1).sum(1) * s0, x.new_ones(s0) * 2), torch.randn(6, 4))
    compiled = onnxrt(gm, [6, torch.randn(6, 4)])
    for rows in (6, 3, 11, 2, 40):
        x = torch.randn(rows, 4)
        torch.testing.assert_close(compiled(rows, x), gm(rows, x))
    assert _sizes_seen(compiled) == (1, 0)


def test_inputs_sharing_a_symbol_share_an_onnx_axis():
    def fn(x, y, z):
        return torch.cat([x + y, z], dim=1).tanh()

    example = [torch.randn(5, 3), torch.randn(5, 3), torch.randn(5, 2)]
    gm = symbolic_graph(fn, example)
    compiled = onnxrt(gm, example)
    ((_, program),) = compiled.dynamic_programs[next(iter(compiled.dynamic_programs))]
    (part,) = [m for m in program.graph_module.children()]
    shapes = [i.shape for i in part.session.get_inputs()]
    assert shapes[0] == shapes[1] and isinstance(shapes[0][0], str) and isinstance(shapes[0][1], str)
    assert shapes[2][0] == shapes[0][0] and shapes[2][1] != shapes[0][1]
    for rows, a, c in [(5, 3, 2), (8, 4, 6), (2, 2, 2), (17, 5, 3)]:
        args = [torch.randn(rows, a), torch.randn(rows, a), torch.randn(rows, c)]
        torch.testing.assert_close(compiled(*args), fn(*args))
    assert compiled.session_count() == 1


def test_size_one_specialises_once_and_stays_correct():
    def fn(x, y):
        return (x + y).relu().sum(-1)

    example = [torch.randn(4, 6), torch.randn(4, 6)]
    compiled = onnxrt(symbolic_graph(fn, example), example)
    for rows in (4, 1, 9, 1, 2, 1):
        args = [torch.randn(rows, 6), torch.randn(rows, 6)]
        torch.testing.assert_close(compiled(*args), fn(*args))
    assert _sizes_seen(compiled) == (2, 0)  # sizes >= 2, and size 1 (broadcasting differs there)
    with pytest.raises(RuntimeError):  # mismatched sizes raise as in eager, not a wrong answer
        compiled(torch.randn(3, 6), torch.randn(5, 6))


def test_non_contiguous_input_compiles_per_signature():
    def fn(x):
        return x.exp() + 1

    example = [torch.randn(4, 5)]
    compiled = onnxrt(symbolic_graph(fn, example), example)
    for x in (torch.randn(5, 3).t(), torch.randn(6, 8), torch.randn(7, 2).t()):
        torch.testing.assert_close(compiled(x), fn(x))
    assert _sizes_seen(compiled) == (1, 2)  # contiguous inputs share one program; the transposed: per shape


def test_persisted_symbolic_program_serves_new_sizes_without_lowering(monkeypatch):
    model = Block().eval()
    example = torch.randn(2, 6, D)
    gm = symbolic_graph(model, [example], static={0: [2]})
    data = save(onnxrt(gm, [example]))
    assert data is not None

    def no_lowering(*args, **kwargs):
        raise AssertionError("a loaded symbolic program lowered again")

    monkeypatch.setattr(lowering, "lower", no_lowering)
    restored = load(data, gm)
    with torch.no_grad():
        for b, s in [(2, 6), (7, 3), (4, 10)]:
            x = torch.randn(b, s, D)
            torch.testing.assert_close(restored(x), model(x), atol=1e-5, rtol=1e-5)
    assert _sizes_seen(restored) == (1, 0)


def test_eager_backend_runs_size_placeholders_as_is():
    gm = sizes_graph(lambda s0, x: x.reshape(s0, -1).cumsum(0) + s0, torch.randn(5, 3))
    run = eager_backend.eager(gm, [5, torch.randn(5, 3)])
    for rows in (5, 2, 9):
        x = torch.randn(rows, 3)
        torch.testing.assert_close(run(rows, x), x.cumsum(0) + rows)


def test_views_to_the_same_symbolic_shape_are_not_run():
    import onnx

    def fn(q, k):  # the bmm decomposition expands q and k to their own shapes
        return (q @ k.transpose(-1, -2)).softmax(-1)

    example = [torch.randn(2, 3, 5, 4), torch.randn(2, 3, 5, 4)]
    compiled = onnxrt(symbolic_graph(fn, example, static={0: [3], 1: [3]}), example)
    ((_, program),) = compiled.dynamic_programs[next(iter(compiled.dynamic_programs))]
    (part,) = list(program.graph_module.children())
    assert "Expand" not in {n.op_type for n in onnx.load_from_string(part.model).graph.node}
    for b, h, s in [(2, 3, 5), (4, 2, 9), (3, 5, 2)]:
        args = [torch.randn(b, h, s, 4), torch.randn(b, h, s, 4)]
        torch.testing.assert_close(compiled(*args), fn(*args))
    assert compiled.session_count() == 1


def _scalar_inputs_and_size_nodes(program) -> tuple[list, list]:
    """(0-d ONNX model inputs over every part, size computations left in the top graph)."""
    import onnx

    scalars = []
    for part in program.graph_module.children():
        for value in onnx.load_from_string(part.model).graph.input:
            if not value.type.tensor_type.shape.dim:
                scalars.append(value.name)
    sizes = [n.name for n in program.graph_module.graph.nodes
             if n.op == "call_function" and isinstance(n.meta.get("val"), torch.SymInt)]
    return scalars, sizes


def test_view_shapes_are_read_inside_the_onnx_part():
    # NOTE [Shapes from the graph's inputs]: no size is computed in torch and fed per call
    model = Block().eval()
    example = torch.randn(3, 5, D)
    compiled = onnxrt(symbolic_graph(model, [example], static={0: [2]}), [example])
    ((_, program),) = compiled.dynamic_programs[next(iter(compiled.dynamic_programs))]
    assert _scalar_inputs_and_size_nodes(program) == ([], [])
    with torch.no_grad():
        for b, s in [(3, 5), (2, 2), (13, 4), (2, 31), (6, 6), (9, 2)]:
            x = torch.randn(b, s, D)
            torch.testing.assert_close(compiled(x), model(x), atol=1e-5, rtol=1e-5)
    assert _sizes_seen(compiled) == (1, 0)


def test_views_mixing_static_and_symbolic_sizes_of_two_inputs():
    def fn(x, y):
        a, b, _ = x.shape
        rows = x.reshape(a * b, 4).sum(1).view(a, b)               # [a*b] -> [a, b]: one size read from x
        cols = (y * 2).view(y.shape[0] * 2, 4).view(2, y.shape[0], 4)  # [c, 8] -> [2c, 4] -> [2, c, 4]
        # `- 1`: a returned view of a temporary is made in torch (NOTE [Returned views stay views])
        return rows.unsqueeze(0).expand(2, a, b).reshape(2 * a, b), cols.flatten(1).view(y.shape[0], 8) - 1

    example = [torch.randn(3, 5, 4), torch.randn(6, 8)]
    compiled = onnxrt(symbolic_graph(fn, example, static={0: [2], 1: [1]}), example)
    ((_, program),) = compiled.dynamic_programs[next(iter(compiled.dynamic_programs))]
    assert _scalar_inputs_and_size_nodes(program) == ([], [])
    for a, b, c in [(3, 5, 6), (2, 2, 5), (7, 3, 10), (4, 9, 3)]:  # c == 2: tracing guarded c != 2
        args = [torch.randn(a, b, 4), torch.randn(c, 8)]
        torch.testing.assert_close(compiled(*args), fn(*args))
    assert _sizes_seen(compiled) == (1, 0)


def test_size_inputs_read_by_other_ops_come_from_the_tensors():
    # arange(n) takes the size itself: the part reads it from x (NOTE [Shapes from the graph's inputs])
    def fn(x):
        return x.view(x.shape[0], 2, -1).sum(2) + torch.arange(x.shape[0] * 2).view(-1, 2) * x.shape[1]

    compiled = onnxrt(symbolic_graph(fn, [torch.randn(6, 4)]), [torch.randn(6, 4)])
    ((_, program),) = compiled.dynamic_programs[next(iter(compiled.dynamic_programs))]
    assert _scalar_inputs_and_size_nodes(program) == ([], [])
    for rows, cols in [(6, 4), (3, 8), (11, 6), (2, 6), (40, 4)]:
        x = torch.randn(rows, cols)
        torch.testing.assert_close(compiled(x), fn(x))
    assert _sizes_seen(compiled) == (1, 0)


def test_symbolic_program_freezes_weights_passed_as_inputs(monkeypatch):
    """NOTE [Frozen weights of symbolic programs]: a module's weights reach the graph as inputs; the symbolic
    program (lowered over fake inputs) holds them as ORT constants like a static program, and follows an
    in-place update of one."""
    import framejit
    from framejit.backends.onnxrt import runtime

    parts = []
    for_graph = runtime.OrtPart.for_graph.__func__
    monkeypatch.setattr(runtime.OrtPart, "for_graph",
                        classmethod(lambda cls, *a, **k: parts.append(for_graph(cls, *a, **k)) or parts[-1]))
    model = Block().eval()
    compiled = framejit.compile(model, backend="onnxrt", dynamic=True, options={"freeze_weights": True})
    with torch.no_grad():
        for i, (b, s) in enumerate([(2, 5), (3, 7), (6, 4), (4, 9)]):
            x = torch.randn(b, s, D)
            torch.testing.assert_close(compiled(x), model(x), atol=1e-5, rtol=1e-5)
            made = made if i else len(parts)
        assert made == len(parts) >= 1  # one symbolic program for every size
        assert all(len(p.frozen_positions) >= 6 and len(p._fed) < len(p.input_names) for p in parts)
        model.out.weight.mul_(-2)  # a new version of a frozen weight: the session is rebuilt
        x = torch.randn(5, 3, D)
        torch.testing.assert_close(compiled(x), model(x), atol=1e-5, rtol=1e-5)
    framejit.reset()


def test_size_check_compares_whole_static_shapes():
    """NOTE [Size checks per call]: weights (all sizes static) are checked with one shape comparison each,
    and the check still rejects a weight of another shape."""
    model = Block().eval()
    gm = symbolic_graph(lambda x, w: F.linear(x, w), [torch.randn(3, 5, D), model.out.weight], static={0: [2], 1: [0, 1]})
    compiled = onnxrt(gm, [torch.randn(3, 5, D), model.out.weight])
    (row,) = compiled.summary()
    assert f"inputs[1].shape == ({D}, {D})" in row["bind"]
    (bind, _), = compiled.dynamic_programs[next(iter(compiled.dynamic_programs))]
    assert bind([torch.randn(4, 6, D), torch.randn(D, D)]) == (4, 6)
    assert bind([torch.randn(4, 6, D), torch.randn(D, D + 1)]) is None


class Patches(torch.nn.Module):
    """A ViT stem: the patch grid's size is (h // 2) * (w // 2), read from the conv's output."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 8, 2, stride=2)
        self.cls = torch.nn.Parameter(torch.randn(1, 1, 8))
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x):
        grid = self.conv(x).flatten(2).transpose(1, 2)
        tokens = torch.cat([self.cls.expand(x.shape[0], -1, -1), grid], 1)
        return self.proj(tokens).view(x.shape[0], -1, 2, 4).sum(2)


def test_sizes_of_intermediates_are_expressions_of_input_sizes():
    # NOTE [Sizes read from inputs] and [Size expressions read in the graph]: (h // 2) * (w // 2) and
    # 1 + that are computed inside the one ORT part from x's sizes (before: 2 parts, sizes computed in torch)
    model = Patches().eval()
    example = torch.randn(2, 3, 6, 8)
    compiled = onnxrt(symbolic_graph(model, [example], static={0: [1]}), [example])
    ((_, program),) = compiled.dynamic_programs[next(iter(compiled.dynamic_programs))]
    assert program.num_parts == 1
    assert _scalar_inputs_and_size_nodes(program) == ([], [])
    with torch.no_grad():
        for b, h, w in [(2, 6, 8), (3, 4, 4), (5, 9, 6), (2, 16, 5), (4, 7, 11)]:
            x = torch.randn(b, 3, h, w)
            torch.testing.assert_close(compiled(x), model(x), atol=1e-5, rtol=1e-5)
    assert _sizes_seen(compiled) == (1, 0)


class Products(torch.nn.Module):
    """Linears on 3-d inputs (with and without bias) and 4-d matmuls: aten flattens the batch dimensions
    around each product (view, addmm/mm/bmm, view back); every product is read by another op of the part
    (a product returned as it is leaves the part flattened, and its view back runs in torch)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.inner = torch.nn.Linear(D, 8)
        self.outer = torch.nn.Linear(8, 4, bias=False)

    def forward(self, x, q, k):
        return self.outer(torch.relu(self.inner(x))) * 2, ((q @ k.transpose(-1, -2)).softmax(-1) @ k).tanh()


def test_batched_products_need_no_views_or_shape_tensors():
    # NOTE [Batched matmuls without views]: ONNX's MatMul broadcasts over the batch dimensions, so the
    # symbolic part flattens nothing: no Reshape (the only views are those around products), hence no shape
    # tensor built per call (no Shape, no Concat), and every product is one MatMul
    import onnx

    model = Products().eval()
    example = [torch.randn(5, 7, D), torch.randn(2, 3, 6, 4), torch.randn(2, 3, 6, 4)]  # distinct sizes
    compiled = onnxrt(symbolic_graph(model, example, static={0: [2], 1: [1, 3], 2: [1, 3]}), example)
    ((_, program),) = compiled.dynamic_programs[next(iter(compiled.dynamic_programs))]
    (part,) = list(program.graph_module.children())
    ops = [n.op_type for n in onnx.load_from_string(part.model).graph.node]
    assert not {"Reshape", "Concat", "Shape", "Gemm"} & set(ops), ops
    assert ops.count("MatMul") == 4
    with torch.no_grad():
        for b, s, t, u in [(5, 7, 2, 6), (2, 3, 7, 2), (6, 9, 3, 11), (4, 2, 5, 3)]:
            args = [torch.randn(b, s, D), torch.randn(t, 3, u, 4), torch.randn(t, 3, u, 4)]
            torch.testing.assert_close(compiled(*args), model(*args), atol=1e-5, rtol=1e-5)
    assert _sizes_seen(compiled) == (1, 0)


class Tagger(torch.nn.Module):
    """Embedding + bidirectional LSTM: torch makes the time-major input contiguous for its oneDNN layers."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(20, 6)
        self.lstm = torch.nn.LSTM(6, 5, batch_first=True, bidirectional=True)

    def forward(self, tokens):
        return self.lstm(self.embed(tokens))[0]


def test_symbolic_program_copies_the_lstm_input_once(monkeypatch):
    # NOTE [Copies of the symbolic trace]: both directions read one contiguous copy of the transposed
    # embeddings (as in the static program); the embedding's fresh result needs no copy of its own. The copies
    # come from torch's decomposition of the LSTM, which calls it cannot keep whole still get (NOTE [LSTM kept
    # whole]: packed sequences, dropout drawn, other devices); this test traces it so.
    import contextlib
    monkeypatch.setattr(lowering, "keep_lstm_whole", contextlib.nullcontext)
    lowered = []
    lower = lowering.lower
    monkeypatch.setattr(lowering, "lower", lambda *args: lowered.append(lower(*args)) or lowered[-1])
    model = Tagger().eval()
    example = torch.randint(0, 20, (3, 5))
    compiled = onnxrt(symbolic_graph(model, [example]), [example])
    (graph,) = [result.graph_module.graph for result in lowered]
    assert sum(1 for n in graph.nodes if n.target is torch.ops.aten.clone.default) == 1  # before: 2
    with torch.no_grad():
        for b, s in [(3, 5), (2, 9), (7, 2), (4, 4)]:
            tokens = torch.randint(0, 20, (b, s))
            torch.testing.assert_close(compiled(tokens), model(tokens), atol=1e-5, rtol=1e-5)
    assert _sizes_seen(compiled) == (1, 0)


def test_repeated_signatures_skip_the_layout_and_size_checks(monkeypatch):
    """NOTE [Symbolic programs by exact signature]: a call whose exact signature chose a program before runs
    it without computing its layout, running `bind` or flattening its inputs with pytree (the int input is
    a leaf, NOTE [Per-call path]); calls of size 1 still get their own program, every result as eager."""
    from framejit.backends import symbolic
    from framejit.backends.onnxrt import compiler

    def fn(x, n):
        return (x * n).relu().sum(-1) + x.shape[0]

    example = [torch.randn(4, 6), 3]
    compiled = onnxrt(symbolic_graph(fn, example), example)
    counts = {"layouts": 0, "flattened": 0}
    layout_signature, tree_leaves = symbolic.layout_signature, compiler.pytree.tree_leaves

    def counted_layout(*args, **kwargs):
        counts["layouts"] += 1
        return layout_signature(*args, **kwargs)

    def counted_leaves(*args, **kwargs):
        counts["flattened"] += 1
        return tree_leaves(*args, **kwargs)

    monkeypatch.setattr(symbolic, "layout_signature", counted_layout)
    monkeypatch.setattr(compiler.pytree, "tree_leaves", counted_leaves)
    first = [(4, 3), (1, 3), (9, 2), (2, 5), (1, 2)]  # sizes >= 2 and size 1: both programs built
    again = [(1, 3), (4, 3), (9, 2), (1, 2), (2, 5), (4, 3)]
    with torch.no_grad():
        for calls in (first, again, again):  # (a call that built its program is remembered at its next call)
            counts.update(layouts=0, flattened=0)  # (building a program flattens and computes layouts)
            for rows, n in calls:
                x = torch.randn(rows, 6)
                torch.testing.assert_close(compiled(x, n), fn(x, n))
    assert _sizes_seen(compiled) == (2, 0)  # sizes >= 2, and size 1
    assert counts == {"layouts": 0, "flattened": 0}  # before: one layout and one flattening per call


class _PositionBuffers(torch.nn.Module):
    """HF BERT's embeddings: position and token type ids are buffers sliced to the sequence length."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.register_buffer("position_ids", torch.arange(64).expand((1, -1)), persistent=False)
        self.register_buffer("token_type_ids", torch.zeros(1, 64, dtype=torch.long), persistent=False)
        self.positions = torch.nn.Embedding(64, D)
        self.types = torch.nn.Embedding(2, D)

    def forward(self, x):
        b, s, _ = x.shape
        types = self.token_type_ids[:, :s].expand(b, s)
        return x + self.positions(self.position_ids[:, :s]) + self.types(types)


def test_buffers_with_symbolic_sizes_are_fed_not_frozen():
    import framejit

    model = _PositionBuffers().eval()
    built = []

    def backend(gm, example_inputs):
        built.append(onnxrt(gm, example_inputs))
        return built[-1]

    compiled = framejit.compile(model, backend=backend, dynamic=True)  # buffers' sizes are symbols too
    with torch.no_grad():
        for b, s in [(4, 16), (3, 7), (2, 5), (5, 9)]:
            x = torch.randn(b, s, D)
            torch.testing.assert_close(compiled(x), model(x))
    # before: the buffers were frozen as ORT initializers of their real sizes where the model declared
    # symbolic axes; ORT refused the part and every size compiled a static program (4, not 1 symbolic)
    assert len(built) == 1 and _sizes_seen(built[0]) == (1, 0)


def test_signatures_no_symbolic_program_serves_skip_the_layout_checks(monkeypatch):
    """NOTE [Symbolic programs by exact signature]: a transposed input (compiled per signature) and an empty
    one are remembered as served per signature: repeated calls compute no layout; every result as eager."""
    from framejit.backends import symbolic

    def fn(x):
        return x.exp() + x.shape[0]

    example = [torch.randn(4, 5)]
    compiled = onnxrt(symbolic_graph(fn, example), example)
    layouts = [0]
    layout_signature = symbolic.layout_signature

    def counted_layout(*args, **kwargs):
        layouts[0] += 1
        return layout_signature(*args, **kwargs)

    monkeypatch.setattr(symbolic, "layout_signature", counted_layout)
    inputs = [torch.randn(5, 3).t(), torch.randn(6, 8), torch.randn(0, 4), torch.randn(7, 2).t()]
    with torch.no_grad():
        for round_ in range(3):
            layouts[0] = 0
            for x in inputs:
                torch.testing.assert_close(compiled(x), fn(x))
            if round_ == 2:  # (the contiguous call that built its program is remembered at its next call)
                assert layouts[0] == 0  # before: one layout per transposed call (2)
    assert _sizes_seen(compiled) == (1, 3)  # contiguous sizes share one program; transposed, empty: per shape


def _class_weighted_and_smoothed(x, t):
    w = torch.arange(1., x.shape[1] + 1)  # NOTE [arange with bounds of two types]
    return F.cross_entropy(x, t, label_smoothing=0.15), x * w  # NOTE [Symbolic scalars of Scalar overloads]


def test_loss_scalars_and_float_aranges_run_in_onnxrt():
    import framejit
    from framejit.backends.onnxrt import partition, translate
    from tests.helpers import RecordingBackend
    backend = RecordingBackend("onnxrt")
    compiled = framejit.compile(_class_weighted_and_smoothed, backend=backend)
    for n, c in ((6, 4), (9, 5)):  # the second call makes both sizes symbolic
        x, t = torch.randn(n, c), torch.randint(0, c, (n,))
        torch.testing.assert_close(compiled(x, t), _class_weighted_and_smoothed(x, t))  # ORT's sums: float32 ulps
    benign = {partition.FREE_OP_REASON, partition.SIZE_REASON, partition.MOVEMENT_REASON,
              translate.WRITE_BACK_REASON}
    rows = [r for c in backend.compiled for r in c.summary()]
    assert len(rows) == 2 and rows[1]["symbolic"] and all(r["ort_nodes"] > 0 for r in rows)
    # NOTE [Float aranges that ORT computes exactly]: a symbolic end has no known bound, so that arange runs in torch
    assert [reason for r in rows for name, reason in r["eager_nodes"].items() if reason not in benign
            and not (r["symbolic"] and name == "arange")] == []


def _float_aranges(x):
    n = x.size(0)
    return (torch.arange(1.0, 1.3, 0.1) + x.sum(), torch.arange(0.5, n, 0.3) * x[0], torch.arange(0, 1, 0.1) + x[1],
            torch.arange(1., n + 1) * x, torch.arange(-2.0, 3.0) + x[2])


def test_float_aranges_in_onnxrt_are_eagers():
    # NOTE [Float aranges that ORT computes exactly]: ORT's Range made arange(1.0, 1.3, 0.1) 3 long (eager: 4)
    # and drifted by ulps along a float step; integer-valued static bounds with a unit step still run in ORT
    import framejit
    from tests.helpers import RecordingBackend
    backend = RecordingBackend("onnxrt")
    compiled = framejit.compile(_float_aranges, backend=backend)
    for n in (5, 7, 10):  # the second call makes the size symbolic
        x = torch.randint(1, 4, (n,)).float()  # integer values: the sums and products are exact in any order
        for got, want in zip(compiled(x), _float_aranges(x)):
            assert got.shape == want.shape and torch.equal(got, want)
    static = [r for c in backend.compiled for r in c.summary() if not r["symbolic"]]
    kept = [name for name, reason in static[0]["eager_nodes"].items() if "Float aranges" in reason]
    assert len(static) == 1 and len(kept) == 3  # of 5: arange(1., n + 1) (static n) and arange(-2.0, 3.0) run in ORT
