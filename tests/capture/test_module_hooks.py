"""Module hooks and lazy modules (NOTE [Module hooks] in capture/module_hooks.py).

Forward and forward-pre hooks (per-module and global, with kwargs, prepend, always_call, hooks that are
closures, bound methods, partials or callable objects) are inlined into the graph: each model runs eagerly
and compiled (fullgraph=True where nothing breaks) on fresh inputs and the graph count is asserted. Adding
or removing a hook between calls recompiles; backward hooks break cleanly around the module call; lazy
modules run their initialising first call as they are and are captured afterwards. A cross-process test
checks that a global hook registered in a new process is not skipped by a warm frame cache.
"""
from __future__ import annotations

import functools
import textwrap

import pytest
import torch
import torch.nn as nn
import torch.nn.utils.prune as prune
from torch.nn.modules import module as torch_module

import framejit
from framejit.capture.breaks import BreakKind
from tests.helpers import CountingBackend, assert_same, run_cache_program, run_differential


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = nn.Linear(4, 4)
        self.outer = nn.Linear(4, 3)

    def forward(self, x):
        return self.outer(torch.relu(self.inner(x)) * 2)


class KwNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = KwLinear()

    def forward(self, x):
        return self.inner(x, scale=3.0) + 1


class KwLinear(nn.Linear):
    def __init__(self):
        super().__init__(4, 4)

    def forward(self, x, scale=1.0):
        return super().forward(x) * scale


class OnnxCounting(CountingBackend):
    """Counts graphs and runs them with the onnxrt backend."""

    def __call__(self, gm, example_inputs):
        super().__call__(gm, example_inputs)
        return framejit.lookup_backend("onnxrt")(gm, example_inputs)


def make_x(seed):
    return (torch.randn(2, 4),)


def net_with(setup) -> Net:
    torch.manual_seed(0)
    net = Net()
    setup(net)
    return net


@pytest.fixture
def global_hooks():
    """Register global module hooks for one test; they are removed afterwards whatever happens."""
    handles = []
    yield handles
    for handle in handles:
        handle.remove()
        torch_module._global_forward_hooks_with_kwargs.pop(handle.id, None)  # torch's handle leaves it behind


# ---- per-module forward and forward-pre hooks: one graph --------------------------------------------
def _replace_output(net):
    net.inner.register_forward_hook(lambda m, args, out: out * 10 - args[0])


def _pre_returns_tensor(net):
    net.inner.register_forward_pre_hook(lambda m, args: args[0] + 1)  # not a tuple: wrapped as (x,)


def _pre_returns_tuple(net):
    net.outer.register_forward_pre_hook(lambda m, args: (args[0].flip(-1),))


def _hooks_return_none(net):
    net.inner.register_forward_pre_hook(lambda m, args: None)
    net.outer.register_forward_hook(lambda m, args, out: None)


def _prepend_orders_hooks(net):
    net.inner.register_forward_hook(lambda m, args, out: out + 1)
    net.inner.register_forward_hook(lambda m, args, out: out * 5, prepend=True)  # runs first
    net.inner.register_forward_pre_hook(lambda m, args: (args[0] - 2,))
    net.inner.register_forward_pre_hook(lambda m, args: (args[0] * 3,), prepend=True)


def _closure_hook(net):
    scale = torch.tensor(0.5)

    def hook(m, args, out):
        return out * scale + m.bias
    net.outer.register_forward_hook(hook)


class Recorder:
    def __init__(self, offset):
        self.offset = offset

    def shift(self, m, args, out):
        return out + self.offset

    def __call__(self, m, args):
        return (args[0] * self.offset,)


def _bound_method_hook(net):
    net.inner.register_forward_hook(Recorder(3.0).shift)


def _callable_object_hook(net):
    net.inner.register_forward_pre_hook(Recorder(2.0))


def _scaled(factor, m, args, out):
    return out * factor


def _partial_hook(net):
    net.outer.register_forward_hook(functools.partial(_scaled, 4.0))


