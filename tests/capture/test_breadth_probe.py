"""torch.nn and library idioms a new user compiles, found by probing outside the test corpus (issue 11).

Each test runs the program eagerly, under stock `torch.compile` with a counting backend (the reference
graph count: tests may call it, framejit never does) and under framejit, on fresh inputs over at least
two calls that change values or shapes, and asserts equal outputs (and gradients, where training is the
point), no more graphs than stock, and no frame run wholly eagerly (`stats()["eager_frames"]`).

Found: `torch.utils.checkpoint.checkpoint(..., use_reentrant=False)` (every layer of a transformers model
after `gradient_checkpointing_enable()`) and `checkpoint_sequential` broke at the call; transformers'
`logger.warning_once` (an lru_cache function on logging.Logger) broke at the attribute and then at the
call; `output.requires_grad_(True)` on a tensor that already requires grad (transformers'
`enable_input_require_grads` hook) broke; torch functions decorated with `@torch.no_grad()` or
`@contextmanager` (spectral_norm's power iteration in training, `parametrize.cached()`) were called as
graph ops and broke; `id(module)` broke; a packed-sequence LSTM ran two frames wholly eagerly (the fake
kernel cannot read `batch_sizes`).
"""
from __future__ import annotations

import functools
import logging
import operator

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint as ckpt

import framejit
from tests.helpers import CountingBackend, assert_same, eager_frames


def _stock_graphs(make_model, calls, train_step) -> int:
    import torch._dynamo  # the reference compiler (tests only)
    validate = torch.distributions.Distribution._validate_args  # Dynamo turns validation off for good
    torch._dynamo.reset()
    backend = CountingBackend()
    model = make_model()
    compiled = torch.compile(model, backend=backend)
    try:
        for call in calls:
            train_step(model, compiled, call)
    finally:
        torch._dynamo.reset()
        torch.distributions.Distribution.set_default_validate_args(validate)
    return backend.graph_count


def _step(model, fn, inputs):
    """One forward (and backward when the output requires grad): the output and every gradient."""
    inputs = [x.detach().clone().requires_grad_(x.requires_grad) if isinstance(x, torch.Tensor) else x
              for x in inputs]
    out = fn(*inputs)
    grads = []
    first = out[0] if isinstance(out, tuple) else out
    if first.requires_grad:
        first.float().square().sum().backward()
        grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
        grads += [x.grad for x in inputs if isinstance(x, torch.Tensor) and x.grad is not None]
        model.zero_grad(set_to_none=True)
    return out, grads


def check(make_model, calls, *, max_graphs=None):
    """Eager vs framejit on `calls` (lists of positional inputs), each model built fresh by `make_model`
    under one seed; graph count <= stock torch.compile's (or `max_graphs`), no eager frames."""
    def build():
        torch.manual_seed(0)
        return make_model()
    eager_model = build()
    expected = [_step(eager_model, eager_model, call) for call in calls]
    stock = _stock_graphs(build, calls, lambda m, f, c: _step(m, f, c)) if max_graphs is None else max_graphs
    model = build()
    backend = CountingBackend()
    compiled = framejit.compile(model, backend=backend)
    before = eager_frames()
    for i, (call, want) in enumerate(zip(calls, expected)):
        got = _step(model, compiled, call)
        assert_same(got, want, rtol=1e-5, atol=1e-5)
    assert eager_frames() == before, framejit.stats()["eager_frame_reasons"][before:]
    assert 1 <= backend.graph_count <= stock, (backend.graph_count, stock)
    return backend, model, eager_model


class Fn(nn.Module):
    """A module whose forward is `fn(self, *inputs)`, holding `mods` as submodules."""

    def __init__(self, fn, **mods):
        super().__init__()
        self.fn = fn
        for name, mod in mods.items():
            setattr(self, name, mod)

    def forward(self, *inputs):
        return self.fn(self, *inputs)


def _x(*shape, seed=0, grad=False):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).requires_grad_(grad)


# ---- activation checkpointing (NOTE [Activation checkpointing], [Checkpointed regions]) ---------------------
def _ops(gm) -> int:
    """Ops of a graph, counting those inside its checkpointed regions (submodules) instead of their calls."""
    count = 0
    for node in gm.graph.nodes:
        if node.op in ("call_function", "call_method"):
            count += node.target is not operator.getitem or node.args[0].op != "call_module"
        elif node.op == "call_module":
            count += _ops(gm.get_submodule(node.target).region)
    return count


