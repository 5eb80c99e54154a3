"""Compiled optimizer steps (issue 14): `framejit.compile(opt.step)` over torch.optim's own code.

How a step becomes graphs: torch.optim is inlined like nn.Module code (NOTE [Compiled optimizer steps]
in values/builder.py), not called as one opaque graph op. The pieces that make a step one graph:
`p.grad` of a parameter read from `param_groups` is a graph input (NOTE [Gradients of inputs] in
attributes.py); `cast(list[Tensor], x)` folds (`list[Tensor]` is a constant); the `scalars` tensor of `_foreach_addcdiv_` gets its fake metadata from numbers (NOTE [Scalar
arguments given as tensors]); `torch._dynamo.graph_break()` in `_use_grad_for_differentiable` breaks, so
the update itself lands in the resume function of `_use_grad`, under no_grad, as one graph for all
parameter groups. The first step creates the state lazily (graph 1); on the second the state exists and
the scheduler has changed `lr`, which becomes a graph input (NOTE [Dynamic floats]) in graph 2, which
every later step reuses. The lowering backends expand the `_foreach_*` calls per element first
(NOTE [Foreach expansion] in backends/foreach.py).

Each test runs the same optimizer eagerly and compiled from the same parameters and gradients and compares
parameters and state after every step. SGD matches exactly. Adam and AdamW match to 1e-5: while compiling,
torch.optim's `_get_value(step)` keeps the step a float32 tensor (as under torch.compile), so the bias
corrections are float32 tensor math where eager computes them as Python doubles.
"""
from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # the triton backend's kernels run on CPU tensors

import pytest
import torch

import framejit
from framejit.capture import eager_frames
from tests.helpers import CountingBackend, RecordingBackend, optimizers_as_shipped, run_program

OPTIMIZERS = {
    "sgd_momentum": lambda ps, fe: torch.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.01, foreach=fe),
    "sgd_nesterov": lambda ps, fe: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, foreach=fe),
    "adam": lambda ps, fe: torch.optim.Adam(ps, lr=0.01, foreach=fe),
    "adamw": lambda ps, fe: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.1, foreach=fe),
    "adam_amsgrad_maximize": lambda ps, fe: torch.optim.Adam(ps, lr=0.01, amsgrad=True, maximize=True,
                                                             weight_decay=0.1, foreach=fe),
    "sgd_dampening_maximize": lambda ps, fe: torch.optim.SGD(ps, lr=0.1, momentum=0.5, dampening=0.3,
                                                             maximize=True, foreach=fe),
}
TOLERANCE = {"sgd_momentum": 0.0, "sgd_nesterov": 0.0, "adam": 1e-5, "adamw": 1e-5, "adam_amsgrad_maximize": 1e-5,
             "sgd_dampening_maximize": 0.0}


@pytest.fixture(autouse=True)
def optimizers_as_torch_ships_them():
    with optimizers_as_shipped():  # see its docstring
        yield


def make_params(seed: int, shapes=((4, 3), (3,), (2, 5))) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=g).requires_grad_() for s in shapes]


def clone_params(params):
    return [p.detach().clone().requires_grad_() for p in params]


def assert_close(actual, expected, tol: float) -> None:
    torch.testing.assert_close(actual, expected, rtol=tol, atol=tol)


def assert_same_state(compiled_opt, eager_opt, compiled_params, eager_params, tol: float) -> None:
    for pc, pe in zip(compiled_params, eager_params):
        assert_close(pc, pe, tol)
        sc, se = compiled_opt.state[pc], eager_opt.state[pe]
        assert sorted(sc) == sorted(se)
        for key in se:
            if isinstance(se[key], torch.Tensor):
                assert sc[key].shape == se[key].shape and sc[key].dtype == se[key].dtype, key
                assert_close(sc[key], se[key], tol)
            else:
                assert sc[key] == se[key], key
    for gc, ge in zip(compiled_opt.param_groups, eager_opt.param_groups):
        assert gc["lr"] == ge["lr"]