def _always_call_hook(net):
    net.inner.register_forward_hook(lambda m, args, out: out.tanh(), always_call=True)


def _root_hooks(net):
    net.register_forward_pre_hook(lambda m, args: (args[0] * 2,))
    net.register_forward_hook(lambda m, args, out: out.sum(-1))


HOOKED = [_replace_output, _pre_returns_tensor, _pre_returns_tuple, _hooks_return_none, _prepend_orders_hooks,
          _closure_hook, _bound_method_hook, _callable_object_hook, _partial_hook, _always_call_hook, _root_hooks]


@pytest.mark.parametrize("setup", HOOKED, ids=lambda f: f.__name__.strip("_"))
def test_forward_hooks_are_one_graph(setup):
    net = net_with(setup)
    backend = run_differential(net, make_x, seeds=(0, 1, 2))
    assert backend.graph_count == 1


def test_hook_on_a_submodule_inside_a_function():
    net = net_with(_replace_output)

    def f(x):
        return net(x).sum(0) + x.mean()
    backend = run_differential(f, make_x, seeds=(0, 1, 2))
    assert backend.graph_count == 1


def test_hooks_with_kwargs():
    torch.manual_seed(0)
    net = KwNet()

    def pre(m, args, kwargs):
        return (args[0] + 1,), {**kwargs, "scale": kwargs["scale"] * 2}

    def post(m, args, kwargs, out):
        return out - kwargs["scale"] + args[0].sum()
    net.inner.register_forward_pre_hook(pre, with_kwargs=True)
    net.inner.register_forward_hook(post, with_kwargs=True)
    net.inner.register_forward_hook(lambda m, args, out: out * 2)
    backend = run_differential(net, make_x, seeds=(0, 1, 2))
    assert backend.graph_count == 1


def test_pre_hook_with_kwargs_returning_a_bad_value_raises_as_eager():
    torch.manual_seed(0)
    net = KwNet()
    net.inner.register_forward_pre_hook(lambda m, args, kwargs: args, with_kwargs=True)  # a 1-tuple
    run_differential(net, make_x, fullgraph=False)


def test_hooks_append_to_a_list():
    log = []
    net = net_with(lambda n: (n.inner.register_forward_pre_hook(lambda m, args: log.append(args[0] * 1)),
                              n.outer.register_forward_hook(lambda m, args, out: log.append(out.sum()))))
    compiled = framejit.compile(net, backend=(backend := CountingBackend()), fullgraph=True)
    for seed in range(3):
        x = torch.randn(2, 4)
        log.clear()
        expected = net(x)
        expected_log = list(log)
        log.clear()
        assert_same(compiled(x), expected)
        assert len(log) == 2
        assert_same(log, expected_log)
    assert backend.graph_count == 1


def test_hook_that_breaks_captures_around_it(capsys):
    def loud(m, args, out):
        print("inner output", tuple(out.shape))
        return out + 1
    net = net_with(lambda n: n.inner.register_forward_hook(loud))
    backend = run_differential(net, make_x, fullgraph=False, seeds=(0, 1, 2))
    # inner's linear, the hook's `out + 1` after its print (the hook, a nested function without free
    # variables, is called through its frame hook at the break), then the rest: the print is the only break
    assert backend.graph_count == 3
    explained = framejit.explain(net)(torch.randn(2, 4))
    assert explained.graph_break_count == 1


# ---- adding and removing hooks recompiles ---------------------------------------------------------------
def test_hook_added_and_removed_between_calls_recompiles():
    torch.manual_seed(0)
    net = Net()
    backend = CountingBackend()
    compiled = framejit.compile(net, backend=backend, fullgraph=True)
    x = torch.randn(2, 4)
    assert_same(compiled(x), net(x))
    handle = net.inner.register_forward_hook(lambda m, args, out: out * -3)
    assert_same(compiled(x), net(x))
    assert backend.graph_count == 2
    pre = net.outer.register_forward_pre_hook(lambda m, args: (args[0] + 7,))
    assert_same(compiled(x), net(x))
    assert backend.graph_count == 3
    handle.remove()
    pre.remove()
    assert_same(compiled(x), net(x))
    assert backend.graph_count == 3  # the first entry's guards hold again
    other = net.inner.register_forward_hook(lambda m, args, out: out + 100)  # a new hook, same place
    assert_same(compiled(x), net(x))
    assert backend.graph_count == 4
    other.remove()


