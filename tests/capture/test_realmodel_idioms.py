"""Idioms found in real library models that framejit did not capture (issue 11, more architectures).

Each is a small self-contained program in the style of the library code that showed it (transformers'
activation registry, ModelOutput subclasses read from outside, CTRL's `x *= np.sqrt(d)`, DETR's
`BackboneOutput(feature_maps=(...))`, Switch Transformers' `self.classifier = self.classifier.to(dtype)`
and f-string expert names, Mamba's `associative_scan`, decorated forwards called at breaks inside
try/finally). Each runs eagerly and compiled on fresh inputs, several calls, and asserts the graph count;
where the point is that code below a break is still captured, also that no frame ran eagerly.
"""
from __future__ import annotations

import collections
import functools

import numpy as np
import pytest
import torch

import framejit
from tests.helpers import CountingBackend, run_differential, eager_frames


def _x(seed):
    return (torch.randn(3, 4),)


# ---- dict-subclass objects from outside, read through dict's and OrderedDict's own methods ------------------
class Doubler(torch.nn.Module):
    def forward(self, x):
        return x * 2


class Instantiator(collections.OrderedDict):
    """transformers' ClassInstantier (ACT2FN): `registry[name]` builds a fresh module from the raw entry."""

    def __getitem__(self, key):
        content = super().__getitem__(key)
        cls, kwargs = content if isinstance(content, tuple) else (content, {})
        return cls(**kwargs)


REGISTRY = Instantiator({"double": Doubler, "relu": torch.nn.ReLU, "softplus2": (torch.nn.Softplus, {"beta": 2.0})})


@pytest.mark.parametrize("name", ["double", "relu", "softplus2"])
def test_ordered_dict_registry_super_getitem(name):
    """`super().__getitem__` of an OrderedDict subclass is dict's own lookup: the raw entry, not a second
    call of the override (which `dict.copy` of such an object would make)."""
    def f(x):
        return REGISTRY[name](x) + 1
    assert run_differential(f, _x).graph_count == 1


class Output(collections.OrderedDict):
    """A ModelOutput-like dict subclass: its own `__getitem__` answers from `self.items()`."""

    def __getitem__(self, k):
        return dict(self.items())[k] if isinstance(k, str) else tuple(self[key] for key in self.keys())[k]

    def to_tuple(self):
        return tuple(self[k] for k in self.keys())


def test_ordered_dict_methods_on_an_object_from_outside():
    """OrderedDict.keys/items of an instance passed in (a ModelOutput's `to_tuple`), in its own order."""
    def f(out, x):
        first, second = out.to_tuple()
        return first * x + second, list(out.keys()), out["b"] + 1

    def make(seed):
        out = Output(a=torch.randn(3, 4), b=torch.randn(3, 4))
        out.move_to_end("a")  # OrderedDict order differs from the dict's own order now
        return out, torch.randn(3, 4)
    assert run_differential(f, make, seeds=(0, 1, 2)).graph_count == 1


def test_dict_copy_of_a_subclass_with_its_own_iter_breaks_not_guesses():
    class Ordered(dict):
        def __iter__(self):
            return iter(sorted(dict.keys(self), reverse=True))

    table = Ordered(a=1.0, b=2.0)

    def f(x):
        copied = dict.copy(table)  # merges through keys() and __getitem__: run by Python itself
        return x * copied["a"], list(copied)
    run_differential(f, _x, fullgraph=False)


# ---- NumPy scalars ------------------------------------------------------------------------------------
def test_numpy_ufunc_of_python_scalars_is_a_numpy_scalar():
    """CTRL: `inputs_embeds *= np.sqrt(d_model)` (a np.float64, which tensors accept as a float)."""
    def f(x, d):
        y = x * 1
        y *= np.sqrt(d)
        return y + np.exp(np.float32(0.5)), np.sqrt(d), np.maximum(d, 3)
    backend = run_differential(f, lambda seed: (torch.randn(3), 16 + seed))
    assert backend.graph_count == 2  # the int is specialised: one graph per value


# ---- ModelOutput.__post_init__ with a tuple first field ----------------------------------------------------
def test_model_output_with_a_tuple_of_tensors_as_only_field():
    from transformers.utils import ModelOutput
    import dataclasses

    @dataclasses.dataclass
    class Maps(ModelOutput):
        feature_maps: tuple | None = None
        hidden_states: tuple | None = None

    def f(x):
        out = Maps(feature_maps=(x * 2, x + 1))
        return out.feature_maps[0] + out[0][1], list(out.keys()), Maps().to_tuple()
    assert run_differential(f, _x).graph_count == 1


# ---- Module.to without a change, and storing the same submodule back -------------------------------------
class Router(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.classifier = torch.nn.Linear(4, 4)
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))
        self.dtype = torch.float32

    def forward(self, x):
        self.input_dtype = x.dtype
        self.classifier = self.classifier.to(self.dtype)
        return self.classifier(x.to(self.dtype)).softmax(-1).to(self.input_dtype)


def test_module_to_same_dtype_is_captured():
    router = Router()
    backend = run_differential(router, _x)
    assert backend.graph_count == 1
    assert router.classifier.weight.dtype == torch.float32 and router.input_dtype == torch.float32