def _regions(gm) -> int:
    return sum(1 for node in gm.graph.nodes if node.op == "call_module")


def test_checkpoint_non_reentrant_is_captured_with_its_gradients():
    def fn(self, x):
        y = ckpt.checkpoint(lambda t, scale: torch.relu(self.l1(t)) * scale, x, 0.5, use_reentrant=False)
        y = ckpt.checkpoint(self.block, y, use_reentrant=False, preserve_rng_state=False)
        return self.l2(y)

    def make():
        return Fn(fn, l1=nn.Linear(8, 8), l2=nn.Linear(8, 3), block=nn.Sequential(nn.Linear(8, 8), nn.Tanh()))
    backend, _, _ = check(make, [[_x(2, 8, seed=0, grad=True)], [_x(2, 8, seed=1)], [_x(5, 8, seed=2, grad=True)]])
    assert all(_ops(gm) >= 5 for gm in backend.graphs)  # both layers inside the graph
    assert all(_regions(gm) == 2 for gm in backend.graphs)  # parameters require grad: both regions checkpointed


def test_checkpoint_sequential_non_reentrant():
    def make():
        return Fn(lambda self, x: ckpt.checkpoint_sequential(self.seq, 2, x, use_reentrant=False),
                  seq=nn.Sequential(nn.Linear(6, 6), nn.ReLU(), nn.Linear(6, 6), nn.Sigmoid()))
    backend, _, _ = check(make, [[_x(3, 6, seed=0, grad=True)], [_x(3, 6, seed=1, grad=True)]], max_graphs=1)
    assert _ops(backend.graphs[0]) == 4
    assert _regions(backend.graphs[0]) == 1  # checkpoint_sequential runs its last segment without checkpoint


def test_checkpointed_regions_save_only_their_inputs_as_eager_does():
    """Inlining alone kept every activation for backward (the memory the user asked to save): the numbers of
    activation elements autograd saves, compiled and eager, with and without checkpoint, are equal; gradients
    and dropout masks are equal too (RNG state preserved by the recomputation)."""
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.l1, self.l2, self.drop = nn.Linear(16, 64), nn.Linear(64, 16), nn.Dropout(0.3)

        def forward(self, x):
            return x + self.l2(self.drop(torch.nn.functional.gelu(self.l1(x))))

    blocks = nn.ModuleList([Block() for _ in range(3)])
    params = {p.data_ptr() for p in blocks.parameters()}

    def with_checkpoint(x):
        for block in blocks:
            x = ckpt.checkpoint(block, x, use_reentrant=False)
        return x.sum()

    def without(x):
        for block in blocks:
            x = block(x)
        return x.sum()

    def saved_elements(fn, x):
        count = [0]

        def pack(t):
            count[0] += 0 if t.data_ptr() in params else t.numel()
            return t
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            torch.manual_seed(7)
            loss = fn(x)
        return count[0], loss

    for fn in (with_checkpoint, without):
        backend = CountingBackend()
        compiled = framejit.compile(fn, backend=backend)
        for seed, rows in ((0, 4), (1, 4)):
            x = _x(rows, 16, seed=seed, grad=True)  # every region input is then one of checkpoint's arguments
            compiled(x)  # compiles outside the hooks (tracing runs fake tensors through them)
            (got_saved, got), (want_saved, want) = saved_elements(compiled, x), saved_elements(fn, x)
            assert got_saved == want_saved
            torch.testing.assert_close(got, want)
            grads = [torch.autograd.grad(loss, list(blocks.parameters())) for loss in (got, want)]
            for a, b in zip(*grads):
                torch.testing.assert_close(a, b)
        assert backend.graph_count == 1  # captured, not run eagerly (equal counts would hold then too)
        assert _regions(backend.graphs[0]) == (3 if fn is with_checkpoint else 0)
    assert saved_elements(with_checkpoint, x)[0] < saved_elements(without, x)[0] / 4  # the test can tell them apart


