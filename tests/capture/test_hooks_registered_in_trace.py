"""Module hooks registered inside a compiled frame (issue 11; NOTE [Hooks registered in the trace]).

`module.register_forward_hook(hook)` called while tracing made a RemovableHandle, whose `__init__` broke at
`weakref.ref(hooks_dict)`; transformers registers its output-capturing hooks that way from inside forward
(tests/models/hf/test_hf_call_modes.py covers the real thing). Each program here runs eagerly on one
module and compiled (fullgraph: no break) on an identical twin, over several calls, and compares the
outputs, the hooks each module holds afterwards (their order, kwargs and always-called flags), what a plain
call of the module gives after the compiled call (the hooks exist, as in eager) and the handles.
"""
from __future__ import annotations

import weakref

import pytest
import torch
from torch.utils.hooks import RemovableHandle

import framejit
from tests.helpers import CountingBackend


def _twins():
    torch.manual_seed(0)
    a = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 3))
    torch.manual_seed(0)
    b = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 3))
    return a, b


def _hook_state(model: torch.nn.Module) -> list:
    """Per submodule: the hook dicts' keys relative to the smallest id in the model, and the hook functions."""
    tables = ("_forward_hooks", "_forward_pre_hooks", "_forward_hooks_with_kwargs", "_forward_pre_hooks_with_kwargs",
              "_forward_hooks_always_called")
    ids = [i for m in model.modules() for t in tables for i in getattr(m, t)]
    base = min(ids, default=0)
    return [(name, t, [(i - base, getattr(m, t)[i]) for i in getattr(m, t)])
            for name, m in model.named_modules() for t in tables]


def double(module, args, output):
    return output * 2


def shift(module, args):
    return (args[0] + 1,)


def scale_kw(module, args, kwargs):
    return (args[0] * 3,), kwargs


def add_kw(module, args, kwargs, output):
    return output - 0.5


def _run_twins(program, calls: int = 3):
    """`program(model, x)` eagerly and compiled over `calls` calls; after each, a plain call of the module and
    a call through `framejit.compile(model)`, compiled before the first call, see the same hooks as eager."""
    eager_model, model = _twins()
    backend = CountingBackend()
    compiled = framejit.compile(program, backend=backend, fullgraph=True)
    compiled_model = framejit.compile(model, backend="eager")
    x = torch.randn(2, 4)
    torch.testing.assert_close(compiled_model(x), eager_model(x))
    for seed in range(calls):
        x = torch.randn(2, 4, generator=torch.Generator().manual_seed(seed))
        expected = program(eager_model, x)
        got = compiled(model, x)
        torch.testing.assert_close(got[0], expected[0])
        assert _hook_state(model) == _hook_state(eager_model)
        torch.testing.assert_close(model(x), eager_model(x))  # the hooks exist after the call, as in eager
        torch.testing.assert_close(compiled_model(x), eager_model(x))  # its hook-dict guards see them
    return backend, eager_model, model


def test_a_hook_registered_once_is_seen_by_the_same_and_later_calls():
    def program(model, x):
        if not getattr(model, "hooked", False):
            model[0].register_forward_hook(double)
            model[2].register_forward_pre_hook(shift)
            model.hooked = True
        return (model(x),)

    backend, _, _ = _run_twins(program)
    assert backend.graph_count == 2  # the call that registers, and the calls after it (the guard on `hooked`)


def test_hooks_on_every_child_of_a_walk_are_captured_in_one_graph():
    """transformers' recursively_install_hooks: a hook per child while drawing named_children()."""
    def install(module):
        for name, child in module.named_children():
            install(child)
            if isinstance(child, torch.nn.Linear):
                child.register_forward_hook(double)

    def program(model, x):
        if not getattr(model, "hooked", False):
            install(model)
            model.hooked = True
        return (model(x),)

    backend, _, _ = _run_twins(program)
    assert backend.graph_count == 2


