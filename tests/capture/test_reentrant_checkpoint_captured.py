"""Reentrant activation checkpointing captured in the graph (NOTE [Reentrant checkpoint in the graph]).

`torch.utils.checkpoint.checkpoint(fn, *args, use_reentrant=True)` was a graph break where torch's checkpoint ran
with `fn` compiled apart (a model step in 3 graphs or more). Now the graph applies torch's CheckpointFunction to
the traced `fn`: each program here trains for 3 steps (SGD, changing shapes) eagerly and compiled, on copies of
one model, and outputs, every parameter's and input's gradient, the parameters after each step, BatchNorm's
running statistics (updated twice per step in eager: forward and recomputation), the RNG state and warnings are
equal, in one graph per shape. The cases eager runs otherwise than a single traced region (Python effects made
again in backward, a function reading grad mode) stay breaks, decided while tracing, with eager's behaviour.
"""
from __future__ import annotations

import copy
import functools
import warnings

import pytest
import torch
import torch.nn as nn
import torch.utils.checkpoint as ckpt

import framejit
from tests.helpers import CountingBackend, assert_same, assert_same_grads, logged_breaks

_SHAPES = [(4, 8), (4, 8), (6, 8)]


class _Net(nn.Module):
    def __init__(self, norm: bool = True, preserve: bool = True) -> None:
        super().__init__()
        self.inp = nn.Linear(8, 8)
        layers = [nn.Linear(8, 16), nn.Dropout(0.3), nn.GELU()] + ([nn.BatchNorm1d(16)] if norm else [])
        self.block = nn.Sequential(*layers, nn.Linear(16, 8))
        self.out = nn.Linear(8, 2)
        self.preserve = preserve

    def forward(self, x):
        h = torch.relu(self.inp(x))
        h = ckpt.checkpoint(self.block, h, use_reentrant=True, preserve_rng_state=self.preserve) + h
        return self.out(h)


def _backend(name: str):
    return CountingBackend() if name == "eager" else name