def test_hook_kind_changed_recompiles():
    torch.manual_seed(0)
    net = KwNet()
    compiled = framejit.compile(net, backend=(backend := CountingBackend()), fullgraph=True)
    x = torch.randn(2, 4)

    def hook(m, *rest):
        return rest[-1] * 2
    handle = net.inner.register_forward_hook(hook)
    assert_same(compiled(x), net(x))
    handle.remove()
    net.inner.register_forward_hook(hook, with_kwargs=True)  # the same function, called with kwargs now
    assert_same(compiled(x), net(x))
    assert backend.graph_count == 2


# ---- global hooks ---------------------------------------------------------------------------------------
def test_global_hooks_are_inlined(global_hooks):
    def post(m, args, out):
        return out * 2 if isinstance(m, nn.Linear) else out

    def pre(m, args):
        return (args[0] + 1,) if isinstance(m, nn.Linear) else None
    global_hooks.append(torch_module.register_module_forward_hook(post))
    global_hooks.append(torch_module.register_module_forward_pre_hook(pre))
    global_hooks.append(torch_module.register_module_forward_hook(
        lambda m, args, kwargs, out: out - 1, with_kwargs=True, always_call=True))
    net = net_with(lambda n: n.inner.register_forward_hook(lambda m, args, out: out / 2))
    backend = run_differential(net, make_x, seeds=(0, 1, 2))
    assert backend.graph_count == 1


def test_global_hook_registered_after_the_first_call_recompiles(global_hooks):
    """Issue 12: a global hook registered after the first call was silently ignored."""
    net = net_with(lambda n: None)
    compiled = framejit.compile(net, backend=(backend := CountingBackend()), fullgraph=True)
    x = torch.randn(2, 4)
    assert_same(compiled(x), net(x))
    global_hooks.append(torch_module.register_module_forward_hook(lambda m, args, out: out + 5))
    expected = net(x)
    assert_same(compiled(x), expected)
    assert backend.graph_count == 2
    global_hooks.pop().remove()
    assert_same(compiled(x), net(x))
    global_hooks.append(torch_module.register_module_forward_pre_hook(lambda m, args: (args[0] * 0,)))
    assert_same(compiled(x), net(x))
    assert backend.graph_count == 3


def test_global_hook_reaches_a_module_called_by_a_function(global_hooks):
    net = net_with(lambda n: None)

    def f(x):
        return net.inner(x).relu()
    compiled = framejit.compile(f, backend=(backend := CountingBackend()), fullgraph=True)
    x = torch.randn(2, 4)
    assert_same(compiled(x), f(x))
    global_hooks.append(torch_module.register_module_forward_hook(lambda m, args, out: -out))
    assert_same(compiled(x), f(x))
    assert backend.graph_count == 2


def test_global_hook_does_not_recompile_functions_without_modules(global_hooks):
    def f(x):
        return x.sin() + 1
    compiled = framejit.compile(f, backend=(backend := CountingBackend()), fullgraph=True)
    x = torch.randn(3)
    compiled(x)
    global_hooks.append(torch_module.register_module_forward_hook(lambda m, args, out: out))
    assert_same(compiled(x), f(x))
    assert backend.graph_count == 1


# ---- always_call on an error, backward hooks -------------------------------------------------------------
def test_always_call_hook_runs_when_forward_raises():
    calls = []
    net = net_with(lambda n: n.inner.register_forward_hook(lambda m, args, out: calls.append("always"),
                                                           always_call=True))
    compiled = framejit.compile(net, backend="eager")
    bad = torch.randn(2, 5)  # inner is Linear(4, 4): a shape error
    with pytest.raises(RuntimeError):
        net(bad)
    assert calls == ["always"]
    calls.clear()
    with pytest.raises(RuntimeError):
        compiled(bad)
    assert calls == ["always"]


