"""Red team 22 (h12watch): changes to a module's weights that their version counters do not show (writes
through `.data` of an alias, a version put back, a swapped TensorImpl), and ordinary Python/torch state
changed between calls. Each test: eager vs compiled, several calls, state changed between calls."""
from __future__ import annotations

import gc
import warnings
import weakref

import pytest
import torch

import framejit
from framejit import tensor_watch


def _pair():
    torch.manual_seed(0)
    eager = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2))
    torch.manual_seed(0)
    compiled = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2))
    return eager, compiled


def _preserved_write(m):  # a write whose version is put back (NOTE [Uses counted per storage])
    with torch.autograd.grad_mode._unsafe_preserve_version_counter(m[0].weight):
        m[0].weight.mul_(-3)


_ALIAS_WRITES = {
    "view_data_mul": lambda m: m[0].weight.view(-1).data.mul_(0.5),
    "detach_data_fill": lambda m: m[0].weight.detach().data.fill_(0.25),
    "row_data_add": lambda m: m[0].weight[1].data.add_(2.0),
    "transposed_data_copy": lambda m: m[2].weight.t().data.copy_(torch.arange(6.0).reshape(3, 2)),
    "bias_unsqueezed_data": lambda m: m[2].bias.unsqueeze(0).data.mul_(-4),
    "preserved_version_write": _preserved_write,
}


@pytest.mark.parametrize("backend", ["onnxrt", "triton"])
@pytest.mark.parametrize("name", sorted(_ALIAS_WRITES))
def test_writes_through_an_alias_reach_the_compiled_weights(backend, name):
    # onnxrt freezes weights into its session and trusted "same object, same _version, no `.data` use of
    # that object": `.data` of a view or of a detached alias writes the same memory with neither, and
    # _unsafe_preserve_version_counter puts the version back after a write; the frozen session kept
    # serving the old weights (framejit before: the outputs of the unchanged model from the 3rd call on).
    eager, compiled = _pair()
    fast = framejit.compile(compiled, backend=backend)
    change = _ALIAS_WRITES[name]
    with torch.no_grad():
        for step in range(5):
            x = torch.randn(2 + step % 2, 4)
            torch.testing.assert_close(fast(x), eager(x))
            if step in (1, 3):
                change(eager)
                change(compiled)


def _swap_in(module, value):
    kept = torch.nn.Parameter(value, requires_grad=module[0].weight.requires_grad)
    torch.utils.swap_tensors(module[0].weight, kept)
    return kept


@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
@pytest.mark.parametrize("backend", ["eager", "onnxrt", "triton"])
def test_swap_tensors_of_a_parameter_after_compiled_calls(backend, grad, own_objects):
    # The trace's fake tensor mode (and onnxrt's make_fx and AOT autograd modes) kept a weak reference to
    # every real tensor it converted for as long as the compiled graph lived, and torch.utils.swap_tensors
    # refuses a tensor with one: after one compiled call, `swap_tensors(m[0].weight, p)` raised "Cannot swap
    # t1 because it has weakref associated with it" where eager swaps (NOTE [Traces leave no weak references]).
    eager, compiled = _pair()
    fast = framejit.compile(compiled, backend=backend)
    kept = []
    for step in range(5):
        x = torch.randn(3, 4)
        with torch.set_grad_enabled(grad):
            got, want = fast(x), eager(x)
        torch.testing.assert_close(got, want)
        if grad:
            got.sum().backward()
            want.sum().backward()
            torch.testing.assert_close(compiled[2].weight.grad, eager[2].weight.grad)
        if step in (1, 3):
            value = torch.full((3, 4), 0.1 * step) + torch.arange(12.0).reshape(3, 4) / 20
            gc.collect()
            assert weakref.getweakrefcount(compiled[0].weight) == 0
            kept += [_swap_in(eager, value.clone()), _swap_in(compiled, value.clone())]
    if grad:
        torch.testing.assert_close(compiled[0].weight.grad, eager[0].weight.grad)


def test_swap_tensors_with_the_same_version_reaches_frozen_weights():
    # the swapped-in TensorImpl reads the same version number as the one it replaces
    eager, compiled = _pair()
    fast = framejit.compile(compiled, backend="onnxrt")
    kept = []
    with torch.no_grad():
        for step in range(4):
            x = torch.randn(2, 4)
            torch.testing.assert_close(fast(x), eager(x))
            value = torch.randn(3, 4)
            for module in (eager, compiled):
                other = torch.nn.Parameter(value.clone())
                while other._version < module[0].weight._version:
                    other.add_(0)
                assert other._version == module[0].weight._version
                torch.utils.swap_tensors(module[0].weight, other)
                kept.append(other)


