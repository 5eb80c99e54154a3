"""The onnxrt backend around what ONNX Runtime cannot run: partial graphs, training graphs, bad options.

Differential like test_onnxrt_ops.py (tolerance 1e-4 relative / 1e-5 absolute, float32); each fallback
test also checks that the fallback happened where expected and that it was logged.
"""
from __future__ import annotations

import logging

import pytest
import torch
import torch.nn.functional as F

import framejit
import framejit.backends.onnxrt as onnxrt_module
from framejit import logs
from framejit.backends import lookup_backend
from framejit.backends.onnxrt import onnxrt
from tests.helpers import assert_same

F32 = dict(rtol=1e-4, atol=1e-5)


@torch.library.custom_op("framejit_test::wobble", mutates_args=())
def wobble(x: torch.Tensor) -> torch.Tensor:
    return x * torch.sin(x) + 0.25


@wobble.register_fake
def _(x):
    return torch.empty_like(x)


@pytest.fixture
def captured_logs(caplog):
    logs.set_logs("output_code,eager_fallback")
    caplog.set_level(logging.INFO, logger="framejit")
    yield caplog
    logs.set_logs("")


def _check(fn, make_inputs, options=None):
    gm = torch.fx.symbolic_trace(fn)
    compiled = onnxrt(gm, make_inputs(0), options)
    for seed in (1, 2):
        inputs = make_inputs(seed)
        torch.testing.assert_close(compiled(*inputs), fn(*inputs), **F32)
    (info,) = compiled.summary()
    return info


def _x(seed, *shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _eager_reasons(info, needle):
    return [name for name, reason in info["eager_nodes"].items() if needle in reason]


@pytest.mark.parametrize("op", [torch.special.digamma, torch.erfinv, lambda t: torch.cummax(t, 1)[0]],
                         ids=["digamma", "erfinv", "cummax"])
def test_untranslatable_aten_op_in_the_middle(op, captured_logs):
    def fn(x, w):
        h = torch.tanh(x @ w) * 0.5
        h = op(h)
        return torch.softmax(h * 2 + 1, dim=-1)

    info = _check(fn, lambda s: (_x(s, 4, 6), _x(s + 10, 6, 5)))
    assert info["parts"] == 2 and _eager_reasons(info, "no torchlib translation"), info
    assert "runs in eager torch: no torchlib translation" in captured_logs.text


def test_custom_op_in_the_middle(captured_logs):
    def fn(x):
        return torch.relu(wobble(torch.exp(x) - 1)) + x

    info = _check(fn, lambda s: (_x(s, 3, 7),))
    assert info["parts"] >= 1 and _eager_reasons(info, "framejit_test::wobble"), info
    assert "wobble" in captured_logs.text


def test_copies_around_a_torch_op_are_not_given_to_ort():
    """The zoo's lstm pattern: a cat, zeros and a transposed clone that only feed an op ORT cannot run
    make no ORT part (NOTE [Copies stay in torch]); the op after it still runs in ORT."""
    def fn(x, y):
        state = torch.zeros(4, 6)
        h = torch.special.digamma(torch.cat([x, y], 1).t().contiguous() + 0 * state.sum())
        return h, torch.stack([x, y]).transpose(0, 1)

    def fn_copies_only(x, y):
        return torch.special.digamma(torch.cat([x, y], 1).t().contiguous())

    info = _check(fn_copies_only, lambda s: (_x(s, 4, 3) + 3, _x(s + 10, 4, 3) + 3))
    assert info["parts"] == 0 and not info["eager_graph"], info
    assert {"cat", "clone"} <= set(_eager_reasons(info, "data movement")), info
    info = _check(fn, lambda s: (_x(s, 4, 3) + 3, _x(s + 10, 4, 3) + 3))
    assert "stack" in _eager_reasons(info, "data movement"), info  # returned: torch makes it (a view after)
    assert "zeros" not in info["eager_nodes"] and info["parts"] >= 1, info  # it feeds an ORT sum


def test_copies_that_feed_ort_arithmetic_stay_in_the_part():
    def fn(x, y):
        both = torch.cat([x.sin(), y], 1)
        return torch.cat([both, both]) * 2, torch.cat([x.cos(), y])

    info = _check(fn, lambda s: (_x(s, 3, 4), _x(s + 10, 3, 4)))
    assert info["parts"] == 1, info
    assert _eager_reasons(info, "data movement") == ["cat_2"], info  # the returned cat of ORT results


def test_bfloat16_part_runs_eagerly():
    def fn(x):
        y = (x * 3).to(torch.bfloat16) + 1
        return y.to(torch.float32) * x

    info = _check(fn, lambda s: (_x(s, 4, 4),))
    assert _eager_reasons(info, "bfloat16"), info
    assert info["parts"] >= 1


def test_fallback_ops_option_forces_eager():
    def fn(x):
        return F.gelu(x * 2) + 1

    info = _check(fn, lambda s: (_x(s, 5),), {"fallback_ops": ["aten::gelu"]})
    assert _eager_reasons(info, "fallback_ops"), info


def test_input_mutation_is_applied_like_eager():
    def fn(x, y):
        x.add_(1)
        return torch.relu(x) * y

    gm = torch.fx.symbolic_trace(fn)
    compiled = onnxrt(gm, [_x(0, 4), _x(1, 4)])
    for seed in (2, 3):
        a, b = _x(seed, 4), _x(seed + 5, 4)
        a_eager = a.clone()
        expected = fn(a_eager, b)
        torch.testing.assert_close(compiled(a, b), expected, **F32)
        torch.testing.assert_close(a, a_eager, **F32)


def test_training_graph_trains_through_ort_with_grad(captured_logs):
    """A graph that needs gradients runs its forward and backward as ORT programs (backends/joint.py), with
    eager's outputs and gradients; no eager fallback is logged."""
    import copy
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh())
    reference = copy.deepcopy(model)
    gm = torch.fx.symbolic_trace(model)
    compiled = onnxrt(gm, [_x(0, 2, 4)])
    for seed in (1, 2):
        x = _x(seed, 2, 4)
        out = compiled(x)
        assert out.grad_fn is not None
        want = reference(x)
        torch.testing.assert_close(out, want, **F32)
        out.sum().backward()
        want.sum().backward()
        for got_p, want_p in zip(model.parameters(), reference.parameters()):
            torch.testing.assert_close(got_p.grad, want_p.grad, **F32)
    assert "runs eagerly" not in captured_logs.text and "requires grad" not in captured_logs.text
    with torch.no_grad():  # inference on the same graph goes to ORT
        x = _x(3, 2, 4)
        torch.testing.assert_close(compiled(x), model(x), **F32)
    assert any(not info["eager_graph"] for info in compiled.summary())