class BackwardNet(Net):
    def forward(self, x):
        return self.outer(torch.relu(self.inner(x * 2 + 1)) * 2).sum()


BACKWARD_KINDS = {
    "full": lambda m, log: m.register_full_backward_hook(lambda mod, gin, gout: log.append(gout[0].clone())),
    "pre": lambda m, log: m.register_full_backward_pre_hook(lambda mod, gout: log.append(gout[0].clone())),
    "legacy": lambda m, log: m.register_backward_hook(lambda mod, gin, gout: log.append(gout[0].clone())),
}


@pytest.mark.parametrize("kind", BACKWARD_KINDS)
@pytest.mark.filterwarnings("ignore::FutureWarning")  # register_backward_hook is deprecated
def test_backward_hook_breaks_cleanly_around_the_module(kind):
    """The module call is a break: torch's BackwardHook wraps its inputs and outputs as they are, while the
    code before it, its forward (with a forward hook) and the code after it are captured."""
    grads = {"eager": [], "compiled": []}
    results = []
    for mode in ("eager", "compiled"):
        torch.manual_seed(0)
        net = BackwardNet()
        BACKWARD_KINDS[kind](net.inner, grads[mode])
        net.inner.register_forward_hook(lambda m, args, out: out * 3)
        backend = CountingBackend()
        fn = framejit.compile(net, backend=backend) if mode == "compiled" else net
        for seed in range(3):
            torch.manual_seed(seed)
            x = torch.randn(2, 4, requires_grad=True)
            out = fn(x)
            out.backward()
            results.append((mode, out.detach(), x.grad.clone(), net.inner.weight.grad.clone()))
            net.zero_grad()
    eager, compiled = results[:3], results[3:]
    for (_, *e), (_, *c) in zip(eager, compiled):
        assert_same(c, e)
    assert len(grads["compiled"]) == 3
    assert_same(grads["compiled"], grads["eager"])
    assert backend.graph_count == 3  # x * 2 + 1; inner's forward and forward hook; the rest


def test_global_backward_hooks_break_around_every_module(global_hooks):
    seen = {"eager": [], "compiled": []}
    mode = ["eager"]
    global_hooks.append(torch_module.register_module_full_backward_hook(
        lambda m, gin, gout: seen[mode[0]].append((type(m).__name__, gout[0].clone()))))
    global_hooks.append(torch_module.register_module_full_backward_pre_hook(
        lambda m, gout: seen[mode[0]].append(("pre", gout[0].clone()))))
    torch.manual_seed(0)
    net = BackwardNet()
    compiled = framejit.compile(net, backend=(backend := CountingBackend()))
    for seed in range(3):
        x = torch.randn(2, 4, requires_grad=True)
        results = []
        for mode[0], fn in (("eager", net), ("compiled", compiled)):
            x.grad = None
            net.zero_grad()
            out = fn(x)
            out.backward()
            results.append((out.detach(), x.grad.clone(), net.inner.weight.grad.clone()))
        assert_same(results[1], results[0])
    assert [name for name, _ in seen["compiled"]] == [name for name, _ in seen["eager"]]
    assert_same([g for _, g in seen["compiled"]], [g for _, g in seen["eager"]])
    # every module call is a break (torch wraps its inputs and outputs), every forward is captured:
    # x * 2 + 1; inner's linear; relu * 2; outer's linear; sum
    assert backend.graph_count == 5


def test_backward_hook_with_fullgraph_raises_module_hooks():
    net = net_with(lambda n: n.inner.register_full_backward_hook(lambda m, gin, gout: None))
    with pytest.raises(framejit.Unsupported) as info:
        framejit.compile(net, fullgraph=True)(torch.randn(2, 4))
    assert info.value.kind is BreakKind.MODULE_HOOKS