def test_module_to_another_dtype_still_converts():
    router = Router()
    router.dtype = torch.float64
    eager = Router()
    eager.load_state_dict(router.state_dict())
    eager.dtype = torch.float64
    compiled = framejit.compile(router, backend=CountingBackend())
    x = torch.randn(3, 4)
    torch.testing.assert_close(compiled(x), eager(x))
    assert router.classifier.weight.dtype == torch.float64 and router.steps.dtype == torch.long


def test_module_to_rejects_an_integer_dtype_as_eager():
    def f(module, x):
        return module.to(torch.int32)(x)
    backend = run_differential(f, lambda seed: (torch.nn.Linear(4, 4), torch.randn(3, 4)), fullgraph=False)
    assert backend.graph_count == 0


# ---- torch's associative_scan ---------------------------------------------------------------------------
def test_associative_scan_generic_is_traced_as_its_sequence_of_steps():
    """Mamba's selective scan on its compile path: one graph, equal to torch's own scan."""
    from torch._higher_order_ops.associative_scan import associative_scan

    def f(a, b, reverse):
        def combine_fn(left, right):
            a_left, b_left = left
            a_right, b_right = right
            return a_left * a_right, a_right * b_left + b_right
        _, states = associative_scan(combine_fn, (a, b), dim=2, reverse=reverse, combine_mode="generic")
        return states * 2, associative_scan(lambda x, y: x + y, a, dim=-1, combine_mode="generic")

    backend = CountingBackend()
    compiled = framejit.compile(f, backend=backend)
    for reverse in (False, True, False):
        a, b = torch.rand(2, 3, 5, 4), torch.randn(2, 3, 5, 4)
        for got, want in zip(compiled(a, b, reverse), f(a, b, reverse)):
            torch.testing.assert_close(got, want)
    assert backend.graph_count == 2


def test_associative_scan_pointwise_on_cpu_raises_as_eager():
    from torch._higher_order_ops.associative_scan import associative_scan

    def f(x):
        return associative_scan(lambda a, b: a + b, x, dim=0, combine_mode="pointwise")
    run_differential(f, _x, fullgraph=False)


# ---- callees below a break: decorated functions and calls inside try blocks -----------------------------
def returns_tuple(func):
    """transformers-style decorator: the wrapper calls the closed-over function."""
    @functools.wraps(func)
    def wrapper(self, *args, **kwargs):
        return func(self, *args, **kwargs)
    return wrapper


def restores_config(func):
    """merge_with_config_defaults-style: the call sits inside try/finally."""
    @functools.wraps(func)
    def wrapper(self, *args, **kwargs):
        self.calls += 1
        try:
            output = func(self, *args, **kwargs)
        finally:
            self.calls -= 1
        return output
    return wrapper


class Inner(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.calls = 0

    @returns_tuple
    @restores_config
    def forward(self, x):
        y = self.lin(x).relu()
        count = int((y > 0).sum())  # data-dependent: a graph break deep inside
        return y * 2 + count


class Outer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Inner()

    def forward(self, x):
        return self.inner(x + 1) - 1


def test_code_below_a_break_in_decorated_forwards_is_captured():
    """The break surfaces at calls of decorator wrappers (closures from outside) and at a call inside
    try/finally; each callee still runs through a frame hook, so the linear layer and what follows the
    break are in graphs and no frame runs wholly eagerly."""
    model = Outer()
    before = eager_frames()
    backend = run_differential(model, _x, fullgraph=False)
    assert eager_frames() == before
    ops = [n.target for gm in backend.graphs for n in gm.graph.nodes if n.op in ("call_function", "call_method",
                                                                                  "call_module")]
    assert torch.nn.functional.linear in ops or any("lin" in str(t) for t in ops), ops
    assert model.inner.calls == 0


def test_f_string_of_a_tensor_breaks_and_resumes():
    """Switch Transformers: `self[f"expert_{idx[0]}"]` with idx a tensor row."""
    class Experts(torch.nn.ModuleDict):
        def __init__(self):
            super().__init__({f"e_{i}": torch.nn.Linear(3, 3) for i in range(3)})

        def forward(self, x, index):
            y = x * 2
            for row in index:
                y = y + self[f"e_{row[0]}"](x) + float(f"{row[0]:>4}")
            return y

    before = eager_frames()
    run_differential(Experts(), lambda seed: (torch.randn(2, 3), torch.tensor([[seed], [2]])), fullgraph=False)
    assert eager_frames() == before


# ---- in-place updates of an input while other inputs alias each other ------------------------------------
def test_mutating_an_input_while_two_other_inputs_alias():
    """Only the mutated input must not share memory with another input; a view and its base, both read,
    do not keep the graph from being compiled."""
    def f(out, base, view):
        out.index_add_(0, torch.tensor([0, 1]), base[:2] + view[:2])
        return out

    def make(seed):
        base = torch.randn(4, 3)
        return torch.zeros(2, 3), base, base[1:]
    assert run_differential(f, make).graph_count == 1


def test_mutating_an_input_that_aliases_another_still_matches_eager():
    def f(out, other):
        out.add_(1)
        return other * 2

    def make(seed):
        base = torch.randn(4)
        return base, base[:2] if seed else torch.randn(2)
    run_differential(f, make, fullgraph=False, seeds=(0, 1, 0))