def test_weights_updated_in_place_are_seen():
    model = torch.nn.Linear(4, 2).eval()
    gm = torch.fx.symbolic_trace(model)
    with torch.no_grad():
        compiled = onnxrt(gm, [_x(0, 3, 4)])
        x = _x(1, 3, 4)
        torch.testing.assert_close(compiled(x), model(x), **F32)
        model.weight.mul_(-2)
        torch.testing.assert_close(compiled(x), model(x), **F32)


def test_data_dependent_shapes_and_mixed_dtypes():
    def fn(x):
        return torch.nonzero(x > 0).sum() + x.sum()

    gm = torch.fx.symbolic_trace(fn)
    compiled = onnxrt(gm, [_x(0, 6)])
    for seed in (1, 2):
        x = _x(seed, 6)
        torch.testing.assert_close(compiled(x), fn(x))
    assert not compiled.summary()[0]["eager_graph"]


def test_module_is_callable_and_registered():
    gm = torch.fx.symbolic_trace(lambda x: torch.cos(x) * 2)
    for backend in (onnxrt_module, lookup_backend("onnxrt")):
        compiled = backend(gm, [_x(0, 3)])
        x = _x(1, 3)
        torch.testing.assert_close(compiled(x), torch.cos(x) * 2, **F32)


def test_session_options_are_applied():
    gm = torch.fx.symbolic_trace(lambda x: torch.sigmoid(x) + 1)
    options = {"intra_op_num_threads": 1, "graph_optimization_level": "basic",
               "providers": ["CPUExecutionProvider"], "opset": 20}
    compiled = onnxrt(gm, [_x(0, 8)], options)
    x = _x(1, 8)
    torch.testing.assert_close(compiled(x), torch.sigmoid(x) + 1, **F32)
    (program,) = compiled.programs.values()
    session = program.graph_module.ort_0.session
    assert session.get_session_options().intra_op_num_threads == 1
    entries = session.get_session_options()
    assert entries.get_session_config_entry("session.intra_op.allow_spinning") == "0"