# ---- lazy modules -----------------------------------------------------------------------------------------
def _lazy_pair(make):
    """Two equal uninitialised models (their parameters are drawn at the first call, under its seed)."""
    return make(), make()


LAZY = {
    "linear": (lambda: nn.Sequential(nn.LazyLinear(3), nn.ReLU(), nn.LazyLinear(2)), lambda: torch.randn(2, 5)),
    "conv2d": (lambda: nn.Sequential(nn.LazyConv2d(3, 3), nn.LazyBatchNorm2d(), nn.Flatten(), nn.LazyLinear(2)),
               lambda: torch.randn(2, 2, 6, 6)),
}


@pytest.mark.parametrize("kind", LAZY)
def test_lazy_modules_are_captured_from_their_first_call(kind):
    make, make_input = LAZY[kind]
    eager, lazy = _lazy_pair(make)
    backend = CountingBackend()
    compiled = framejit.compile(lazy, backend=backend)
    for call in range(4):
        x = make_input()
        torch.manual_seed(call)
        expected = eager(x)
        torch.manual_seed(call)
        assert_same(compiled(x), expected)
        if call == 0:
            first = backend.graph_count
            assert not any(isinstance(m, nn.modules.lazy.LazyModuleMixin) for m in lazy.modules())
    # NOTE [Lazy modules initialised while tracing]: initialised in the first trace, so no recompile
    assert backend.graph_count == first == 1
    assert_same(dict(lazy.state_dict()), dict(eager.state_dict()))


def test_lazy_module_inside_a_function_then_fullgraph():
    eager, lazy = _lazy_pair(lambda: nn.LazyLinear(3))

    def f(module, x):
        return module(x.cos()).sin()
    compiled = framejit.compile(f, backend=(backend := CountingBackend()))
    for call in range(3):
        x = torch.randn(2, 6)
        torch.manual_seed(call)
        expected = f(eager, x)
        torch.manual_seed(call)
        assert_same(compiled(lazy, x), expected)
    assert type(lazy) is nn.Linear
    assert backend.graph_count == 1  # initialised while tracing: one whole graph from the first call
    explained = framejit.explain(f)(lazy, torch.randn(2, 6))
    assert explained.graph_count == 1 and explained.graph_break_count == 0


# ---- onnxrt ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("setup", [_prepend_orders_hooks, _partial_hook, _root_hooks], ids=lambda f: f.__name__)
def test_hooks_on_onnxrt(setup):
    net = net_with(setup)
    backend = run_differential(net, make_x, backend=OnnxCounting(), seeds=(0, 1, 2), rtol=1e-5, atol=1e-5)
    assert backend.graph_count == 1


def test_global_hook_after_first_call_on_onnxrt(global_hooks):
    net = net_with(_replace_output)
    compiled = framejit.compile(net, backend=(backend := OnnxCounting()), fullgraph=True)
    x = torch.randn(2, 4)
    assert_same(compiled(x), net(x), rtol=1e-5, atol=1e-5)
    global_hooks.append(torch_module.register_module_forward_hook(lambda m, args, out: out * 2 + 1))
    assert_same(compiled(x), net(x), rtol=1e-5, atol=1e-5)
    assert backend.graph_count == 2


# ---- across processes: the frame cache -------------------------------------------------------------------
CACHE_PROGRAM = textwrap.dedent('''
    import json, sys
    import torch
    import framejit
    from torch.nn.modules import module as torch_module

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x):
            return self.lin(x).relu() * 2

    def add_ten(m, args, out):
        return out + 10

    if sys.argv[1] == "hook":  # registered before the first call
        torch_module.register_module_forward_hook(add_ten)
    torch.manual_seed(0)
    net = Net()
    compiled = framejit.compile(net, backend="eager")
    x = torch.arange(8.0).reshape(2, 4) / 8
    out, ref = compiled(x).tolist(), net(x).tolist()
    stats = framejit.stats()
    print(json.dumps({"out": out, "ref": ref, "traced": stats["frames_traced"], "loaded": stats["frames_loaded"]}))
''')