@pytest.mark.parametrize("options", [dict(prepend=True), dict(with_kwargs=True), dict(always_call=True)])
def test_hook_options_order_kwargs_and_always_called(options):
    def program(model, x):
        if not getattr(model, "hooked", False):
            model[0].register_forward_hook(double)
            kw = options.get("with_kwargs", False)
            model[0].register_forward_hook(add_kw if kw else (lambda m, a, o: o - 0.5), **options)
            model[0].register_forward_pre_hook(shift)
            model[0].register_forward_pre_hook(scale_kw if kw else (lambda m, a: (a[0] * 3,)),
                                               **{k: v for k, v in options.items() if k != "always_call"})
            model.hooked = True
        return (model(x),)

    eager_model, model = _twins()
    compiled = framejit.compile(program, backend=CountingBackend(), fullgraph=True)
    for seed in range(3):
        x = torch.randn(2, 4, generator=torch.Generator().manual_seed(seed))
        torch.testing.assert_close(compiled(model, x)[0], program(eager_model, x)[0])
        torch.testing.assert_close(model(x), eager_model(x))
        for table in ("_forward_hooks", "_forward_pre_hooks", "_forward_hooks_with_kwargs",
                      "_forward_pre_hooks_with_kwargs", "_forward_hooks_always_called"):
            got, want = getattr(model[0], table), getattr(eager_model[0], table)
            assert [type(v) for v in got.values()] == [type(v) for v in want.values()], table
            assert len(got) == len(want), table


def test_the_handle_removes_the_hook_and_its_ids_follow_the_counter():
    def program(model, x):
        handle = model[0].register_forward_hook(double)
        y = model(x)
        return y, handle

    eager_model, model = _twins()
    compiled = framejit.compile(program, backend=CountingBackend(), fullgraph=True)
    x = torch.randn(2, 4)
    start = RemovableHandle.next_id
    want, eager_handle = program(eager_model, x)
    got, handle = compiled(model, x)
    torch.testing.assert_close(got, want)
    assert handle.id == eager_handle.id + 1 == RemovableHandle.next_id - 1 == start + 1
    assert handle.hooks_dict_ref() is model[0]._forward_hooks and list(model[0]._forward_hooks) == [handle.id]
    assert [r() for r in handle.extra_dict_ref] == [model[0]._forward_hooks_with_kwargs,
                                                   model[0]._forward_hooks_always_called]
    handle.remove()
    eager_handle.remove()
    assert not model[0]._forward_hooks and not eager_model[0]._forward_hooks
    torch.testing.assert_close(model(x), eager_model(x))


def test_a_hook_registered_and_removed_in_every_call():
    def program(model, x):
        handle = model[2].register_forward_hook(double)
        y = model(x)
        handle.remove()
        return (y + model(x),)

    _run_twins(program, calls=2)


def test_weakref_ref_in_the_trace():
    class Box:
        pass

    def program(box, x):
        ref = weakref.ref(box)
        try:
            weakref.ref([x])
        except TypeError as e:
            message = str(e)
        return x + 1, ref() is box, ref, message

    box = Box()
    backend = CountingBackend()
    got = framejit.compile(program, backend=backend, fullgraph=True)(box, torch.ones(2))
    want = program(box, torch.ones(2))
    assert got[1:2] == want[1:2] and got[3] == want[3] and got[2]() is box
    assert backend.graph_count == 1


class _SelfHooking(torch.nn.Module):
    """Registers a forward hook on itself in its first forward (or in a pre hook: `in_pre_hook`)."""

    def __init__(self, in_pre_hook: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(4, 4)
        self.in_pre_hook = in_pre_hook
        self.register_forward_pre_hook(self._pre)

    def _pre(self, module, args):
        if self.in_pre_hook:
            self._register()
        return (args[0] + 1,)

    def _register(self):
        if not getattr(self, "hooked", False):
            self.register_forward_hook(double)
            self.hooked = True

    def forward(self, x):
        if not self.in_pre_hook:
            self._register()
        return self.lin(x)


@pytest.mark.parametrize("in_pre_hook", [False, True], ids=["by_forward", "by_a_pre_hook"])
def test_a_forward_hook_registered_during_the_call_runs_in_that_call(in_pre_hook):
    """torch reads the forward hooks after forward (Module._call_impl): a hook registered by forward or by a
    pre hook runs in the same call. framejit read them when the call started (NOTE [Module hooks])."""
    eager_model, model = _SelfHooking(in_pre_hook), _SelfHooking(in_pre_hook)
    backend = CountingBackend()
    compiled = framejit.compile(lambda m, x: m(x), backend=backend, fullgraph=True)
    for seed in range(3):
        x = torch.randn(2, 4, generator=torch.Generator().manual_seed(seed))
        torch.testing.assert_close(compiled(model, x), eager_model(x))
    assert backend.graph_count == 2