def test_idle_workers_spin_a_bounded_time_by_default(monkeypatch):
    """NOTE [Bounded spinning]: with 2 threads, workers spin at most 200 us unless told otherwise."""
    from framejit.backends.onnxrt.options import parse_options, session_options

    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)  # the default intra-op count follows torch
    gm = torch.fx.symbolic_trace(lambda x: torch.sigmoid(x) + 1)
    compiled = onnxrt(gm, [_x(0, 8)])
    x = _x(1, 8)
    torch.testing.assert_close(compiled(x), torch.sigmoid(x) + 1, **F32)
    (program,) = compiled.programs.values()
    made = program.graph_module.ort_0.session.get_session_options()
    assert made.intra_op_num_threads == 2
    assert made.get_session_config_entry("session.intra_op.allow_spinning") == "1"
    assert made.get_session_config_entry("session.intra_op.spin_duration_us") == "200"
    never = session_options(parse_options({"spin_duration_us": 0}))
    assert never.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert session_options(parse_options({"spin_duration_us": 50})).get_session_config_entry(
        "session.intra_op.spin_duration_us") == "50"
    unbounded = session_options(parse_options({"allow_spinning": True}))  # ORT's own policy, no bound
    assert unbounded.get_session_config_entry("session.intra_op.allow_spinning") == "1"
    with pytest.raises(RuntimeError, match="spin_duration_us"):  # ORT: no such entry
        unbounded.get_session_config_entry("session.intra_op.spin_duration_us")
    one = session_options(parse_options({"intra_op_num_threads": 1}))  # no worker: nothing to spin
    assert one.get_session_config_entry("session.intra_op.allow_spinning") == "0"


@pytest.mark.parametrize("options, error, needle", [
    ({"threads": 2}, ValueError, "accepted"),
    ({"intra_op_num_threads": -1}, ValueError, "intra_op_num_threads"),
    ({"intra_op_num_threads": "2"}, TypeError, "intra_op_num_threads"),
    ({"graph_optimization_level": "max"}, ValueError, "extended"),
    ({"providers": ["NoSuchProvider"]}, ValueError, "CPUExecutionProvider"),
    ({"providers": "CPUExecutionProvider"}, TypeError, "providers"),
    ({"allow_spinning": 1}, TypeError, "allow_spinning"),
    ({"spin_duration_us": -1}, ValueError, "spin_duration_us"),
    ({"spin_duration_us": 0.5}, TypeError, "spin_duration_us"),
    ({"opset": 7}, ValueError, "opset"),
    ({"fallback_ops": ["gelu"]}, ValueError, "aten::gelu"),
    ([("opset", 18)], TypeError, "dict"),
])
def test_bad_options_raise_clearly(options, error, needle):
    gm = torch.fx.symbolic_trace(lambda x: x + 1)
    with pytest.raises(error, match=needle):
        onnxrt(gm, [torch.ones(2)], options)


def test_not_a_graph_module_raises():
    with pytest.raises(TypeError, match="GraphModule"):
        onnxrt(lambda x: x, [torch.ones(2)])


def test_tensors_an_onnxrt_program_read_stay_resizable():
    """NOTE [Arrays over tensors leave storages resizable]: inputs of an inference program (and of a training
    one) can be grown with resize_ after a compiled call, as after an eager one; later calls match eager."""
    def fn(x, w):
        return (x * 2 + 1).sum(0) * w

    compiled = framejit.compile(fn, backend="onnxrt")
    for rows, grad in ((4, False), (6, False), (4, True), (5, True)):
        outs = []
        for f in (fn, compiled):
            x, w = torch.arange(rows * 3.0).reshape(rows, 3), torch.full((3,), 0.5, requires_grad=grad)
            with torch.set_grad_enabled(grad):
                outs.append(f(x, w))
            x.resize_(rows * 5)  # raised "Trying to resize storage that is not resizable" before
            w.untyped_storage().resize_(7 * 4)  # as FSDP2 frees and refills parameter storages
            assert x.shape == (rows * 5,) and w.untyped_storage().nbytes() == 28
        assert_same(outs[1], outs[0])


def test_frozen_weights_stay_resizable_and_moved_memory_makes_a_new_session():
    """NOTE [Arrays over tensors leave storages resizable]: an inference program's frozen weights (module
    parameters) leave their storages resizable; freed and allocated again elsewhere with new values written
    through the storage (no version bump), as FSDP2 frees and all-gathers parameters between steps, the
    next call computes with the new values, as eager (the session's data pointer no longer matches)."""
    model = torch.nn.Linear(3, 2)
    compiled = framejit.compile(model, backend="onnxrt")
    storage = model.weight.untyped_storage()
    for step in range(3):
        x = torch.randn(4, 3)
        with torch.no_grad():
            assert_same(compiled(x), model(x))
        pointer, nbytes = model.weight.data_ptr(), storage.nbytes()
        storage.resize_(0)  # raised "Trying to resize storage that is not resizable" before
        blocker = torch.empty(nbytes, dtype=torch.uint8)  # noqa: F841 (takes the freed memory)
        storage.resize_(nbytes)
        storage.copy_(torch.randn(2, 3).untyped_storage())
        assert model.weight.data_ptr() != pointer