def test_a_storage_at_a_reused_address_is_not_taken_as_unchanged():
    # Counts are kept per StorageImpl address and outlive the storage; a later storage at the same address
    # starts from the old count. A user compares with what watch() returned for it, so a use after that is
    # seen, and a storage no longer watched answers -1 (never a count a user holds).
    for _ in range(2000):
        old = torch.ones(5)
        key = tensor_watch.watch(old)
        old.view(-1).data.mul_(2)
        old_key = old.untyped_storage()._cdata
        assert tensor_watch.uses(old) == key + 1
        del old
        new = torch.zeros(5)
        if new.untyped_storage()._cdata == old_key:
            break
    assert new.untyped_storage()._cdata == old_key  # the allocator reused the address
    count = tensor_watch.watch(new)
    assert count >= 1  # the stale count
    assert tensor_watch.uses(new) == count
    new.detach().data.fill_(3)
    assert tensor_watch.uses(new) != count
    tensor_watch.unwatch_all()
    assert tensor_watch.uses(new) == -1


def test_data_of_fake_tensors_while_a_storage_is_watched_warns_nothing():
    # `.data` is counted per storage: while a storage is watched, `.data` of the trace's fake tensors must
    # not read a fake's data pointer (torch warns "Accessing the data pointer of FakeTensor is deprecated
    # and will error").
    eager, compiled = _pair()
    tensor_watch.watch(eager[0].weight)

    def f(x, w):
        return x @ w.data.t() + w.detach().data.sum()

    fast = framejit.compile(f, backend="onnxrt")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for n in (2, 3):
            x = torch.randn(n, 4)
            torch.testing.assert_close(fast(x, compiled[0].weight), f(x, eager[0].weight))


def _held_data(m):
    return m[0].weight.data  # a tensor over the weight's storage with a version counter of its own


def _held_array(m):
    return m[0].weight.detach().numpy()


def _held_dlpack(m):
    m.requires_grad_(False)  # torch.from_dlpack refuses a tensor that requires grad
    return torch.from_dlpack(m[0].weight)  # a StorageImpl of its own over the weight's memory


_HELD_ALIASES = {
    "dlpack": (_held_dlpack, lambda d, step: d.mul_(0.5)),
    "data": (_held_data, lambda d, step: d.mul_(0.5)),
    "data_of_a_view": (lambda m: m[0].weight.view(-1).data, lambda d, step: d[step].add_(3.0)),
    "numpy": (_held_array, lambda a, step: a.__setitem__((0, step), 7.0)),
}


@pytest.mark.parametrize("backend", ["onnxrt", "triton"])
@pytest.mark.parametrize("name", sorted(_HELD_ALIASES))
def test_writes_through_an_alias_held_from_before_the_first_call(backend, name):
    # `d = w.data` taken before compiling (or a NumPy array over w, or torch.from_dlpack(w)) and written
    # in place later: no version and no `.data` use moves, and onnxrt's frozen session served the weights
    # it was made with (framejit before: the unchanged model's outputs from the 2nd call on). A storage
    # held by another object when the session is made is now fed, not frozen (NOTE [Weights whose storage
    # is held elsewhere are fed]).
    hold, write = _HELD_ALIASES[name]
    eager, compiled = _pair()
    held = hold(eager), hold(compiled)
    fast = framejit.compile(compiled, backend=backend)
    with torch.no_grad():
        for step in range(4):
            x = torch.randn(2, 4)
            torch.testing.assert_close(fast(x), eager(x))
            for alias in held:
                write(alias, step)