def test_checkpointed_region_that_updates_buffers_in_place():
    """BatchNorm in train mode inside checkpoint: its buffers (updated in place, again on recomputation, as
    in eager) must not be checkpoint's saved arguments (the version check raised in backward)."""
    def make():
        torch.manual_seed(3)
        return Fn(lambda self, x: ckpt.checkpoint(lambda t: self.bn(self.l(t)).relu(), x, use_reentrant=False).sum(),
                  l=nn.Linear(8, 8), bn=nn.BatchNorm1d(8))
    model, reference = make(), make()
    backend = CountingBackend()
    compiled = framejit.compile(model, backend=backend)
    for seed in range(3):
        x = _x(4, 8, seed=seed)
        got, want = compiled(x), reference(x)
        got.backward()
        want.backward()
        torch.testing.assert_close(got, want)
        for name in ("running_mean", "running_var", "num_batches_tracked"):
            torch.testing.assert_close(getattr(model.bn, name), getattr(reference.bn, name))
        for a, b in zip(model.parameters(), reference.parameters()):
            torch.testing.assert_close(a.grad, b.grad)
    assert backend.graph_count == 1 and _regions(backend.graphs[0]) == 1


def test_checkpoint_reentrant_still_matches_eager():
    """The reentrant variant is not inlined: its output does not require grad when no input does."""
    def make():
        return Fn(lambda self, x: ckpt.checkpoint(self.l1, x, use_reentrant=True) + 1, l1=nn.Linear(4, 4))
    model = make()
    compiled = framejit.compile(model, backend=CountingBackend())
    before = eager_frames()
    for seed in (0, 1):
        x = _x(2, 4, seed=seed)
        got, want = compiled(x), model(x)
        assert got.requires_grad is want.requires_grad is False
        torch.testing.assert_close(got, want)
    assert eager_frames() == before