def _draws_between_parts(x):
    y = F.dropout(torch.tanh(x * 2), 0.5, training=True)  # a random op in torch between two ORT parts
    return torch.sigmoid(y + 1) * 3


def _second_part_fails(monkeypatch) -> list:
    """From now on the second ORT part run raises, as ONNX Runtime failing at run time; the list records the
    part runs."""
    from framejit.backends.onnxrt import runtime
    calls = []
    run = runtime.OrtPart.__call__

    def second_part_fails(self, *args):
        calls.append(self)
        if len(calls) == 2:
            raise RuntimeError("ONNX Runtime failed at run time (injected)")
        return run(self, *args)

    monkeypatch.setattr(runtime.OrtPart, "__call__", second_part_fails)
    return calls


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "symbolic"])
def test_a_failed_run_does_not_draw_random_numbers_twice(monkeypatch, captured_logs, dynamic):
    """NOTE [A failed run draws again] (onnxrt/compiler.py): a run that fails after a random op in torch
    already drew is rerun in torch with the generator put back: the call's values and the generator's next
    draw are eager's (a static program, and one over symbolic sizes)."""
    compiled = framejit.compile(_draws_between_parts, backend="onnxrt", dynamic=dynamic)
    with torch.no_grad():
        compiled(torch.randn(4, 5))  # built and run once
        calls = _second_part_fails(monkeypatch)
        for seed in (1, 2):
            x = torch.randn(4, 5)
            torch.manual_seed(seed)
            want, want_next = _draws_between_parts(x), torch.rand(3)
            torch.manual_seed(seed)
            got, got_next = compiled(x), torch.rand(3)
            torch.testing.assert_close(got, want, **F32)
            torch.testing.assert_close(got_next, want_next)
    assert len(calls) >= 2 and "failed (RuntimeError: ONNX Runtime failed at run time" in captured_logs.text


def test_a_failed_training_run_does_not_draw_random_numbers_twice(monkeypatch):
    """The same for a training graph's halves (onnxrt/training.py's direct call, then the generic path): the
    forward's dropout draws once per call, as in eager; outputs and input gradients are eager's."""
    compiled = framejit.compile(_draws_between_parts, backend="onnxrt")
    x = torch.randn(4, 5, requires_grad=True)
    compiled(x).sum().backward()  # the joint built and run once
    compiled(x).sum().backward()  # the direct call of the forward half taken
    calls = _second_part_fails(monkeypatch)
    for seed in (1, 2):
        a = torch.randn(4, 5, requires_grad=True)
        b = a.detach().clone().requires_grad_(True)
        torch.manual_seed(seed)
        want = _draws_between_parts(a)
        want.sum().backward()
        want_next = torch.rand(3)
        torch.manual_seed(seed)
        got = compiled(b)
        got.sum().backward()
        got_next = torch.rand(3)
        torch.testing.assert_close(got, want, **F32)
        torch.testing.assert_close(b.grad, a.grad, **F32)
        torch.testing.assert_close(got_next, want_next)
    assert len(calls) >= 2


def test_a_node_whose_translation_fails_is_logged_with_the_error(captured_logs, monkeypatch):
    from framejit.backends.onnxrt import translate
    real = translate._translate_node

    def failing(model, graph, node, *rest):
        if node.target is torch.ops.aten.tanh.default:
            raise ValueError("injected: no tanh today")
        return real(model, graph, node, *rest)

    monkeypatch.setattr(translate, "_translate_node", failing)

    def fn(x, w):
        return torch.softmax(torch.tanh(x @ w) * 2 + 1, dim=-1)

    info = _check(fn, lambda s: (_x(s, 4, 6), _x(s + 10, 6, 5)))
    # the retry leaves the node in torch, and the reason names the error it raised (not only "an earlier
    # attempt"): on eager_fallback, where users look, not only on output_code
    assert _eager_reasons(info, "its translation to ONNX failed") and _eager_reasons(info, "no tanh today"), info
    fallback = [r.getMessage() for r in captured_logs.records if r.name.endswith("eager_fallback")]
    assert any("no tanh today" in line for line in fallback), fallback
