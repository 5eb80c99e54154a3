"""torch's lazy modules initialised while tracing (NOTE [Lazy modules initialised while tracing]).

A model holding LazyLinear / LazyConv2d / LazyBatchNorm2d compiles with fullgraph=True from its first call,
with the parameters, outputs and random state eager has under the same seed; where the initial values
could not be drawn exactly as eager draws them (a random op before the call in the same graph, a user
lazy class, another hook on the module) the first call stays a graph break.
"""
from __future__ import annotations

import pytest
import torch
from torch import nn

import framejit
from tests.helpers import CountingBackend, assert_same


def _run_pair(make, make_input, fn=None, calls=3, **compile_kw):
    """Eager and compiled copies built from one seed; each call runs both under the same seed on a fresh
    input; returns the compiled model, the backend and the outputs/random state compared."""
    torch.manual_seed(0)
    eager = make()
    torch.manual_seed(0)
    lazy = make()
    backend = CountingBackend()
    target = lazy if fn is None else fn
    compiled = framejit.compile(target, backend=backend, **compile_kw)
    for call in range(calls):
        x = make_input(call)
        torch.manual_seed(100 + call)
        expected = eager(x) if fn is None else fn(eager, x)
        expected_rng = torch.rand(2)
        torch.manual_seed(100 + call)
        got = compiled(x) if fn is None else compiled(lazy, x)
        assert_same(got, expected)
        assert_same(torch.rand(2), expected_rng)
    assert_same(dict(lazy.state_dict()), dict(eager.state_dict()))
    assert [type(m) for m in lazy.modules()] == [type(m) for m in eager.modules()]
    return lazy, backend


class LazyMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.LazyLinear(5)
        self.fc2 = nn.LazyLinear(2)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x * 2)))


class LazyConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.LazyConv2d(3, 3)
        self.bn = nn.LazyBatchNorm2d()
        self.head = nn.LazyLinear(2)

    def forward(self, x):
        return self.head(torch.flatten(torch.relu(self.bn(self.conv(x))), 1))


def test_lazy_mlp_is_one_graph_from_its_first_call_with_fullgraph():
    lazy, backend = _run_pair(LazyMLP, lambda call: torch.randn(3, 4) + call, fullgraph=True)
    assert type(lazy.fc1) is nn.Linear and lazy.fc1.in_features == 4 and lazy.fc2.in_features == 5
    assert backend.graph_count == 1  # traced once, initialised in the trace, then hits


def test_lazy_conv_batchnorm_linear_in_training_match_eager():
    # batch norm in training mode writes its running statistics: compared through state_dict
    lazy, backend = _run_pair(LazyConvNet, lambda call: torch.randn(2, 2, 6, 6) * (call + 1), fullgraph=True)
    assert backend.graph_count == 1
    assert lazy.bn.num_batches_tracked.item() == 3


def test_lazy_module_passed_to_a_function():
    def f(module, x):
        return module(x.cos()).sin()
    _, backend = _run_pair(lambda: nn.LazyLinear(3), lambda call: torch.randn(2, 6) - call, fn=f,
                           fullgraph=True)
    assert backend.graph_count == 1


def test_a_random_op_before_the_call_keeps_the_break_and_eager_values():
    class DropThenLazy(nn.Module):
        def __init__(self):
            super().__init__()
            self.drop = nn.Dropout(0.5)
            self.fc = nn.LazyLinear(3)

        def forward(self, x):
            return self.fc(self.drop(x))

    _run_pair(DropThenLazy, lambda call: torch.randn(4, 6))
    with pytest.raises(framejit.Unsupported):
        framejit.compile(DropThenLazy(), fullgraph=True)(torch.randn(4, 6))


def test_a_user_lazy_class_and_a_hooked_lazy_module_keep_the_break():
    class MyLazy(nn.modules.lazy.LazyModuleMixin, nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.UninitializedParameter()

        def initialize_parameters(self, x):
            with torch.no_grad():
                self.w.materialize(x.shape[-1:])
                self.w.uniform_()

        def forward(self, x):
            return x * self.w

    _run_pair(MyLazy, lambda call: torch.randn(2, 3) + call)
    with pytest.raises(framejit.Unsupported):
        framejit.compile(MyLazy(), fullgraph=True)(torch.randn(2, 3))

    def hooked():
        m = nn.LazyLinear(3)
        m.register_forward_pre_hook(lambda mod, args: (args[0] * 3,))
        return m
    _run_pair(hooked, lambda call: torch.randn(2, 4))


def test_a_second_uninitialised_model_recompiles_and_initialises():
    def f(module, x):
        return module(x) * 2
    compiled = framejit.compile(f, backend=CountingBackend(), fullgraph=True)
    for seed in (1, 2):
        torch.manual_seed(seed)
        eager, lazy = nn.LazyLinear(3), nn.LazyLinear(3)
        x = torch.randn(2, 5)
        torch.manual_seed(seed + 10)
        expected = f(eager, x)
        torch.manual_seed(seed + 10)
        assert_same(compiled(lazy, x), expected)
        assert type(lazy) is nn.Linear
        assert_same(lazy.weight, eager.weight)


def test_symbolic_sizes_keep_the_break():
    _run_pair(LazyMLP, lambda call: torch.randn(3 + call, 4), dynamic=True)


def test_inference_mode_block_in_the_frame_keeps_the_break_and_eager_state():
    def f(module, x):
        with torch.inference_mode():
            return module(x) * 2
    eager, lazy = nn.LazyLinear(3), nn.LazyLinear(3)
    compiled = framejit.compile(f)
    for call in range(2):
        x = torch.randn(2, 4)
        torch.manual_seed(call)
        expected = f(eager, x)
        torch.manual_seed(call)
        assert_same(compiled(lazy, x), expected)
    assert lazy.weight.is_inference() == eager.weight.is_inference()
    assert_same(lazy.weight, eager.weight)


def test_a_lazy_norm_without_parameters_is_captured_with_fullgraph():
    # nothing to materialise: the pre-hook only removes itself and turns the module into BatchNorm2d
    lazy, backend = _run_pair(lambda: nn.LazyBatchNorm2d(affine=False, track_running_stats=False),
                              lambda call: torch.randn(2, 3, 4, 4) + call, fullgraph=True)
    assert type(lazy) is nn.BatchNorm2d and not lazy._forward_pre_hooks
    assert backend.graph_count == 1