def set_grads(step: int, *param_lists) -> None:
    g = torch.Generator().manual_seed(100 + step)
    grads = [torch.randn(p.shape, generator=g) for p in param_lists[0]]
    for params in param_lists:
        for p, grad in zip(params, grads):
            p.grad = grad.clone()


def run_steps(name: str, foreach: bool, backend, steps: int = 5, groups: int = 1, schedule: str = "lambda",
              tol: float | None = None):
    """`steps` optimizer steps eagerly and through `framejit.compile(opt.step)`, lr changed after each
    (by LambdaLR, or by writing param_group['lr']); compares after every step. Returns the graph count
    after each step."""
    params = make_params(len(name) + foreach)
    eager_params, compiled_params = clone_params(params), clone_params(params)

    def param_groups(ps):
        return [{"params": ps[i::groups]} for i in range(groups)] if groups > 1 else ps
    eager_opt = OPTIMIZERS[name](param_groups(eager_params), foreach)
    compiled_opt = OPTIMIZERS[name](param_groups(compiled_params), foreach)
    schedulers = [torch.optim.lr_scheduler.LambdaLR(o, lambda i: 0.7 ** i) for o in (eager_opt, compiled_opt)] \
        if schedule == "lambda" else []
    step = framejit.compile(compiled_opt.step, backend=backend)
    counts = []
    for i in range(steps):
        set_grads(i, eager_params, compiled_params)
        assert step() == eager_opt.step()  # None from both
        for s in schedulers:
            s.step()
        if schedule == "manual":
            for o in (eager_opt, compiled_opt):
                for group in o.param_groups:
                    group["lr"] = 0.05 / (i + 2)
        assert_same_state(compiled_opt, eager_opt, compiled_params, eager_params,
                          TOLERANCE[name] if tol is None else tol)
        counts.append(backend.graph_count)
    return counts


@pytest.mark.parametrize("foreach", [False, True], ids=["single_tensor", "foreach"])
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_step_matches_eager(name, foreach):
    before = eager_frames.count()
    backend = CountingBackend()
    counts = run_steps(name, foreach, backend)
    # step 1 creates the state (graph 1); step 2 finds it and a changed lr, now a graph input (graph 2);
    # the scheduler changes lr on every later step without a recompile
    assert counts == [1, 2, 2, 2, 2]
    assert eager_frames.count() == before
    update = backend.graphs[-1]
    lr_inputs = [n for n in update.graph.nodes if n.op == "placeholder" and n.meta.get("dynamic_float")]
    assert len(lr_inputs) == 1


@pytest.mark.parametrize("name", ["adamw", "sgd_momentum"])
def test_two_param_groups_one_graph(name):
    backend = CountingBackend()
    counts = run_steps(name, True, backend, groups=2, schedule="manual")
    assert counts == [1, 2, 2, 2, 2]  # both groups in one graph; both lrs become inputs together
    lr_inputs = [n for n in backend.graphs[-1].graph.nodes if n.op == "placeholder" and n.meta.get("dynamic_float")]
    assert len(lr_inputs) == 2


def test_state_is_updated_in_place():
    """The state tensors the optimizer holds are the ones the graph writes (not replaced by copies)."""
    params = make_params(3)
    opt = torch.optim.Adam(params, lr=0.01, foreach=True)
    step = framejit.compile(opt.step, backend=CountingBackend())
    set_grads(0, params)
    step()
    held = {id(p): (opt.state[p]["exp_avg"], opt.state[p]["step"]) for p in params}
    before = [(a.clone(), s.clone()) for a, s in held.values()]
    set_grads(1, params)
    step()
    for p, (old_avg, old_step) in zip(params, before):
        assert opt.state[p]["exp_avg"] is held[id(p)][0] and opt.state[p]["step"] is held[id(p)][1]
        assert not torch.equal(opt.state[p]["exp_avg"], old_avg)
        assert opt.state[p]["step"].item() == old_step.item() + 1 == 2.0


