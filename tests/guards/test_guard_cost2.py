"""Remembered tensor facts (issue 17, NOTE [Remembered tensor facts] in guards/codegen.py): a module's
parameters and buffers are checked in full once, then by identity, version and requires_grad, while
every way of changing their metadata in place still makes the guard check them again.

Costs are counted, never timed: the calls one guard check makes, as `sys.setprofile` reports them. The
soundness tests change one fact the fast path no longer reads between calls and compare with eager on a
function whose result depends on that fact (sizes, strides, offset, dtype, lazy bit, requires_grad are
read as Python values, so an entry kept past the change returns the old trace's constants).
"""
from __future__ import annotations


import pytest
import torch

import framejit
from framejit.guards.codegen import compile_guards
from tests.guards.test_guard_cost import _calls, _mlp, no_marks  # noqa: F401  (fixture)
from tests.guards.test_soundness_facts import run_steps

_METHODS = ("stride", "storage_offset", "is_neg", "dim", "size")


def _compiled_mlp():
    model = _mlp()

    def fn(x):
        return model(x)

    compiled = framejit.compile(fn, backend="eager")
    return model, compiled


def test_parameters_are_checked_by_identity_and_version_after_the_first_call(no_marks):
    model, compiled = _compiled_mlp()
    x = torch.randn(4, 16)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
        guard = compiled.entries[0].guard
        first = _calls(guard.check, x)  # checks every fact, remembers each parameter
        calls = _calls(guard.check, x)
    # the input is checked in full; none of the 8 parameters calls a metadata method any more
    for method in ("stride", "storage_offset", "is_neg"):
        assert first.count(("c", method)) == 9, first
        assert calls.count(("c", method)) == 1, (method, calls)
    assert [name for kind, name in calls if kind == "py"] == []  # remembering runs only on a miss
    assert sum(kind == "c" for kind, _ in calls) <= sum(kind == "c" for kind, _ in first) - 8 * 3
    assert "___memo7" in guard.source and "___memo8" not in guard.source


def test_in_place_value_updates_keep_one_entry_and_eager_results():
    """An optimizer-like update bumps every version: the full check runs again, no recompile."""
    model = _mlp()

    def fn(x):
        return model(x)

    def step():
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(0.9).add_(0.01)

    counting = run_steps(fn, lambda: (torch.randn(3, 16),), [None, None, step, None, step, step, None])
    assert counting.graph_count == 1


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.arange(16.0).reshape(4, 4) / 16)
        self.register_buffer("b", torch.arange(4.0))

    def forward(self, x):
        w, b = self.w, self.b
        facts = (w.dim(), w.shape[0], w.stride(0), w.storage_offset(), b.shape[0], b.stride(0),
                 b.storage_offset(), w.requires_grad, w.dtype == torch.float64, w.is_neg())
        return x * w.sum().float() + b.sum().float(), facts


def _swap(net):
    # the TensorImpl swap of torch.utils.swap_tensors, whose own check refuses net.w here: the trace's fake
    # tensor converter keeps a weak reference to it (found with this test; not the guard's)
    _SWAPPED.append(torch.nn.Parameter(torch.arange(8.0).reshape(2, 4)))
    torch._C._swap_tensor_impl(net.w, _SWAPPED[-1])


_SWAPPED: list = []


def _preserved_transpose(net):
    with torch.autograd.grad_mode._unsafe_preserve_version_counter(net.w):
        net.w.t_()


def _set_neg(net):
    torch._C._set_neg(net.w, True)


def _hook(net):
    net.register_forward_hook(lambda m, args, out: out * 3)


