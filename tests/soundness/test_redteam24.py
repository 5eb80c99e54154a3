"""Red team 24 (h12red3): torch state changed by library functions framejit reads as opaque, hook dicts read by
literal keys, and ordinary Python state changed between calls. Each test: eager vs compiled, several calls,
the state changed between calls."""
from __future__ import annotations

import pytest
import torch
import torch.backends.cuda as cuda_backend

import framejit

_SPARSE = torch.sparse.check_sparse_tensor_invariants

# (change the state, restore it, read it): each change is a torch function without a set_/use_ prefix
_CHANGERS = {
    "enable_onednn_fusion": (lambda: torch.jit.enable_onednn_fusion(True), lambda: torch.jit.enable_onednn_fusion(False),
                             torch.jit.onednn_fusion_enabled),
    "sparse_invariants_enable": (_SPARSE.enable, _SPARSE.disable, _SPARSE.is_enabled),
    "sparse_invariants_disable": (_SPARSE.disable, _SPARSE.enable, _SPARSE.is_enabled),
    "allow_fp16_bf16_reduction_math_sdp": (lambda: cuda_backend.allow_fp16_bf16_reduction_math_sdp(True),
                                           lambda: cuda_backend.allow_fp16_bf16_reduction_math_sdp(False),
                                           cuda_backend.fp16_bf16_reduction_math_sdp_allowed),
    "jit_override_can_fuse_on_cpu": (lambda: torch._C._jit_override_can_fuse_on_cpu(True),
                                     lambda: torch._C._jit_override_can_fuse_on_cpu(False),
                                     torch._C._jit_can_fuse_on_cpu),
}


@pytest.mark.parametrize("name", sorted(_CHANGERS))
def test_a_torch_state_change_runs_on_every_call(name):
    # the change ran once, while tracing, and its None was folded: after the state was restored between
    # calls, a compiled call that hit the entry left it restored (eager: changed again by every call)
    change, restore, read = _CHANGERS[name]

    def f(x):
        change()
        return x + 1

    restore()
    change()
    changed = read()
    restore()
    assert read() != changed
    fast = framejit.compile(f, backend="eager")
    try:
        for step in range(4):
            for fn in (f, fast):
                restore()
                x = torch.full((3,), float(step))
                torch.testing.assert_close(fn(x), x + 1)
                assert read() == changed, (name, step, fn)
    finally:
        restore()


@pytest.mark.parametrize("name", sorted(_CHANGERS))
def test_a_torch_state_read_is_guarded(name):
    # `torch._C._jit_can_fuse_on_cpu()` and `fp16_bf16_reduction_math_sdp_allowed()` did not read as getters:
    # their answer at trace time was folded, unguarded
    change, restore, read = _CHANGERS[name]

    def f(x):
        return x + 1, read()

    fast = framejit.compile(f, backend="eager")
    try:
        for step in range(5):
            (change if step % 2 else restore)()
            x = torch.full((2,), float(step))
            expected = f(x)
            got = fast(x)
            torch.testing.assert_close(got[0], expected[0])
            assert got[1] == expected[1], (name, step)
    finally:
        restore()


def test_a_second_dual_level_raises_as_eager():
    # enter_dual_level() ran once while tracing; the 2nd compiled call returned normally where eager raises
    # RuntimeError (nested forward AD), and the dual level count was left one short
    fad = torch.autograd.forward_ad

    def f(x):
        fad.enter_dual_level()
        return x * 2

    def outcomes(fn):
        seen = []
        try:
            for step in range(3):
                try:
                    seen.append(fn(torch.full((2,), float(step))).tolist())
                except RuntimeError as e:
                    seen.append(type(e).__name__)
                seen.append(fad._current_level)
        finally:
            while fad._current_level >= 0:
                fad.exit_dual_level()
        return seen

    expected = outcomes(f)
    assert outcomes(framejit.compile(f, backend="eager")) == expected


# ---- hook ids guessed as literals (NOTE [Hook ids that never leave the trace])

_LOOKUPS = {
    "in": "{ID} in lin._forward_hooks",
    "get": "lin._forward_hooks.get({ID}) is None",
    "pop": "lin._forward_hooks.pop({ID}, None) is None",
    "in_a_copy": "{ID} in dict(lin._forward_hooks)",
    "in_hooks_dict_ref": "{ID} in h.hooks_dict_ref()",
}


@pytest.mark.parametrize("name", sorted(_LOOKUPS))
def test_a_hook_id_guessed_as_a_literal_is_this_calls_id(name):
    # a frame that registers a hook, calls the module and removes the hook drops the next_id guard when no id
    # outlives the trace; a literal equal to the id the 2nd call hands out was looked up in the outside dict,
    # whose guard `ID in d` is checked before the call registers the hook: absent on every compiled call
    # (eager: present on the 2nd call)
    from torch.utils.hooks import RemovableHandle
    lin = torch.nn.Linear(3, 3)

    def hook(m, i, o):
        return o * 2

    def outcomes(compiled):
        ident = RemovableHandle.next_id + 1  # the id the 2nd call's handle gets
        ns = {"lin": lin, "hook": hook}
        exec("def f(x):\n    h = lin.register_forward_hook(hook)\n    y = lin(x)\n"
             f"    r = {_LOOKUPS[name].format(ID=ident)}\n    h.remove()\n    return y, r\n", ns)
        fn = framejit.compile(ns["f"], backend="eager") if compiled else ns["f"]
        seen = []
        for step in range(4):
            y, r = fn(torch.full((2, 3), float(step)))
            seen.append((y.detach().sum().item(), r))
        return seen

    assert outcomes(True) == outcomes(False)