def test_function_calling_step():
    """A compiled function that calls opt.step() (the step's graph comes from the step's own frames)."""
    params = make_params(5)
    eager_params, compiled_params = clone_params(params), clone_params(params)
    eager_opt = torch.optim.AdamW(eager_params, lr=0.02, foreach=True)
    compiled_opt = torch.optim.AdamW(compiled_params, lr=0.02, foreach=True)

    def update(opt, scale):
        for group in opt.param_groups:
            group["lr"] = 0.02 * scale
        opt.step()
        return scale * 2

    backend = CountingBackend()
    compiled = framejit.compile(update, backend=backend)
    for i in range(4):
        set_grads(i, eager_params, compiled_params)
        assert compiled(compiled_opt, 1.0 / (i + 1)) == update(eager_opt, 1.0 / (i + 1))
        assert_same_state(compiled_opt, eager_opt, compiled_params, eager_params, 1e-5)
    assert backend.graph_count == 2


def test_no_grad_param_skipped_and_appearing():
    """A parameter without a grad is skipped; when it gets one later the step recompiles (guarded)."""
    params = make_params(7)
    eager_params, compiled_params = clone_params(params), clone_params(params)
    eager_opt = torch.optim.SGD(eager_params, lr=0.1, momentum=0.9, foreach=True)
    compiled_opt = torch.optim.SGD(compiled_params, lr=0.1, momentum=0.9, foreach=True)
    step = framejit.compile(compiled_opt.step, backend=CountingBackend())
    for i in range(4):
        set_grads(i, eager_params, compiled_params)
        if i < 2:
            eager_params[1].grad = compiled_params[1].grad = None
        step()
        eager_opt.step()
        assert_same_state(compiled_opt, eager_opt, compiled_params, eager_params, 0.0)


def test_function_get_binds_a_method():
    """`func.__get__(obj, cls)` (the scheduler's step wrapper does this) is a bound method; with obj None
    it is the function itself; (None, None) raises TypeError as in eager."""
    class Scaled:
        def __init__(self, k):
            self.k = k

        def apply(self, x):
            return x * self.k

    obj = Scaled(3.0)

    def f(x):
        return Scaled.apply.__get__(obj, Scaled)(x) + Scaled.apply.__get__(None, Scaled)(obj, x)

    def bad(x):
        return Scaled.apply.__get__(None, None)

    backend = CountingBackend()
    compiled = framejit.compile(f, backend=backend, fullgraph=True)
    for k in (3.0, 5.0):
        obj.k = k
        x = torch.randn(4)
        torch.testing.assert_close(compiled(x), f(x))
    assert backend.graph_count == 2  # obj.k is a float that changed: one recompile, then an input
    with pytest.raises(TypeError):
        bad(1)
    with pytest.raises(TypeError):
        framejit.compile(bad, backend=CountingBackend())(torch.randn(2))


@pytest.mark.parametrize("foreach", [False, True], ids=["single_tensor", "foreach"])
def test_sgd_step_on_onnxrt(foreach):
    """SGD's update graphs run as ORT programs, all but the in-place write-backs (`copy_`) in ORT; the
    foreach ops are expanded per element first (NOTE [Foreach expansion]). Constant lr: onnxrt runs a
    graph with a changing float input eagerly. Within 1e-6 of eager."""
    backend = RecordingBackend("onnxrt")
    assert run_steps("sgd_momentum", foreach, backend, schedule="none", tol=1e-6) == [1, 2, 2, 2, 2]
    for compiled in backend.compiled:
        (row,) = compiled.summary()
        assert not row["eager_graph"] and row["ort_nodes"] > 0
        assert {reason.split()[0] for reason in row["eager_nodes"].values()} <= {"aten::copy_"}


@pytest.mark.parametrize("foreach", [False, True], ids=["single_tensor", "foreach"])
def test_sgd_step_on_triton(foreach):
    """SGD with momentum on the triton backend: each parameter's update (momentum buffer and parameter)
    fuses into one kernel, 3 kernels for 3 parameters, on both paths (foreach calls expanded per element
    first, NOTE [Foreach expansion]); externs are the in-place write-backs. Within 1e-6 of eager."""
    from framejit.backends.triton.runtime import CompiledGraph
    backend = RecordingBackend("triton")
    assert run_steps("sgd_momentum", foreach, backend, schedule="none", tol=1e-6) == [1, 2, 2, 2, 2]
    first, update = backend.compiled
    assert isinstance(first, CompiledGraph) and isinstance(update, CompiledGraph)
    assert update.kernel_count == 3


