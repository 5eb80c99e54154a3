"""The public API: argument validation, decorator forms, compiled modules and methods, fullgraph errors,
user errors, eager fallback, disable, reset, the backend registry and opcode coverage."""
from __future__ import annotations

import dis
import logging

import pytest
import torch

import framejit
from framejit.capture.breaks import BreakKind
from framejit.capture.handlers import HANDLERS, UNSUPPORTED_OPCODES
from framejit.capture.normalize import DROPPED, RENAMED, REWRITTEN
from tests.helpers import CountingBackend, assert_same, run_differential


def f(x, y):
    return x * 2 + y


# ---- argument validation ---------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs,exc,needle", [
    ({"backend": "nope"}, ValueError, "accepted: eager, onnxrt, triton"),
    ({"backend": 3}, TypeError, "backend"),
    ({"fullgraph": "yes"}, TypeError, "fullgraph"),
    ({"dynamic": "auto"}, TypeError, "dynamic"),
    ({"options": ["a"]}, TypeError, "options"),
    ({"options": {1: 2}}, TypeError, "options"),
    ({"backend": "eager", "options": {"x": 1}}, ValueError, "accepts no options"),
    ({"mode": "max-autotune"}, ValueError, "mode"),
])
def test_bad_arguments_raise_clear_errors(kwargs, exc, needle):
    with pytest.raises(exc, match=needle):
        framejit.compile(f, **kwargs)


def test_non_callable_model():
    with pytest.raises(TypeError, match="model"):
        framejit.compile(42)


def test_lookup_unknown_backend():
    with pytest.raises(ValueError, match="accepted"):
        framejit.lookup_backend("missing")


# ---- decorator forms and wrappers ------------------------------------------------------------------
def test_bare_decorator_and_decorator_with_arguments():
    @framejit.compile
    def g(x):
        return x.sin() + 1

    backend = CountingBackend()

    @framejit.compile(backend=backend, fullgraph=True)
    def h(x):
        return x.cos() * 2

    x = torch.randn(3)
    assert_same(g(x), x.sin() + 1)
    assert_same(h(x), x.cos() * 2)
    assert backend.graph_count == 1
    assert g.__name__ == "g" and h.__wrapped__.__name__ == "h"


@pytest.fixture
def clean_registry():
    from framejit.backends import registry
    before = dict(registry._REGISTRY)
    yield
    registry._REGISTRY.clear()
    registry._REGISTRY.update(before)


def test_registered_backend_by_name(clean_registry):
    calls = []

    @framejit.register_backend("counting_test_backend")
    def counting_test_backend(gm, example_inputs):
        calls.append(len(example_inputs))
        return gm.forward

    assert "counting_test_backend" in framejit.list_backends()
    assert framejit.lookup_backend("counting_test_backend") is counting_test_backend
    run_differential(f, lambda s: (torch.randn(3), torch.randn(3)), compiled=framejit.compile(f, backend="counting_test_backend"))
    assert calls == [2]


def test_bound_method_and_method_decorator():
    class Scaler:
        def __init__(self, k):
            self.k = k

        def apply(self, x):
            return x * self.k

        @framejit.compile
        def decorated(self, x):
            return x + self.k

    s = Scaler(3.0)
    compiled = framejit.compile(s.apply)
    x = torch.randn(4)
    assert_same(compiled(x), s.apply(x))
    assert_same(s.decorated(x), x + 3.0)
    s.k = 5.0
    assert_same(compiled(x), s.apply(x))  # attribute change is guarded
    assert_same(s.decorated(x), x + 5.0)


def test_compiled_callable_object_and_builtin():
    compiled = framejit.compile(torch.relu)
    x = torch.randn(5)
    assert_same(compiled(x), torch.relu(x))


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.scale = 2.0
        self.register_buffer("offset", torch.ones(4))

    def forward(self, x):
        return torch.relu(self.linear(x)) * self.scale + self.offset


def test_compiled_module_behaves_like_the_module():
    model = Block()
    backend = CountingBackend()
    compiled = framejit.compile(model, backend=backend)
    assert isinstance(compiled, Block) and isinstance(compiled, torch.nn.Module)
    assert compiled._orig_mod is model
    assert compiled.scale == 2.0 and compiled.linear is model.linear
    assert list(compiled.state_dict()) == list(model.state_dict())
    assert [p for p in compiled.parameters()] == [p for p in model.parameters()]
    compiled.eval()
    assert not model.training
    compiled.train()
    assert model.training
    x = torch.randn(3, 4)
    assert_same(compiled(x), model(x))
    compiled.scale = 3.0  # state is shared with the original
    assert model.scale == 3.0
    assert_same(compiled(x), model(x))
    compiled.to(torch.float64)
    assert model.linear.weight.dtype == torch.float64
    assert_same(compiled(x.double()), model(x.double()))
    assert backend.graph_count == 3
    assert "Linear" in repr(compiled)


