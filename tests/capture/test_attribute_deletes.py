"""`delattr(obj, name)` / `del obj.name` of an instance attribute of an object or module from outside, recorded and
replayed after the graph (NOTE [Attribute deletes on objects from outside]), and the user-defined lazy modules it
lets capture whole (LazyModuleMixin._infer_parameters ends with `delattr(module, '_initialize_hook')`).

Before, every such delete was a break: fullgraph=True raised at the first call of a user lazy module and at
`del self.cache`. Differential: eager vs framejit on twin objects over 3-4 calls, comparing values, gradients, the
object's attributes and the exceptions raised.
"""
import pytest
import torch
from torch.nn.modules.lazy import LazyModuleMixin

import framejit
from tests.helpers import CountingBackend


class LazyScale(LazyModuleMixin, torch.nn.Module):
    def initialize_parameters(self, x):
        with torch.no_grad():
            self.w = torch.nn.Parameter(torch.empty(x.shape[-1]).fill_(0.5))

    def forward(self, x):
        return x * self.w


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = LazyScale()
        self.lin = torch.nn.Linear(3, 2)

    def forward(self, x):
        return self.lin(self.scale(x.relu() + 1)).sum()


def test_a_user_lazy_module_is_initialised_inside_one_graph():
    eager = Net()
    mod = Net()
    mod.lin.load_state_dict(eager.lin.state_dict())
    backend = CountingBackend()
    compiled = framejit.compile(mod, backend=backend, fullgraph=True)
    for _ in range(3):
        x = torch.randn(4, 3)
        e, c = eager(x), compiled(x)
        torch.testing.assert_close(c, e)
        e.backward()
        c.backward()
        torch.testing.assert_close(mod.scale.w.grad, eager.scale.w.grad)
        assert type(mod.scale) is type(eager.scale) and "_initialize_hook" not in vars(mod.scale)
        assert "_load_hook" not in vars(mod.scale) and not mod.scale._forward_pre_hooks
        assert not mod.scale.has_uninitialized_params() and list(mod.scale._parameters) == ["w"]
    assert backend.graph_count == 2  # the initialising call, then the initialised module


class Cached(torch.nn.Module):
    def forward(self, x):
        if hasattr(self, "cache"):
            y = x + self.cache
            del self.cache
        else:
            self.cache = x.sum()
            y = x * 2
        return y


def test_del_of_a_module_attribute_alternates_as_in_eager():
    eager, mod = Cached(), Cached()
    compiled = framejit.compile(mod, backend="eager", fullgraph=True)
    for _ in range(4):
        x = torch.randn(3)
        torch.testing.assert_close(compiled(x), eager(x))
        assert hasattr(mod, "cache") == hasattr(eager, "cache")
        if hasattr(eager, "cache"):
            torch.testing.assert_close(mod.cache, eager.cache)


class WithDefault(torch.nn.Module):
    a = 5

    def forward(self, x):
        del self.a
        return x + self.a, hasattr(self, "a")


def test_a_read_after_the_delete_sees_the_class_attribute():
    eager, mod = WithDefault(), WithDefault()
    compiled = framejit.compile(mod, backend="eager")
    for k in range(3):
        eager.a = mod.a = k
        x = torch.randn(2)
        e, c = eager(x), compiled(x)
        torch.testing.assert_close(c[0], e[0])
        assert c[1] == e[1] and "a" not in vars(mod) and mod.a == 5


class Config:
    def __init__(self):
        self.tmp = 1.5


def _drop(cfg, x):
    y = x * cfg.tmp
    del cfg.tmp
    return y


def test_del_of_an_object_attribute_and_a_missing_one_raises_as_eager():
    compiled = framejit.compile(_drop, backend="eager", fullgraph=True)
    for _ in range(3):
        eager_cfg, cfg = Config(), Config()
        x = torch.randn(2)
        torch.testing.assert_close(compiled(cfg, x), _drop(eager_cfg, x))
        assert vars(cfg) == vars(eager_cfg) == {}
    seen = []

    def drop_then_log(cfg, x):
        del cfg.tmp
        seen.append(1)  # eager never gets here without the attribute
        return x + 1

    compiled = framejit.compile(drop_then_log, backend="eager")
    torch.testing.assert_close(compiled(Config(), torch.ones(1)), torch.full((1,), 2.0))
    with pytest.raises(AttributeError) as eager_error:
        drop_then_log(Config.__new__(Config), torch.ones(1))
    for _ in range(2):
        with pytest.raises(AttributeError) as error:
            compiled(Config.__new__(Config), torch.ones(1))
        assert str(error.value) == str(eager_error.value)
    assert seen == [1]


class Registered(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(3))
        self.register_buffer("b", torch.ones(3), persistent=False)
        self.sub = torch.nn.Linear(3, 3)

    def forward(self, x, name):
        if name in self._parameters or name in self._buffers or name in self._modules:
            y = getattr(self, name)(x) if name == "sub" else x * getattr(self, name)
            delattr(self, name)
            return y, hasattr(self, name)
        return x, None


@pytest.mark.parametrize("name", ["w", "b", "sub"])
def test_del_of_a_registered_parameter_buffer_or_submodule(name):
    eager = Registered()
    mod = Registered()
    mod.load_state_dict(eager.state_dict())
    compiled = framejit.compile(mod, backend="eager", fullgraph=True)
    for _ in range(3):
        x = torch.randn(3)
        e, c = eager(x, name), compiled(x, name)
        torch.testing.assert_close(c[0], e[0])
        assert c[1] == e[1]
        assert list(mod._parameters) == list(eager._parameters) and list(mod._buffers) == list(eager._buffers)
        assert list(mod._modules) == list(eager._modules)
        assert mod._non_persistent_buffers_set == eager._non_persistent_buffers_set


class Pair:
    def __init__(self):
        self.a = 3
        self.b = 5


def _drop_then_count(obj, x):
    del obj.a
    return x * len(obj.__dict__), sorted(vars(obj)), "a" in obj.__dict__


def test_the_instance_dict_read_after_a_delete_lacks_the_name():
    compiled = framejit.compile(_drop_then_count, backend="eager", fullgraph=True)
    for _ in range(3):
        eager_obj, obj = Pair(), Pair()
        x = torch.randn(2)
        e, c = _drop_then_count(eager_obj, x), compiled(obj, x)
        torch.testing.assert_close(c[0], e[0])
        assert c[1:] == e[1:] and vars(obj) == vars(eager_obj) == {"b": 5}