# ---- the frames above a compiled function that reads the frame stack (NOTE [Frame readers called directly])

def _frames_seen(x):
    import inspect
    import sys
    import traceback
    caller = sys._getframe(1)
    return x * 2, caller.f_code.co_name, caller.f_lineno, len(inspect.stack()), len(traceback.extract_stack())


def _call_from_here(fn, x):
    return fn(x)


class _Reader:
    def read(self, x):
        import sys
        caller = sys._getframe(1)
        return x + 1, caller.f_code.co_name, caller.f_lineno


@pytest.mark.parametrize("how", ["function", "bound_method"])
def test_a_frame_reader_sees_its_callers_frame(how):
    # such a function always runs eagerly, but one or two hook frames (FrameHook.__call__, miss) sat between it
    # and its caller: sys._getframe(1) named 'miss' then '__call__' (eager: the caller), and the stack was 2, 1
    # frames deeper
    if how == "function":
        eager, fast = _frames_seen, framejit.compile(_frames_seen, backend="eager")
    else:
        eager, fast = _Reader().read, framejit.compile(_Reader().read, backend="eager")
    for step in range(3):
        x = torch.full((step + 1,), float(step))
        expected, got = _call_from_here(eager, x), _call_from_here(fast, x)
        torch.testing.assert_close(got[0], expected[0])
        assert got[1:] == expected[1:], step


def test_explain_still_reports_a_frame_reader_break():
    report = framejit.explain(_frames_seen)(torch.ones(2))
    assert report.graph_break_count == 1 and report.graph_count == 0


# ---- descriptors written in Python whose kind changes (NOTE [Data descriptors written in Python])

def _descriptor_program(change):
    class Field:
        def __get__(self, obj, cls):
            return 3

        def __set__(self, obj, value):
            pass

    class Lazy:
        def __get__(self, obj, cls):
            return 4

    class A:
        v = Field()
        w = Lazy()

    a = A()
    a.__dict__["w"] = 5  # a non-data descriptor loses to the instance dict

    def f(x):
        return x + a.v, x * a.w

    def between(step):
        if step == 1:
            change(Field, Lazy, a)

    return f, between


def _stop_being_data(field, lazy, a):
    del field.__set__
    a.__dict__["v"] = 9


def _shadow_then_stop_being_data(field, lazy, a):
    a.__dict__["v"] = 9
    del field.__set__


def _become_data(field, lazy, a):
    lazy.__set__ = lambda self, obj, value: None


def _become_data_by_delete(field, lazy, a):
    lazy.__delete__ = lambda self, obj: None


@pytest.mark.parametrize("change", [_stop_being_data, _shadow_then_stop_being_data, _become_data,
                                    _become_data_by_delete])
def test_a_descriptor_that_changes_kind_is_looked_up_again(change):
    # a data descriptor wins over the instance dict, a non-data one loses to it; only its __get__ was guarded,
    # so after `del Field.__set__` (and a.__dict__['v'] = 9) the compiled entry kept answering 3 (eager 9)
    results = []
    for compiled in (False, True):
        f, between = _descriptor_program(change)
        fn = framejit.compile(f, backend="eager") if compiled else f
        seen = []
        for step in range(4):
            between(step)
            seen.append([t.tolist() for t in fn(torch.ones(2))])
        results.append(seen)
    assert results[1] == results[0]


# ---- patched Tensor operators (NOTE [Patched tensor operators])

_OPERATOR_PATCHES = {  # (name on torch.Tensor, program): a few ops around it, so the frame makes a graph
    "__add__": (lambda x: (x.sin() + 1).cos()),
    "__radd__": (lambda x: (1 + x.sin()).cos()),
    "__mul__": (lambda x: (x.sin() * x).cos()),
    "__iadd__": (lambda x: _iadd(x)),
    "__lt__": (lambda x: (x.sin() < 0.5).float().cos()),
    "__gt__": (lambda x: (0.5 < x.sin()).float().cos()),
    "__neg__": (lambda x: (-x.sin()).cos()),
    "__abs__": (lambda x: abs(x.sin() - 2).cos()),
}


def _iadd(x):
    y = x.sin()
    y += 1
    return y.cos()


@pytest.mark.parametrize("backend", ["eager", "onnxrt"])
@pytest.mark.parametrize("name", sorted(_OPERATOR_PATCHES))
def test_a_patched_tensor_operator_is_called(name, backend):
    # `x + 1` was recorded as operator.add without reading torch.Tensor.__add__: a patch made after the first
    # call was seen only by the eager backend's graph (onnxrt: the real add), and nothing was guarded
    f = _OPERATOR_PATCHES[name]
    had = name in torch.Tensor.__dict__
    original = torch.Tensor.__dict__.get(name)
    base = getattr(torch.Tensor, name)

    def patched(self, *other):
        return base(self, *other).mul(10)

    fast = framejit.compile(f, backend=backend)
    try:
        for step in range(4):
            if step == 1:
                setattr(torch.Tensor, name, patched)
            elif step == 3:
                if had:
                    setattr(torch.Tensor, name, original)
                else:
                    delattr(torch.Tensor, name)
            x = torch.full((1,), float(step))  # one element: onnxrt runs the graph in its session
            torch.testing.assert_close(fast(x), f(x))
    finally:
        if had:
            setattr(torch.Tensor, name, original)
        elif name in torch.Tensor.__dict__:
            delattr(torch.Tensor, name)