def test_module_load_state_dict_roundtrip():
    model = Block()
    compiled = framejit.compile(model)
    other = Block()
    compiled.load_state_dict(other.state_dict())
    x = torch.randn(2, 4)
    assert_same(compiled(x), other(x))


def test_module_with_hooks_runs_correctly():
    model = Block()
    seen = []
    model.register_forward_hook(lambda m, i, o: seen.append(o.shape))
    compiled = framejit.compile(model)
    x = torch.randn(2, 4)
    assert_same(compiled(x), model(x))
    assert len(seen) == 2


def test_module_with_backward_hooks_fullgraph_raises_module_hooks():
    model = Block()
    model.register_full_backward_hook(lambda m, grad_in, grad_out: None)  # forward hooks are captured
    compiled = framejit.compile(model, fullgraph=True)
    with pytest.raises(framejit.Unsupported) as info:
        compiled(torch.randn(2, 4))
    assert info.value.kind is BreakKind.MODULE_HOOKS


# ---- fullgraph, user errors and eager fallback -----------------------------------------------------
def prints(x):
    y = x + 1
    print("value", y.shape)
    return y * 2


def test_fullgraph_unsupported_names_user_file_and_line():
    compiled = framejit.compile(prints, fullgraph=True)
    with pytest.raises(framejit.Unsupported) as info:
        compiled(torch.randn(2))
    br = info.value.graph_break
    assert br.kind is BreakKind.UNSUPPORTED_CALL
    assert br.user_stack[-1].filename == __file__
    assert br.user_stack[-1].line.startswith("print(")
    assert "test_api.py" in str(info.value) and isinstance(info.value, framejit.FramejitError)


def test_unsupported_without_fullgraph_runs_eagerly_and_logs(capsys, caplog):
    framejit.set_logs("graph_breaks")
    try:
        with caplog.at_level(logging.INFO, logger="framejit"):
            run_differential(prints, lambda s: (torch.randn(2),), fullgraph=False)
    finally:
        framejit.set_logs("")
    records = [r.getMessage() for r in caplog.records if "graph break" in r.getMessage()]
    assert records and "test_api.py" in records[0] and "print(" in records[0] and "hint" in records[0]


def data_dependent(x):
    if x.sum() > 0:
        return x + 1
    return x - 1


def test_data_dependent_branch_is_correct_both_ways():
    compiled = framejit.compile(data_dependent)
    for x in (torch.ones(3), -torch.ones(3)):
        assert_same(compiled(x), data_dependent(x))
    with pytest.raises(framejit.Unsupported) as info:
        framejit.compile(data_dependent, fullgraph=True)(torch.ones(3))
    assert info.value.kind is BreakKind.DATA_DEPENDENT


def bad_shapes(x, y):
    return x + y


def bad_python(x):
    return x + undefined_name  # noqa: F821


def bad_index(x):
    items = [x]
    return items[3]


@pytest.mark.parametrize("fn,args,exc", [
    (bad_shapes, (torch.randn(2, 3), torch.randn(4)), RuntimeError),
    (bad_python, (torch.randn(2),), NameError),
    (bad_index, (torch.randn(2),), IndexError),
    (lambda x: x.view(7), (torch.randn(6),), RuntimeError),
    (lambda x: x.nope(), (torch.randn(6),), AttributeError),
    (lambda x: 1 / 0 + x, (torch.randn(6),), ZeroDivisionError),
])
@pytest.mark.parametrize("fullgraph", [False, True])
def test_user_errors_raise_the_eager_exception(fn, args, exc, fullgraph):
    compiled = framejit.compile(fn, fullgraph=fullgraph)
    with pytest.raises(exc):
        fn(*args)
    for _ in range(2):
        with pytest.raises(exc):
            compiled(*args)


def test_input_mutation_is_captured_with_the_same_effect():
    def mutate(x):
        x.add_(1)
        return x * 2

    backend = run_differential(mutate, lambda s: (torch.randn(3),), fullgraph=True)
    assert backend.graph_count == 1


def test_input_mutation_with_aliased_inputs_is_not_captured():
    def mutate_two(x, y):
        x.add_(1)
        return x + y

    base = torch.randn(4)
    run_differential(mutate_two, lambda s: (torch.randn(4), torch.randn(4)))
    compiled = framejit.compile(mutate_two, fullgraph=True)
    with pytest.raises(framejit.Unsupported) as info:
        compiled(base[:2], base[1:3])
    assert info.value.kind is BreakKind.SIDE_EFFECT