def test_transformers_gradient_checkpointing_training_step():
    transformers = pytest.importorskip("transformers")  # a test dependency (pyproject.toml)
    from tests.models.hf import inputs

    def make():
        config = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                         intermediate_size=64, max_position_embeddings=64, hidden_dropout_prob=0.0,
                                         attention_probs_dropout_prob=0.0)
        model = transformers.BertModel(config)
        model.gradient_checkpointing_enable()  # use_reentrant=False, plus a require-grads hook on the embeddings
        return model.train()

    class LastHidden(nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = make()

        def forward(self, ids, mask):
            return self.bert(input_ids=ids, attention_mask=mask).last_hidden_state

    calls = [[d["input_ids"], d["attention_mask"]] for d in (inputs.text(0, 2, 8), inputs.text(1, 2, 8))]
    backend, _, _ = check(LastHidden, calls)
    assert backend.graph_count == 1


# ---- lru_cache methods and no-op requires_grad_ ------------------------------------------------------------
@functools.lru_cache(None)
def _warning_once(self, *args):
    self.warning(*args)


class OnceLogger(logging.Logger):
    warning_once = _warning_once  # what transformers does to logging.Logger


class _Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def _once_logger(name):
    logger = OnceLogger(name)
    logger.addHandler(_Records())
    logger.propagate = False
    return logger


def test_lru_cache_method_on_a_logger_warns_once_in_the_graph():
    eager_logger, compiled_logger = _once_logger("h3.eager"), _once_logger("h3.compiled")

    def make_fn(logger):
        def fn(x, training):
            y = x.cos()
            if training:
                logger.warning_once("`use_cache=True` is incompatible with gradient checkpointing")
            return y.sin() * 2
        return fn
    backend = CountingBackend()
    compiled = framejit.compile(make_fn(compiled_logger), backend=backend)
    eager = make_fn(eager_logger)
    before = eager_frames()
    for seed, training in ((0, True), (1, True), (2, False), (3, True)):
        x = _x(3, seed=seed)
        torch.testing.assert_close(compiled(x, training), eager(x, training))
        assert compiled_logger.handlers[0].messages == eager_logger.handlers[0].messages
    assert len(eager_logger.handlers[0].messages) == 1
    assert eager_frames() == before and backend.graph_count == 2  # one per value of `training`, no break
    other = _once_logger("h3.other")  # another logger (not cached yet): recompiles, warns once
    assert framejit.compile(make_fn(other), backend=backend)(_x(3), True) is not None
    assert len(other.handlers[0].messages) == 1


def test_requires_grad_true_on_a_tensor_that_requires_grad_is_no_break():
    def hook(module, args, output):
        output.requires_grad_(True)  # transformers' enable_input_require_grads

    def make():
        emb = nn.Embedding(10, 4)
        emb.register_forward_hook(hook)
        return Fn(lambda self, ids, w: (self.emb(ids) * w).sum(-1), emb=emb)
    ids = [torch.tensor([[1, 2, 3]]), torch.tensor([[4, 5], [6, 7]])]
    backend, _, _ = check(make, [[ids[0], _x(4, seed=0)], [ids[1], _x(4, seed=1, grad=True)]])
    assert backend.graph_count == 2  # one per shape, no break


def test_requires_grad_that_changes_the_flag_still_matches_eager():
    def fn(x):
        y = x * 2
        y.requires_grad_(False)  # a non-leaf: eager raises
        return y
    compiled = framejit.compile(fn, backend=CountingBackend())
    for seed in (0, 1):
        with pytest.raises(RuntimeError):
            fn(_x(3, seed=seed, grad=True))
        with pytest.raises(RuntimeError):
            compiled(_x(3, seed=seed, grad=True))


# ---- torch functions decorated with grad-mode managers or @contextmanager ------------------------------------
@pytest.mark.parametrize("kind", ["parametrizations", "legacy"])
def test_spectral_norm_in_training_updates_its_vectors(kind):
    def make():
        linear = nn.Linear(5, 4)
        wrapped = (nn.utils.parametrizations.spectral_norm(linear) if kind == "parametrizations"
                   else nn.utils.spectral_norm(linear))
        return Fn(lambda self, x: self.lin(x), lin=wrapped)
    calls = [[_x(2, 5, seed=s, grad=s == 1)] for s in range(3)]
    backend, model, eager_model = check(make, calls)
    for (name, got), (_, want) in zip(model.named_buffers(), eager_model.named_buffers()):
        torch.testing.assert_close(got, want, msg=name)  # the power iteration's u and v
    assert backend.op_count(0) >= 10  # the power iteration is in the graph


def test_parametrize_cached_context_manager():
    import torch.nn.utils.parametrize as parametrize

    class Symmetric(nn.Module):
        def forward(self, w):
            return w.triu() + w.triu(1).transpose(-1, -2)

    def fn(self, x):
        with parametrize.cached():
            return self.lin(x) + self.lin(x * 2)

    def make():
        lin = nn.Linear(6, 6)
        parametrize.register_parametrization(lin, "weight", Symmetric())
        return Fn(fn, lin=lin)
    check(make, [[_x(2, 6, seed=0)], [_x(3, 6, seed=1, grad=True)]])
    assert parametrize._cache_enabled == 0 and parametrize._cache == {}


def test_torch_python_functions_taking_a_module_or_an_iterator_are_inlined():
    """A torch Python function given a module or an iterator cannot be a graph op: it is inlined."""
    import torch.nn.utils.parametrize as parametrize

    def fn(self, x):
        h = self.lin(x).sum(-1)  # a break below would end the graph here
        flat = nn.utils.parameters_to_vector(self.lin.parameters())
        if parametrize.is_parametrized(self.lin):
            flat = flat * 2
        return h + flat.sum()

    def make():
        return Fn(fn, lin=nn.Linear(3, 2))
    backend, _, _ = check(make, [[_x(4, 3, seed=0)], [_x(4, 3, seed=1, grad=True)]])
    assert backend.graph_count == 2  # one per requires_grad of x, no break


# ---- id() of objects from outside ------------------------------------------------------------------------------
def test_id_of_a_module_keys_a_cache_and_recompiles_for_another():
    cache = {}

    def fn(module, x):
        x = x + 1  # a break below would end the graph here
        key = (id(module), "weight")
        if key not in cache:
            cache[key] = module.weight * 2
        return x @ cache[key].t()

    a, b = nn.Linear(3, 3), nn.Linear(3, 3)
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend)
    before = eager_frames()
    with torch.no_grad():
        for module, seed in ((a, 0), (a, 1), (b, 2), (a, 3)):
            x = _x(2, 3, seed=seed)
            got = compiled(module, x)
            torch.testing.assert_close(got, (x + 1) @ (module.weight * 2).t())
    assert set(cache) == {(id(a), "weight"), (id(b), "weight")}
    assert eager_frames() == before
    assert backend.graph_count == 4  # a fills the cache, a reads it, b fills it, a reads the new cache: no break