def _train(model, shapes, seed=0, x_grad=True):
    """3 SGD steps; per step: output, loss, input grad, every parameter's grad, parameters, buffers, RNG state."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    steps = []
    for k, shape in enumerate(shapes):
        x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed + k)).requires_grad_(x_grad)
        torch.manual_seed(100 + k)
        opt.zero_grad(set_to_none=True)
        out = model(x)
        loss = out.pow(2).sum()
        loss.backward()
        grads = [None if p.grad is None else p.grad.clone() for p in model.parameters()]
        opt.step()
        steps.append((out.detach(), loss.detach(), x.grad, grads, [p.detach().clone() for p in model.parameters()],
                      [b.clone() for b in model.buffers()], torch.get_rng_state()))
    return steps


def _compare(got, want):
    for g, w in zip(got, want):
        out, loss, xg, grads, params, buffers, rng = g
        assert_same(out, w[0])
        assert_same(loss, w[1])
        assert (xg is None) == (w[2] is None)
        if xg is not None:
            assert_same(xg, w[2])
        assert [gr is None for gr in grads] == [gr is None for gr in w[3]]
        for a, b in zip(grads, w[3]):
            if a is not None:
                torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
        for a, b in zip(params + buffers, w[4] + w[5]):
            torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
        assert torch.equal(rng, w[6])


@pytest.mark.parametrize("backend", ["eager", "onnxrt"])
@pytest.mark.parametrize("preserve", [True, False])
def test_a_reentrant_checkpointed_block_trains_as_eager_in_one_graph_per_shape(backend, preserve):
    torch.manual_seed(0)
    model = _Net(preserve=preserve)
    twin = copy.deepcopy(model)
    want = _train(model, _SHAPES)
    eager_before = framejit.stats()["eager_frames"]
    counting = _backend(backend)
    with logged_breaks() as records:
        got = _train(framejit.compile(twin, backend=counting), _SHAPES)
    _compare(got, want)
    assert not records, records
    assert framejit.stats()["eager_frames"] == eager_before
    assert int(twin.block[3].num_batches_tracked) == 6  # forward and recomputation, 3 steps, as eager
    if backend == "eager":
        assert counting.graph_count <= 2  # a graph per shape at most (was 3 per call: before, block, after)
        assert any(type(n.target).__name__ == "ReentrantCall" for gm in counting.graphs for n in gm.graph.nodes)


@pytest.mark.parametrize("backend", ["eager", "onnxrt"])
def test_no_input_requiring_grad_warns_and_leaves_the_block_without_gradients(backend):
    torch.manual_seed(1)
    model = _Net(norm=False)
    model.inp.requires_grad_(False)  # so the checkpoint's input does not require grad
    twin = copy.deepcopy(model)

    def run(m):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            steps = _train(m, _SHAPES[:2], x_grad=False)
        return steps, [str(w.message) for w in seen if "requires_grad" in str(w.message)]
    want, want_warnings = run(model)
    counting = _backend(backend)
    got, got_warnings = run(framejit.compile(twin, backend=counting))
    _compare(got, want)
    assert all(g is None for g in got[0][3][2:6])  # the block's parameters: None, as eager
    assert all(g is not None for g in got[0][3][6:])  # the head's
    assert got_warnings == want_warnings and len(want_warnings) == 2, (got_warnings, want_warnings)
    assert backend != "eager" or counting.graph_count == 1


def test_autograd_grad_through_a_reentrant_checkpoint_raises_as_eager():
    lin = nn.Linear(4, 4)

    def fn(x):
        return ckpt.checkpoint(lambda t: torch.tanh(lin(t)), x * 2, use_reentrant=True).sum()

    counting = CountingBackend()
    compiled = framejit.compile(fn, backend=counting)
    for f in (fn, compiled):
        x = torch.randn(3, 4, requires_grad=True)
        with pytest.raises(RuntimeError, match="use_reentrant=True, torch.utils.checkpoint is incompatible"):
            torch.autograd.grad(f(x), [x])
    assert counting.graph_count == 1


def test_python_effects_in_the_function_happen_again_in_backward_as_eager():
    lin = nn.Linear(4, 4)

    def make(log):
        def body(t):
            log.append(len(log))
            return torch.sin(lin(t))

        def fn(x):
            return ckpt.checkpoint(body, x + 1, use_reentrant=True) * 2
        return fn
    logs = {"eager": [], "compiled": []}
    fns = {"eager": make(logs["eager"]), "compiled": framejit.compile(make(logs["compiled"]), backend=CountingBackend())}
    with logged_breaks() as records:
        for shape in [(2, 4), (3, 4)]:
            grads = []
            for kind, f in fns.items():
                log = logs[kind]
                log.clear()
                x = torch.randn(*shape, generator=torch.Generator().manual_seed(shape[0])).requires_grad_()
                out = f(x)
                assert log == [0], (kind, log)  # the forward
                out.sum().backward()
                assert log == [0, 1], (kind, log)  # and the recomputation in backward
                grads.append(x.grad)
            assert_same(grads[0], grads[1])
    assert any("effects on Python state" in r for r in records), records


def test_a_function_reading_grad_mode_runs_as_eager():
    # eager's forward runs it under no_grad (x * 3), its recomputation under grad (gradient 2)
    def body(t):
        return t * (2.0 if torch.is_grad_enabled() else 3.0)

    def fn(x):
        return ckpt.checkpoint(body, x, use_reentrant=True)

    with logged_breaks() as records:
        for f in (fn, framejit.compile(fn, backend=CountingBackend())):
            x = torch.ones(3, requires_grad=True)
            out = f(x)
            out.sum().backward()
            assert_same(out.detach(), torch.full((3,), 3.0))
            assert_same(x.grad, torch.full((3,), 2.0))
    assert any("reads torch.is_grad_enabled()" in r for r in records), records


def test_tuple_results_keyword_partials_and_no_grad_calls():
    torch.manual_seed(2)
    layer = nn.Linear(6, 6)

    def step(t, mask, scale=1.0):
        return torch.relu(layer(t)) * scale * mask, None

    def fn(x, mask):
        h, none = ckpt.checkpoint(functools.partial(step, scale=0.5), x, mask, use_reentrant=True)
        return h + 1, none

    counting = CountingBackend()
    compiled = framejit.compile(fn, backend=counting)
    for shape in [(2, 6), (2, 6), (5, 6)]:
        results = []
        for f in (fn, compiled):
            x = torch.randn(*shape, generator=torch.Generator().manual_seed(shape[0])).requires_grad_()
            mask = (torch.arange(6) % 2).float()
            layer.zero_grad(set_to_none=True)
            out, none = f(x, mask)
            out.sum().backward()
            with torch.no_grad():
                plain, _ = f(x, mask)
            results.append((out.detach(), none, x.grad, layer.weight.grad.clone(), plain, plain.requires_grad))
        for a, b in zip(*results):
            assert_same(a, b) if isinstance(a, torch.Tensor) else None
            assert a is b or isinstance(a, torch.Tensor)
    assert counting.graph_count <= 4  # grad on and off, per shape kind


class _Flag:
    active = None


def test_an_attribute_set_and_restored_in_the_function_is_captured_and_a_counter_is_not():
    state = _Flag()
    lin = nn.Linear(4, 4)

    def scoped(t):  # kernels' CompileableContextVar around a hub layer: set, then reset
        state.active = "on"
        y = torch.tanh(lin(t))
        state.active = None
        return y

    def counting_body(t):
        state.calls = getattr(state, "calls", 0) + 1
        return torch.tanh(lin(t))

    for body, breaks in ((scoped, False), (counting_body, True)):
        fn = (lambda b: lambda x: ckpt.checkpoint(b, x, use_reentrant=True) * 2)(body)
        seen = []
        counting = CountingBackend()
        with logged_breaks() as records:
            for f in (fn, framejit.compile(fn, backend=counting)):
                state.calls = 0
                x = torch.randn(2, 4, generator=torch.Generator().manual_seed(5)).requires_grad_()
                lin.zero_grad(set_to_none=True)
                f(x).sum().backward()
                seen.append((x.grad, lin.weight.grad.clone(), state.active, state.calls))
        assert_same(seen[0][0], seen[1][0])
        assert_same(seen[0][1], seen[1][1])
        assert seen[0][2:] == seen[1][2:]
        assert any("effects on Python state" in r for r in records) == breaks, records
        if not breaks:
            assert counting.graph_count == 1


class _Nested(nn.Module):
    def __init__(self, outer_reentrant: bool, inner_reentrant: bool) -> None:
        super().__init__()
        self.a, self.b, self.bn, self.drop = nn.Linear(6, 6), nn.Linear(6, 6), nn.BatchNorm1d(6), nn.Dropout(0.5)
        self.modes = (outer_reentrant, inner_reentrant)

    def inner(self, t):
        return self.drop(torch.tanh(self.b(t)))

    def outer(self, t):
        h = self.bn(self.a(t))
        return ckpt.checkpoint(self.inner, h, use_reentrant=self.modes[1]) + h

    def forward(self, x):
        return ckpt.checkpoint(self.outer, x, use_reentrant=self.modes[0]).sum(-1, keepdim=True)


@pytest.mark.parametrize("modes", [(True, True), (True, False), (False, True)])
def test_nested_checkpoints_train_as_eager(modes):
    torch.manual_seed(3)
    model = _Nested(*modes)
    twin = copy.deepcopy(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # eager's inner reentrant call warns (its input, made under no_grad)
        want = _train(model, [(3, 6), (3, 6), (5, 6)])
        counting = CountingBackend()
        got = _train(framejit.compile(twin, backend=counting), [(3, 6), (3, 6), (5, 6)])
    _compare(got, want)
    assert counting.graph_count <= 2


def _closure_reads(leaf: bool):
    """x (a hooked leaf) or h = a(x) (a hooked non-leaf) passed to the checkpoint and read by `fn` from its
    closure too: eager's recomputation detaches only the argument, so the closure read back-propagates through
    the tensor itself (NOTE [Arguments fn also reads elsewhere])."""
    torch.manual_seed(4)
    block, a = nn.Linear(6, 6), nn.Linear(6, 6)

    def fn(x, calls):
        h = x if leaf else a(x)
        if not leaf:
            h.register_hook(lambda g: calls.append(1))
        return ckpt.checkpoint(lambda t: torch.tanh(block(t)) * h, h, use_reentrant=True)
    return block, a, fn


@pytest.mark.parametrize("leaf,retain", [(True, False), (False, False), (False, True)])
def test_an_argument_also_read_from_the_closure_back_propagates_as_eager(leaf, retain):
    block, a, fn = _closure_reads(leaf)
    compiled = framejit.compile(fn, backend=CountingBackend())
    for shape in [(3, 6), (3, 6), (5, 6)]:
        seen = []
        for f in (fn, compiled):
            calls = []
            block.zero_grad(set_to_none=True)
            a.zero_grad(set_to_none=True)
            x = torch.randn(*shape, generator=torch.Generator().manual_seed(shape[0])).requires_grad_()
            if leaf:
                x.register_hook(lambda g: calls.append(1))
            out = f(x, calls)
            try:
                out.pow(2).sum().backward(retain_graph=retain)
                error = None
            except RuntimeError as e:
                error = str(e).split(".")[0]
            seen.append((out.detach(), error, len(calls), x.grad, block.weight.grad, a.weight.grad))
        want, (out, error, n, *grads) = seen
        assert_same(out, want[0])
        assert (error, n) == (want[1], want[2])
        assert error is not None or not leaf or n == 2  # eager: the argument's grad and the closure's
        assert error == (None if leaf else "Trying to backward through the graph a second time (or directly "
                         "access saved tensors after they have already been freed)")
        for g, w in zip(grads, want[3:]):
            assert (g is None) == (w is None)
            if g is not None:
                torch.testing.assert_close(g, w)


def test_a_parameter_passed_and_read_as_an_attribute_back_propagates_as_eager():
    torch.manual_seed(5)
    w = nn.Parameter(torch.randn(4))
    holder = nn.Module()
    holder.w = w

    def fn(x):  # the argument is holder.w; the function reads holder.w too
        return ckpt.checkpoint(lambda t: t * holder.w, holder.w, use_reentrant=True).sum() * x

    compiled = framejit.compile(fn, backend=CountingBackend())
    for shape in [(2, 4), (2, 4), (3, 4)]:
        seen = []
        for f in (fn, compiled):
            calls = []
            handle = w.register_hook(lambda g: calls.append(1))
            w.grad = None
            x = torch.randn(*shape, generator=torch.Generator().manual_seed(shape[0])).requires_grad_()
            f(x).pow(2).sum().backward()
            handle.remove()
            seen.append((x.grad, w.grad.clone(), len(calls)))
        assert_same(seen[1][0], seen[0][0])
        torch.testing.assert_close(seen[1][1], seen[0][1])
        assert seen[1][2] == seen[0][2] == 2  # the argument's gradient and the attribute read's, as eager


_STATE = {"v": 1.0}


def _scaled_by_global(t):
    return torch.tanh(t) * _STATE["v"]


class _Changing(nn.Module):
    """A block whose checkpointed function reads Python state that each step changes between the forward and the
    backward (`case`): a scale attribute read by a lambda made in forward, a global dict value, the training flag
    with BatchNorm in the block, a Parameter of the block replaced."""

    def __init__(self, case: str) -> None:
        super().__init__()
        self.case, self.scale = case, 1.0
        self.block = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.Linear(8, 8))

    def forward(self, x):
        if self.case == "scale":
            return ckpt.checkpoint(lambda t: self.block(t) * self.scale, x, use_reentrant=True)
        if self.case == "global":
            return ckpt.checkpoint(_scaled_by_global, self.block(x), use_reentrant=True)
        return ckpt.checkpoint(self.block, x, use_reentrant=True)


def _change_between(model, k: int, before: bool) -> None:
    if model.case == "scale":
        model.scale = 1.0 if before else 3.0 + k
    elif model.case == "global":
        _STATE["v"] = 1.0 + k if before else 10.0
    elif model.case == "eval":
        model.train(before)
    elif not before:  # "param"
        model.block[0].weight = nn.Parameter(model.block[0].weight.detach() * 2)


def _steps_with_changes(model, shapes):
    steps = []
    for k, shape in enumerate(shapes):
        _change_between(model, k, before=True)
        x = torch.randn(*shape, generator=torch.Generator().manual_seed(k)).requires_grad_()
        out = model(x)
        _change_between(model, k, before=False)
        out.pow(2).sum().backward()
        steps.append((out.detach(), x.grad, {n: None if p.grad is None else p.grad.clone()
                                             for n, p in model.named_parameters()},
                      [b.clone() for b in model.buffers()]))
        model.zero_grad(set_to_none=True)
    return steps


@pytest.mark.parametrize("case", ["scale", "global", "eval", "param"])
def test_state_changed_between_the_forward_and_the_backward_is_read_by_the_recomputation(case):
    """review revY H1: eager's recomputation calls fn again and reads the state of the backward; the captured
    region ran the trace's values (every gradient of the block and x.grad differed, silently). Now the frame's
    guards (and the graph inputs the region reads) are checked again in the recomputation, and fn runs as eager
    where they changed; the call stays captured."""
    torch.manual_seed(0)
    model = _Changing(case)
    twin = copy.deepcopy(model)
    want = _steps_with_changes(model, _SHAPES)
    counting = CountingBackend()
    with logged_breaks() as records:
        got = _steps_with_changes(framejit.compile(twin, backend=counting), _SHAPES)
    assert not records, records
    assert any(type(n.target).__name__ == "ReentrantCall" for gm in counting.graphs for n in gm.graph.nodes)
    for (out, xg, grads, buffers), (w_out, w_xg, w_grads, w_buffers) in zip(got, want):
        assert_same(out, w_out)
        torch.testing.assert_close(xg, w_xg, atol=1e-6, rtol=1e-5)
        assert_same_grads(grads, w_grads)
        for a, b in zip(buffers, w_buffers):
            torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