def test_mutation_through_view_detected():
    def mutate_view(x):
        v = x[0]
        v.mul_(0)
        return x.sum()

    run_differential(mutate_view, lambda s: (torch.randn(2, 3),), fullgraph=False)


def test_item_is_data_dependent():
    with pytest.raises(framejit.Unsupported) as info:
        framejit.compile(lambda x: x.sum().item() + 1, fullgraph=True)(torch.randn(3))
    assert info.value.kind is BreakKind.DATA_DEPENDENT


def test_disable_and_reset_and_env_disable(monkeypatch):
    @framejit.disable
    def helper(x):
        return x * 3

    def uses_helper(x):
        return helper(x) + 1

    run_differential(uses_helper, lambda s: (torch.randn(2),), fullgraph=False)
    with pytest.raises(framejit.Unsupported):
        framejit.compile(uses_helper, fullgraph=True)(torch.randn(2))
    backend = CountingBackend()
    compiled = framejit.compile(f, backend=backend)
    compiled(torch.randn(2), torch.randn(2))
    framejit.reset()
    compiled(torch.randn(2), torch.randn(2))
    assert backend.graph_count == 2
    monkeypatch.setattr(framejit.config, "disable", True)
    compiled(torch.randn(2), torch.randn(2))
    assert backend.graph_count == 2


def test_backend_failure_raises_naming_the_backend():
    """Issue 12: a backend that raises is the user's configuration problem, not a silent eager run
    (NOTE [Backend failures raise] in capture/backend_call.py; more cases in tests/test_errors.py)."""
    def broken(gm, example_inputs):
        raise RuntimeError("backend exploded")

    compiled = framejit.compile(f, backend=broken)
    with pytest.raises(framejit.BackendCompilerFailed, match="broken.*backend exploded"):
        compiled(torch.randn(3), torch.randn(3))


def test_stats_count_traces():
    before = framejit.stats()["frames_traced"]
    framejit.compile(lambda x: x - 1)(torch.randn(2))
    assert framejit.stats()["frames_traced"] == before + 1


def test_set_logs_rejects_unknown_names():
    with pytest.raises(ValueError, match="accepted"):
        framejit.set_logs("graph_brakes")


# ---- opcode coverage -------------------------------------------------------------------------------
def test_every_opcode_is_handled_normalized_or_declared_unsupported():
    missing = []
    for name in dis.opmap:
        if name.startswith("INSTRUMENTED_") or name in DROPPED or name in RENAMED:
            continue
        if name in HANDLERS or name in UNSUPPORTED_OPCODES:
            continue
        if name in REWRITTEN:
            continue  # rewritten by normalize.py into handled instructions
        if _is_specialized(name):
            continue
        missing.append(name)
    assert missing == []


def _is_specialized(name: str) -> bool:
    # Adaptive specializations (BINARY_OP_ADD_INT, LOAD_ATTR_SLOT, ...) never appear in code objects.
    return name not in dis.opname or dis.opmap[name] in getattr(dis, "_specialized_instructions", ()) or \
        name in getattr(dis, "_specializations", {}).get(name.split("_")[0], ())


def test_internal_error_falls_back_to_eager_and_logs(monkeypatch, caplog):
    from framejit.capture import handlers

    def broken(tx, inst):
        raise KeyError("a framejit bug")

    monkeypatch.setitem(handlers.HANDLERS, "BINARY_OP", broken)
    framejit.set_logs("eager_fallback")
    try:
        with caplog.at_level(logging.INFO, logger="framejit"):
            run_differential(f, lambda s: (torch.randn(3), torch.randn(3)), fullgraph=False)
    finally:
        framejit.set_logs("")
    assert any("internal error" in r.getMessage() for r in caplog.records)
    with pytest.raises(framejit.Unsupported) as info:
        framejit.compile(f, fullgraph=True)(torch.randn(3), torch.randn(3))
    assert info.value.kind is BreakKind.INTERNAL_ERROR


def _call_it(f, x):
    return f(x) + 1


def _prints(x):
    print("between")
    return x


def test_explain_reports_only_its_own_call_after_an_earlier_explain_of_the_same_code(capsys, monkeypatch, tmp_path):
    # found by h11func: the second report listed the first one's print() break (the entry the first
    # explain persisted was installed beside the new one although its guard did not accept the call)
    import framejit
    monkeypatch.setattr(framejit.config, "cache_enabled", True)  # as users run it (tests turn it off)
    monkeypatch.setattr(framejit.config, "cache_dir", str(tmp_path))
    framejit.reset()
    first = framejit.explain(_call_it)(_prints, torch.ones(2))
    framejit.reset()
    second = framejit.explain(_call_it)(torch.sin, torch.ones(2))
    assert first.graph_break_count == 1
    assert second.graph_break_count == 0 and second.break_reasons == []
    assert second.graph_count == 1