def test_adamw_foreach_step_on_triton():
    """Foreach AdamW's update graph is lowered to Triton kernels (measured: 15 for 3 parameters, 5 per
    parameter), not run in eager torch. Within 1e-5 of eager."""
    from framejit.backends.triton.runtime import CompiledGraph
    backend = RecordingBackend("triton")
    assert run_steps("adamw", True, backend, schedule="none") == [1, 2, 2, 2, 2]
    for compiled in backend.compiled:
        assert isinstance(compiled, CompiledGraph) and compiled.kernel_count > 0
    assert backend.compiled[-1].kernel_count <= 15


def test_foreach_expansion_keeps_whole_uses():
    """A foreach result used as a whole list (returned) is not expanded; one read by index is."""
    from framejit.backends.foreach import expand_foreach

    def f(x0, x1, y0, y1):  # literal lists of nodes, as in framejit's graphs
        out = torch._foreach_mul([x0, x1], 2.0)
        torch._foreach_add_([y0, y1], out, alpha=0.5)
        return out[0] + 1, torch._foreach_sqrt([y0, y1])

    gm = torch.fx.symbolic_trace(f)
    for node in gm.graph.nodes:  # list metadata as framejit's graphs carry it
        node.meta["val"] = [] if node.op == "call_function" and "foreach" in str(node.target) else None
    expanded = expand_foreach(gm)
    targets = [n.target for n in expanded.graph.nodes if n.op in ("call_function", "call_method")]
    assert torch._foreach_mul not in targets and torch._foreach_add_ not in targets
    assert torch._foreach_sqrt in targets  # returned whole
    xs, ys = [torch.rand(3), torch.rand(2, 2)], [torch.rand(3), torch.rand(2, 2)]
    ys_eager = [y.clone() for y in ys]
    expected = f(*xs, *ys_eager)
    actual = expanded(*xs, *ys)
    torch.testing.assert_close(actual, expected)
    torch.testing.assert_close(ys, ys_eager)


def _train_step(model, opt):
    def step(x, y):
        loss = ((model(x) - y) ** 2).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss
    return step


def _model_and_opt(foreach: bool):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    return model, torch.optim.AdamW(model.parameters(), lr=0.01, foreach=foreach)


@pytest.mark.parametrize("foreach", [False, True], ids=["single_tensor", "foreach"])
def test_train_step_with_backward_inside(foreach):
    """`loss.backward()` inside a compiled function is a graph break: the forward graph is compiled,
    backward runs eagerly, the rest (the optimizer step, zero_grad) resumes. 3 steps match eager."""
    eager_model, eager_opt = _model_and_opt(foreach)
    compiled_model, compiled_opt = _model_and_opt(foreach)
    eager_step = _train_step(eager_model, eager_opt)
    backend = CountingBackend()
    before = eager_frames.count()
    compiled_step = framejit.compile(_train_step(compiled_model, compiled_opt), backend=backend)
    counts = []
    for i in range(3):
        g = torch.Generator().manual_seed(i)
        x, y = torch.randn(5, 4, generator=g), torch.randn(5, 2, generator=g)
        expected, actual = eager_step(x, y), compiled_step(x, y)
        torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)
        assert actual.requires_grad and actual.grad_fn is not None
        for pc, pe in zip(compiled_model.parameters(), eager_model.parameters()):
            torch.testing.assert_close(pc, pe, rtol=1e-5, atol=1e-5)
            assert pc.grad is None and pe.grad is None
        counts.append(backend.graph_count)
    # the forward graph, then the optimizer update's two graphs (state created, then state present);
    # zero_grad (stores to p.grad) and backward run in Python
    assert counts == [2, 3, 3]
    assert eager_frames.count() == before