_MUTATIONS = {
    "t_": lambda n: n.w.t_(),
    "transpose_": lambda n: n.w.transpose_(0, 1),
    "as_strided_": lambda n: n.w.as_strided_((2, 4), (4, 1), 4),
    "unsqueeze_": lambda n: n.w.unsqueeze_(0),
    "unsqueeze_squeeze_": lambda n: n.w.unsqueeze_(0).squeeze_(0),
    "set_": lambda n: n.w.set_(torch.randn(2, 8)),
    "buffer resize_": lambda n: n.b.resize_(8),
    "buffer set_ offset": lambda n: n.b.set_(n.b.untyped_storage(), 1, (3,), (1,)),
    ".data = transposed": lambda n: setattr(n.w, "data", n.w.data.t()),
    ".data = float64": lambda n: setattr(n.w, "data", torch.randn(4, 4, dtype=torch.float64)),
    ".data = other shape": lambda n: setattr(n.w, "data", torch.randn(3, 4)),
    "buffer .data =": lambda n: setattr(n.b, "data", torch.randn(6)),
    "requires_grad_": lambda n: n.w.requires_grad_(False),
    "detach_": lambda n: n.w.detach_(),
    "swap_tensors": _swap,
    "preserved version": _preserved_transpose,
    "_set_neg": _set_neg,
    "double()": lambda n: n.double(),
    "to(float64)": lambda n: n.to(torch.float64),
    "parameter replaced": lambda n: setattr(n, "w", torch.nn.Parameter(torch.randn(2, 4))),
    "load_state_dict": lambda n: n.load_state_dict({"w": torch.randn(4, 4), "b": torch.randn(4)}),
    "load_state_dict assign": lambda n: n.load_state_dict({"w": torch.randn(4, 4).t(), "b": torch.randn(4)},
                                                          assign=True),
    "forward hook": _hook,
}


@pytest.mark.parametrize("name", list(_MUTATIONS))
def test_a_fact_changed_in_place_between_calls_is_seen(name):
    net = _Net()
    mutate = _MUTATIONS[name]

    def change():
        with torch.no_grad():
            mutate(net)

    def fn(x):
        return net(x)

    # calls 1-3: compile, check in full and remember, then the fast path; the change; two more calls
    run_steps(fn, lambda: (torch.randn(3, 1),), [None, None, None, change, None, None])


def test_inference_tensors_are_checked_in_full():
    """Inference tensors have no version counter: never remembered, and a `.data` swap to one is seen."""
    with torch.inference_mode():
        net = _Net()
    net.w.requires_grad_(False)

    def fn(x):
        return net(x)

    def to_normal():
        net.w = torch.nn.Parameter(torch.randn(2, 4), requires_grad=False)

    def t_():
        with torch.inference_mode():
            net.b.resize_(6)

    counting = run_steps(fn, lambda: (torch.randn(3, 1),), [None, None, None, t_, None, to_normal, None, None])
    assert counting.graph_count == 3  # the first trace, the resized buffer, the new parameter: no retraces


def test_version_counters_are_not_read_before_the_type():
    """A remembered tensor's `_version` is read after its type check, never as a shared local before it
    (NOTE [Guards run no user code]; `_version` raises for inference tensors)."""
    model, compiled = _compiled_mlp()
    compiled(torch.randn(4, 16))
    source = compiled.entries[0].guard.source
    assert "._version\n" not in source and "._version) == ___memo" in source


def test_a_kept_source_remembers_afresh():
    """A restored entry compiles the kept source again (frame cache): its memos start empty, and the
    restored guard still sees an in-place change."""
    net = _Net()

    def fn(x):
        return net(x)

    compiled = framejit.compile(fn, backend="eager")
    x = torch.randn(3, 1)
    compiled(x)
    guard = compiled.entries[0].guard
    assert guard.check(x) and guard.check(x)
    params = guard.source.split("\n", 1)[0].split("(", 1)[1].rsplit(")", 1)[0]
    names = {k: v for k, v in guard.namespace.items() if k.startswith("___c")}
    restored = compile_guards(guard.guards, params, names, source=guard.source)
    memos = sorted(k for k in restored.namespace if k.startswith("___memo"))
    assert memos == ["___memo0", "___memo1"]
    assert restored.namespace["___memo0"][0] is None  # nothing remembered yet
    assert restored.check(x) and restored.check(x)
    assert restored.namespace["___memo0"][0] is net.w
    with torch.no_grad():
        net.w.t_()
    assert not restored.check(x) and not guard.check(x)
    with torch.no_grad():
        net.w.t_()
    assert restored.check(x) and guard.check(x)