def _run_cache_program(tmp_path, mode):
    """A new process (a forked child of a clean server: NOTE [Programs in forked children])."""
    return run_cache_program(tmp_path, "hooked_program.py", CACHE_PROGRAM, mode)


def test_global_hook_in_a_new_process_is_not_skipped_by_a_warm_frame_cache(tmp_path):
    cold = _run_cache_program(tmp_path, "plain")
    assert cold["out"] == cold["ref"] and cold["traced"] >= 1
    warm = _run_cache_program(tmp_path, "plain")
    assert warm["out"] == warm["ref"] and warm["traced"] == 0 and warm["loaded"] >= 1  # the cache is used
    hooked = _run_cache_program(tmp_path, "hook")
    assert hooked["out"] == hooked["ref"]
    assert hooked["ref"] != cold["ref"]  # the hook changes the result
    assert hooked["traced"] >= 1
    hooked_warm = _run_cache_program(tmp_path, "hook")  # the hooked entry was persisted too
    assert hooked_warm["out"] == hooked["ref"] and hooked_warm["traced"] == 0
    plain = _run_cache_program(tmp_path, "plain")
    assert plain["out"] == cold["ref"] and plain["traced"] == 0


# ---- a module class with its own __call__ --------------------------------------------------------------
class CallsSuper(nn.Linear):
    def __call__(self, x):
        return super().__call__(x * 2) + 1


def test_own_call_reaching_module_call_runs_hooks_and_guards_them(global_hooks):
    torch.manual_seed(0)
    layer = CallsSuper(4, 4)

    def f(x):
        return layer(x).relu()
    compiled = framejit.compile(f, backend=(backend := CountingBackend()), fullgraph=True)
    x = torch.randn(2, 4)
    assert_same(compiled(x), f(x))
    handle = layer.register_forward_hook(lambda m, args, out: out * -1)
    assert_same(compiled(x), f(x))
    handle.remove()
    global_hooks.append(torch_module.register_module_forward_pre_hook(lambda m, args: (args[0] + 3,)))
    assert_same(compiled(x), f(x))
    assert backend.graph_count == 3


# ---- torch's own hook users: pruning, spectral_norm, weight_norm ------------------------------------------
def _pruned():
    net = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    prune.l1_unstructured(net[0], "weight", amount=0.5)
    return net


TORCH_HOOK_USERS = {
    "prune": _pruned,  # a forward-pre hook object that sets module.weight = weight_orig * weight_mask
    "spectral_norm": lambda: nn.Sequential(torch.nn.utils.spectral_norm(nn.Linear(4, 4)), nn.Tanh()).train(),
    "weight_norm": lambda: nn.Sequential(torch.nn.utils.weight_norm(nn.Linear(4, 4)), nn.Tanh()),
}


@pytest.mark.parametrize("kind", TORCH_HOOK_USERS)
@pytest.mark.filterwarnings("ignore::FutureWarning")  # weight_norm is deprecated
def test_torch_hook_objects_are_inlined(kind):
    """Their hooks are callable objects defined in torch: __call__ is inlined, the attribute it sets on the
    module and the buffers it updates (spectral_norm's power iteration in training mode) match eager."""
    torch.manual_seed(0)
    eager = TORCH_HOOK_USERS[kind]()
    torch.manual_seed(0)
    model = TORCH_HOOK_USERS[kind]()
    compiled = framejit.compile(model, backend=(backend := CountingBackend()), fullgraph=True)
    for _ in range(3):
        x = torch.randn(3, 4)
        assert_same(compiled(x), eager(x))
        assert_same(dict(model.state_dict()), dict(eager.state_dict()))
        assert_same(model[0].__dict__["weight"], eager[0].__dict__["weight"])  # set by the hook
    assert backend.graph_count == 1