# ---- packed sequences ----------------------------------------------------------------------------------------
def test_packed_lstm_runs_no_frame_eagerly():
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

    def fn(self, x, lengths):
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, (h, c) = self.rnn(packed)
        out, sizes = pad_packed_sequence(out, batch_first=True)
        return F.relu(out), h, sizes

    def make():
        return Fn(fn, rnn=nn.LSTM(4, 6, batch_first=True))
    calls = [[_x(3, 5, 4, seed=0), torch.tensor([5, 3, 2])], [_x(3, 5, 4, seed=1, grad=True), torch.tensor([2, 5, 4])]]
    # stock torch.compile captures no graph for RNN modules at all (measured: 0 graphs; it breaks at
    # pack_padded_sequence, then runs the rest of the frame eagerly); framejit breaks at packing only
    # (NOTE [Packed sequences]): one graph per call here (the second call needs grad: a recompile)
    backend, _, _ = check(make, calls, max_graphs=2)
    targets = {n.target for gm in backend.graphs for n in gm.graph.nodes}
    assert torch._C._VariableFunctions.lstm in targets and torch._C._VariableFunctions._pad_packed_sequence in targets


def _packed_gru(self, x, lengths, h0):
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
    x = x * 2
    packed = pack_padded_sequence(x, lengths, enforce_sorted=False)
    out, h = self.rnn(packed, h0)
    out, sizes = pad_packed_sequence(out, padding_value=-1.0, total_length=7)
    return out.relu() + 1, h, sizes


def test_packed_gru_is_one_graph_after_packing():
    """Bidirectional GRU on packed sequences: its packed kernel, the zero state sized by
    `batch_sizes[0]` and the padding back are one graph after the break at packing; sum(lengths) and the
    batch size change without a recompile once dynamic, and `h0` given reads `int(batch_sizes[0])`."""
    def make():
        return Fn(_packed_gru, rnn=nn.GRU(4, 6, bidirectional=True))
    graphs, eager = framejit.stats()["graphs"], eager_frames()
    calls = [[_x(6, 3, 4, seed=0), torch.tensor([5, 3, 2]), None],
             [_x(6, 3, 4, seed=1), torch.tensor([4, 6, 1]), None],   # sum(lengths) changes: dynamic
             [_x(6, 4, 4, seed=2), torch.tensor([2, 6, 6, 1]), None],  # batch size changes: dynamic
             [_x(6, 2, 4, seed=3), torch.tensor([3, 1]), None]]
    backend, _, _ = check(make, calls, max_graphs=5)
    # before NOTE [Packed sequences] (measured with 2 layers): 13 graphs of 1-2 ops (zeros sized by
    # batch_sizes[0], the packed kernel and pad_packed_sequence each broke); now the x * 2 graph and the one
    # after packing, each recompiled as sum(lengths) and then the batch size become dynamic (the second twice)
    assert backend.graph_count == 5, backend.graph_count
    assert framejit.stats()["graphs"] - graphs == backend.graph_count and eager_frames() == eager
    with_h0 = [[_x(6, 3, 4, seed=4), torch.tensor([5, 6, 2]), _x(2, 3, 6, seed=5)]]
    backend, _, _ = check(make, with_h0, max_graphs=2)
    assert not any(gm.graph.find_nodes(op="call_function", target=torch._C._VariableFunctions._pack_padded_sequence)
                   for gm in backend.graphs)


# ---- ops whose Python result depends on tensor data -----------------------------------------------------------
def test_mask_left_aligned_check_reads_the_real_mask():
    """nn.TransformerEncoder's fast-path check `torch._nested_tensor_from_mask_left_aligned(src, mask)` returns a
    bool computed from the mask's data: a fake tensor answered True for every mask (a wrong, unguarded fold)."""
    def fn(x, pad):
        y = x * 2
        if torch._nested_tensor_from_mask_left_aligned(x, pad.logical_not()):
            return y + 1
        return y - 1

    compiled = framejit.compile(fn, backend=CountingBackend())
    before = eager_frames()
    right_padded = torch.tensor([[False] * 6, [False] * 4 + [True] * 2])
    left_padded = torch.tensor([[True] + [False] * 5, [False] * 6])
    for seed, pad in ((0, right_padded), (1, left_padded), (2, right_padded)):
        x = _x(2, 6, 4, seed=seed)
        torch.testing.assert_close(compiled(x, pad), fn(x, pad))
    assert eager_frames() == before
