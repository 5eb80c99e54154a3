"""nn.Module call machinery and container protocol changed between calls (issue 12, "every fact is
guarded"): `_call_impl`/`_compiled_call_impl`/`__call__` set on an instance, `forward` or `_call_impl`
patched on a class, and `__iter__`/`__len__`/`__getitem__`/`__contains__`/`__bool__` of nn.Sequential,
nn.ModuleList and nn.ModuleDict (on a subclass or patched on torch's class); NOTE [Module container
protocol] in capture/module_protocol.py.
"""
from __future__ import annotations

import pytest
import torch

import framejit
from tests.guards.test_soundness_facts import run_steps

BACKENDS = ["eager", "onnxrt"]


def _x():
    return (torch.arange(8.0).reshape(2, 4) - 3,)


# ---- nn.Module call machinery patched ----------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_forward_patched_on_the_user_class_after_the_first_call(backend):
    class Net(torch.nn.Module):
        def forward(self, x):
            return x + 1
    net = Net()

    def fn(x):
        return net(x) * 2

    run_steps(fn, _x, [None, None, lambda: setattr(Net, "forward", lambda self, x: x - 7), None],
              backend=backend)


@pytest.mark.parametrize("name", ["_call_impl", "__call__"])
def test_call_machinery_patched_on_the_instance(name):
    relu = torch.nn.ReLU()

    def fn(x):
        return relu(x) + 1

    def patch():
        original = type(relu)._call_impl
        setattr(relu, name, lambda *a, **k: original(relu, *a, **k) * 10)

    run_steps(fn, _x, [None, None, patch, None])


def test_call_impl_patched_on_a_user_class():
    class Net(torch.nn.Module):
        def forward(self, x):
            return x + 1
    net = Net()

    def fn(x):
        return net(x)

    run_steps(fn, _x, [None, lambda: setattr(Net, "_call_impl", lambda self, x: x * 9), None])


@pytest.mark.parametrize("method", ["__iter__", "__len__", "__getitem__"])
def test_sequential_subclass_protocol_patched(method):
    class Seq(torch.nn.Sequential):
        pass
    seq = Seq(torch.nn.ReLU(), torch.nn.Tanh())
    impl = {"__iter__": lambda self: iter([torch.nn.Sigmoid()]),
            "__len__": lambda self: 1,
            "__getitem__": lambda self, i: torch.nn.Sigmoid()}[method]

    def fn(x):
        y = seq(x)
        for m in seq:
            y = y + m(x)
        return y + len(seq) + seq[0](x)

    run_steps(fn, _x, [None, None, lambda: setattr(Seq, method, impl), None])


@pytest.mark.parametrize("method", ["__iter__", "__len__", "__getitem__"])
def test_module_list_protocol_patched_on_the_class(method, monkeypatch):
    layers = torch.nn.ModuleList([torch.nn.ReLU(), torch.nn.Tanh()])
    impl = {"__iter__": lambda self: iter([torch.nn.Sigmoid()]),
            "__len__": lambda self: 1,
            "__getitem__": lambda self, i: torch.nn.Sigmoid()}[method]

    def fn(x):
        y = x
        for m in layers:
            y = y + m(x)
        return y + len(layers) + layers[0](x)

    # fresh_eager: NOTE [Stale __getitem__ on CPython 3.13.0] (tests/guards/test_soundness_facts.py)
    run_steps(fn, _x, [None, None, lambda: monkeypatch.setattr(torch.nn.ModuleList, method, impl), None],
              fresh_eager=True)


def test_call_impl_set_on_the_instance_before_the_first_call():
    relu = torch.nn.ReLU()
    original = type(relu)._call_impl
    relu._call_impl = lambda *a, **k: original(relu, *a, **k) * 10

    def fn(x):
        return relu(x) + 1

    run_steps(fn, _x, [None, None, lambda: relu.__dict__.pop("_call_impl"), None])


@pytest.mark.parametrize("method", ["__contains__", "__iter__", "__len__", "__getitem__"])
def test_module_dict_subclass_protocol_overridden_after_the_first_call(method):
    class Dict(torch.nn.ModuleDict):
        pass
    layers = Dict({"a": torch.nn.ReLU(), "b": torch.nn.Tanh()})
    impl = {"__contains__": lambda self, k: False, "__iter__": lambda self: iter(["b"]),
            "__len__": lambda self: 7, "__getitem__": lambda self, k: torch.nn.Identity()}[method]

    def fn(x):
        y = x + ("a" in layers) + len(layers)
        for k in layers:
            y = y * 2 + layers[k](x)
        return y

    run_steps(fn, _x, [None, None, lambda: setattr(Dict, method, impl), None])