def test_a_weight_read_by_two_parts_stays_frozen_in_both():
    # the arrays a session's initializers are made over hold the weight's storage too; they are not
    # "held elsewhere" (another part's session freezing the same weight keeps freezing it)
    from framejit.backends.onnxrt import runtime
    parts = []
    original = runtime.OrtPart._make_session

    def spy(self, args, sub=None):
        original(self, args, sub)
        parts.append(self.frozen_positions)

    class Tied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(4, 4))

        def forward(self, x):
            y = torch.nn.functional.gelu((x @ self.w).relu())  # gelu runs in torch: two ORT parts
            return (y @ self.w).tanh()

    model = Tied()
    fast = framejit.compile(model, backend="onnxrt", options={"fallback_ops": ["aten::gelu"]})
    runtime.OrtPart._make_session = spy
    try:
        with torch.no_grad():
            for _ in range(3):
                x = torch.randn(2, 4)
                torch.testing.assert_close(fast(x), model(x))
    finally:
        runtime.OrtPart._make_session = original
    assert len(parts) == 2 and all(parts)  # two parts, each freezing the weight


_SWAPPING_CONVERSIONS = {
    "to_float64": lambda m, step: m.to(torch.float64 if step % 2 == 0 else torch.float32),
    "load_state_dict": lambda m, step: m.load_state_dict(
        {"0.weight": torch.full((3, 4), 0.1 * step), "0.bias": torch.ones(3), "2.weight": torch.ones(2, 3),
         "2.bias": torch.zeros(2)}),
}


@pytest.mark.parametrize("backend", ["eager", "onnxrt", "triton"])
@pytest.mark.parametrize("name", sorted(_SWAPPING_CONVERSIONS))
def test_module_conversions_that_swap_parameters_after_compiled_calls(backend, name):
    # under torch.__future__.set_swap_module_params_on_conversion(True), module.to() and load_state_dict
    # swap each parameter's TensorImpl with torch.utils.swap_tensors: after one compiled call they raised
    # "Cannot swap t1 because it has weakref associated with it" (NOTE [Traces leave no weak references])
    eager, compiled = _pair()
    fast = framejit.compile(compiled, backend=backend)
    convert = _SWAPPING_CONVERSIONS[name]
    dtype = torch.float32
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        with torch.no_grad():
            for step in range(4):
                x = torch.randn(2, 4, dtype=dtype)
                torch.testing.assert_close(fast(x), eager(x))
                convert(eager, step)
                convert(compiled, step)
                dtype = eager[0].weight.dtype
    finally:
        torch.__future__.set_swap_module_params_on_conversion(False)


class _LoggedMode(torch.overrides.TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.calls.append(getattr(func, "__name__", str(func)))
        return func(*args, **(kwargs or {}))


class _LoggedTensor(torch.Tensor):
    calls: list = []

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        cls.calls.append(getattr(func, "__name__", str(func)))
        return super().__torch_function__(func, types, args, kwargs or {})


def test_torch_functions_of_the_user_see_no_query_of_a_watched_storage():
    # `.data` is counted per storage while a storage is watched (an onnxrt part froze a weight): the
    # storage was read with untyped_storage(), which a user's TorchFunctionMode and a subclass's
    # __torch_function__ saw as a call eager never makes
    def f(x):
        return x.data * 2

    def calls(fn):
        with _LoggedMode() as mode:
            fn(torch.ones(3))
        _LoggedTensor.calls = []
        fn(torch.ones(3).as_subclass(_LoggedTensor))
        return mode.calls, _LoggedTensor.calls

    tensor_watch.unwatch_all()
    want = calls(f)  # nothing watched: the property only reads
    model = torch.nn.Linear(3, 2)
    with torch.no_grad():
        framejit.compile(model, backend="onnxrt")(torch.ones(1, 3))
    assert tensor_watch._USES  # a frozen weight is watched
    assert calls(f) == want
    assert calls(framejit.compile(f, backend="eager")) == want


@pytest.mark.parametrize("backend", ["onnxrt", "triton"])
def test_writes_through_a_tensor_whose_data_was_set_to_a_weight(backend):
    # `holder.data = w` after the weight was frozen: holder then writes w's memory with its own version
    # counter; the `.data` store was counted for holder's old storage only, and onnxrt's frozen session
    # served the old weights (framejit before: wrong from the 3rd call on)
    eager, compiled = _pair()
    fast = framejit.compile(compiled, backend=backend)
    holders = [torch.zeros(3, 4), torch.zeros(3, 4)]
    with torch.no_grad():
        for step in range(5):
            x = torch.randn(2, 4)
            torch.testing.assert_close(fast(x), eager(x))
            if step == 0:
                holders[0].data, holders[1].data = eager[0].weight, compiled[0].weight
            else:
                for holder in holders:
                    holder.mul_(0.5)