def test_train_step_explained():
    """explain() of one train step: the forward graph and the update graph, the break at backward()."""
    from framejit.capture.breaks import BreakKind
    model, opt = _model_and_opt(True)
    before = eager_frames.count()
    report = framejit.explain(_train_step(model, opt))(torch.randn(5, 4), torch.randn(5, 2))
    backward = [b for b in report.break_reasons if "backward" in b.explanation]
    assert len(backward) == 1 and backward[0].kind is BreakKind.UNSUPPORTED_CALL
    assert report.graph_count == 2
    assert report.eager_frames == [] and eager_frames.count() == before


_REFERENCE = """
import json, sys, torch
from tests.capture.test_compiled_optimizers import OPTIMIZERS, make_params, set_grads
from tests.helpers import CountingBackend
name, foreach = sys.argv[1], sys.argv[2] == "1"
params = make_params(11)
opt = OPTIMIZERS[name](params, foreach)
scheduler = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: 0.7 ** i)
reference = CountingBackend()
step = torch.compile(opt.step, backend=reference)
counts = []
for i in range(5):
    set_grads(i, params)
    step()
    scheduler.step()
    counts.append(reference.graph_count)
print(json.dumps(counts))
"""


@pytest.mark.parametrize("name,foreach", [("adam", True), ("sgd_momentum", False)])
def test_graph_count_against_torch_compile(name, foreach, tmp_path):
    """Reference only: stock torch.compile's graphs for the same 5 scheduled steps, counted with the same
    kind of backend, in another process (it marks the optimizer class's `_init_group` with
    torch.compiler.disable for the rest of the process; a forked child of the program server, NOTE
    [Programs in forked children]). framejit compiles no more graphs than it (measured: both
    [1, 2, 2, 2, 2])."""
    import json
    script = tmp_path / "reference.py"
    script.write_text(_REFERENCE)
    rc, out, err = run_program(tmp_path, script, name, "1" if foreach else "0")
    assert rc == 0, err[-2000:]
    reference_counts = json.loads(out.strip().splitlines()[-1])
    counts = run_steps(name, foreach, CountingBackend())
    assert counts[-1] <= reference_counts[-1]
    assert counts[2:] == [counts[1]] * 3 and reference_counts[2:] == [reference_counts[1]] * 3


def test_torch_disabled_function_runs_once_per_call():
    """A torch function wrapped by torch's lazy `_disable_dynamo` (as Optimizer.zero_grad is) is a break
    and runs as plain Python on every call: never at trace time, never as a graph op."""
    seen = []

    def record(x):
        seen.append(tuple(x.shape))
        return x * 2
    record.__module__ = "torch.h4_probe"  # looks like torch's own code, as zero_grad does
    marked = torch._disable_dynamo(record)

    def f(x):
        return marked(x + 1) - 1

    backend = CountingBackend()
    compiled = framejit.compile(f, backend=backend)
    for n in (3, 3, 4):
        x = torch.randn(n)
        expected_seen = len(seen)
        expected = f(x)
        assert len(seen) == expected_seen + 1
        torch.testing.assert_close(compiled(x), expected)
        assert len(seen) == expected_seen + 2 and seen[-1] == (n,)
    report = framejit.explain(f)(torch.randn(2))
    assert [b.kind.name for b in report.break_reasons] == ["UNSUPPORTED_CALL"]
    assert "torch.compiler.disable" in report.break_reasons[0].explanation


def test_graph_input_names_do_not_depend_on_values():
    """The state is keyed by parameter tensors; graph inputs named after `state[p]` use the key's source
    (NOTE [Keys by their source]), not its printed values, so the same step on other values makes the same
    graph code (cache keys)."""
    codes = []
    for seed in (1, 2):
        params = make_params(seed)
        opt = torch.optim.Adam(params, lr=0.01, foreach=True)
        backend = CountingBackend()
        step = framejit.compile(opt.step, backend=backend)
        for i in range(2):
            set_grads(i + seed, params)
            step()
        codes.append(backend.graphs[-1].code)
        framejit.reset()
    assert codes[0] == codes[1]
    # the update is traced from Adam.step, through self.state[p]
    assert "state_l_args_0_param_groups_0_params_0_exp_avg" in codes[0]