def test_truth_of_a_module_list_that_grows_and_of_a_module_with___len__():
    layers = torch.nn.ModuleList()

    class Counted(torch.nn.Module):
        n = 0

        def __len__(self):
            return self.n
    counted = Counted()

    def fn(x):
        return x * (2 if layers else 3) + (1 if counted else 0)

    run_steps(fn, _x, [None, lambda: layers.append(torch.nn.ReLU()), None, lambda: setattr(counted, "n", 4), None,
                       lambda: setattr(Counted, "__bool__", lambda self: False), None])


def test_getattr_and_setattr_patched_on_nn_module_are_run():
    """NOTE [Library defaults patched] (capture/lookup.py): `nn.Module.__getattr__`/`__setattr__` replaced on
    torch's class (a wrapper that serves or logs names) run as eager runs them, patched before the first
    call, after it, and removed again."""
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(4))

        def forward(self, x):
            self.seen = x.shape[0]
            return x * self.w
    original_getattr, original_setattr = torch.nn.Module.__getattr__, torch.nn.Module.__setattr__

    def getattr_(self, name):
        value = original_getattr(self, name)
        return value * 5 if name == "w" else value

    def setattr_(self, name, value):
        if type(self) is Net:
            self.__dict__.setdefault("stores", []).append(name)
        original_setattr(self, name, value)
    patches = [{"__getattr__": getattr_}, {}, {"__getattr__": getattr_, "__setattr__": setattr_}, {}, {"__setattr__": setattr_}]

    def run(compile):
        net = Net()
        fn = compile(lambda x: (net(x), list(net.__dict__.get("stores", []))))
        results = []
        for patch in patches:
            for name, impl in patch.items():
                setattr(torch.nn.Module, name, impl)
            try:
                out, stores = fn(torch.arange(4.0))
            finally:
                torch.nn.Module.__getattr__, torch.nn.Module.__setattr__ = original_getattr, original_setattr
            results.append((out.tolist(), stores))
        return results
    assert run(lambda f: framejit.compile(f, backend="eager")) == run(lambda f: f)


def test_module_call_patched_on_nn_module_runs_for_a_module_that_breaks_inside():
    """NOTE [Library defaults patched]: a module called where the trace breaks (its forward prints) is handed
    to its forward through the frame hook only while `nn.Module.__call__` is torch's own; a patched one
    (before the first call, after it, removed again) runs as in eager."""
    original = torch.nn.Module.__call__

    def doubled(self, *args, **kwargs):
        return original(self, *args, **kwargs) * 2

    class Printing(torch.nn.Module):
        def forward(self, x):
            print("forward")
            return x + 1
    net = Printing()

    def fn(x):
        return net(x) * 3

    def patch(on):
        return lambda: setattr(torch.nn.Module, "__call__", doubled if on else original)
    try:
        run_steps(fn, _x, [patch(True), patch(False), patch(True), patch(False)])
    finally:
        torch.nn.Module.__call__ = original


def test_call_impl_patched_on_nn_module_runs_for_a_module_that_breaks_inside_and_one_that_does_not():
    """NOTE [Library defaults patched]: `nn.Module._call_impl` patched on torch's class (an instrumentation
    idiom) runs as in eager, for a module traced whole and for one handed to its forward's frame hook at a
    break (patched after the first call, removed, patched again)."""
    original = torch.nn.Module._call_impl
    log = []

    def doubled(self, *args, **kwargs):
        log.append(type(self).__name__)
        return original(self, *args, **kwargs) * 2

    class Printing(torch.nn.Module):
        def forward(self, x):
            print("forward")
            return x + 1
    torch.manual_seed(0)
    net, lin = Printing(), torch.nn.Linear(4, 4)

    def fn(x):
        return net(x) * 3 + lin(x)

    def patch(on):
        return lambda: (log.clear(), setattr(torch.nn.Module, "_call_impl", doubled if on else original))
    try:
        run_steps(fn, _x, [None, patch(True), patch(False), patch(True)])
        assert log == ["Printing", "Linear"] * 2, log  # eager's calls, then the compiled ones
    finally:
        torch.nn.Module._call_impl = original
