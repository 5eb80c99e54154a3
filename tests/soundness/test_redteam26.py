"""Red team h12red (issue 12): state the compiled code read, changed between calls. Differential: each
program runs eagerly and compiled over several calls with the same changes made before each call, and
the values, exceptions and the state observed after each call are compared."""
import pytest
import torch

import framejit


def _run(fn, inputs, before, after):
    """[(result or exception type, state after)] per call; before(k) changes the state before call k."""
    out = []
    for k, x in enumerate(inputs):
        before(k)
        try:
            result = fn(x)
        except Exception as e:  # noqa: BLE001 - compared with eager's
            result = type(e)
        out.append((result.tolist() if isinstance(result, torch.Tensor) else result, after()))
    return out


def _differential(make, backend="eager", calls=4):
    inputs = [torch.arange(k + 2, dtype=torch.float32) for k in range(calls)]
    fn, before, after = make()
    expected = _run(fn, inputs, before, after)
    framejit.reset()
    fn, before, after = make()
    got = _run(framejit.compile(fn, backend=backend), inputs, before, after)
    assert got == expected


# NOTE [Torch bindings on constants]: C bindings of torch._C given constants only change or read state.
_VMAP_WARN = (torch._C._debug_only_display_vmap_fallback_warnings, torch._C._debug_only_are_vmap_fallback_warnings_enabled)
_EXEC_OPT = (torch._C._set_graph_executor_optimize, torch._C._get_graph_executor_optimize)


def _vmap_display():
    set_, get = _VMAP_WARN
    return (lambda x: (set_(True), x + 1)[1]), lambda k: set_(False), get


def _graph_executor_getter_sets():
    set_, get = _EXEC_OPT
    return (lambda x: x + get(False)), lambda k: set_(True), get


def _vmap_display_after_break():
    set_, get = _VMAP_WARN

    def f(x):
        y = x + 1
        print("", end="")
        set_(True)
        return y * 2
    return f, lambda k: set_(False), get


@pytest.mark.parametrize("make", [_vmap_display, _graph_executor_getter_sets, _vmap_display_after_break],
                         ids=["no_verb_in_name", "getter_name_that_sets", "after_a_break"])
@pytest.mark.parametrize("backend", ["eager", "onnxrt"])
def test_torch_bindings_called_with_constants_run_on_every_call(make, backend):
    try:
        _differential(make, backend)
    finally:
        _VMAP_WARN[0](False)
        _EXEC_OPT[0](True)


def test_a_torch_module_called_with_new_tensors_compiles_once():
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    seen = framejit.stats()["graphs"]
    fast = framejit.compile(mha, backend="eager")
    for _ in range(3):
        x = torch.randn(2, 3, 8)
        torch.testing.assert_close(fast(x, x, x)[0], mha(x, x, x)[0])
    assert framejit.stats()["graphs"] - seen == 1


# NOTE [Patched tensor operators]: a tensor hashed as a set element or dict key reads Tensor.__hash__.
_TENSOR_HASH = torch.Tensor.__hash__


def _patch_hash_on_odd_calls(k):
    torch.Tensor.__hash__ = (lambda s: 7) if k % 2 else _TENSOR_HASH


def _global_dict_keyed_by_tensors():
    torch.Tensor.__hash__ = _TENSOR_HASH  # the table is built with torch's hash, as in the eager run
    w1, w2 = torch.ones(1), torch.zeros(1)
    table = {w1: 1, w2: 2}
    return (lambda x: x + table[w1] + table.get(w2, 10)), _patch_hash_on_odd_calls, lambda: None


def _set_of_tensors():
    def f(x):
        return x + len({x, x.clone()})

    def before(k):
        _patch_hash_on_odd_calls(k)
        torch.Tensor.__eq__ = (lambda a, b: True) if k % 2 else _TENSOR_EQ
    return f, before, lambda: None


def _hash_calls_counted():
    calls = []

    def counting(s):
        calls.append(1)
        return _TENSOR_HASH(s)

    def f(x):
        d = {}
        d[x] = 1
        return x + d[x]
    return f, lambda k: setattr(torch.Tensor, "__hash__", counting if k % 2 else _TENSOR_HASH), lambda: len(calls)


_TENSOR_EQ = torch.Tensor.__eq__


@pytest.mark.parametrize("make", [_global_dict_keyed_by_tensors, _set_of_tensors, _hash_calls_counted],
                         ids=["global_dict", "set_display", "dict_made_in_frame"])
def test_a_patched_tensor_hash_is_used_for_keys(make):
    try:
        _differential(make)
    finally:
        torch.Tensor.__hash__ = _TENSOR_HASH
        torch.Tensor.__eq__ = _TENSOR_EQ


def test_a_dict_keyed_by_parameters_compiles_once():
    torch.manual_seed(0)
    m = torch.nn.Linear(2, 2)
    scale = {m.weight: 2.0, m.bias: 3.0}
    seen = framejit.stats()["graphs"]
    fast = framejit.compile(lambda x: m(x) * sum(scale[p] for p in m.parameters()), backend="eager")
    for _ in range(3):
        x = torch.randn(3, 2)
        torch.testing.assert_close(fast(x), m(x) * 5.0)
    assert framejit.stats()["graphs"] - seen == 1


# NOTE [Graph targets pinned by identity]: graph code calls the torch objects the trace called.
_RELU = torch.relu
_C_GELU = torch._C._nn.gelu


def _patched_relu():
    def f(x):
        return torch.relu(x - 2) * 2

    def before(k):
        torch.relu = (lambda t: _RELU(t) + 100) if k in (1, 2) else _RELU
    return f, before, lambda: None


def _patched_binding_eager_never_reads():
    import torch.nn.functional as F  # F.gelu is torch._C._nn.gelu, bound when F was imported

    def before(k):
        torch._C._nn.gelu = (lambda t, approximate="none": _C_GELU(t) + 100) if k in (1, 2) else _C_GELU
    return (lambda x: F.gelu(x) + 1), before, lambda: None


# onnxrt with C_gelu is left: after a dynamic-shape recompile its lowering still calls the patch (report h12red)
@pytest.mark.parametrize("make, backend", [(_patched_relu, "eager"), (_patched_relu, "onnxrt"),
                                           (_patched_binding_eager_never_reads, "eager")],
                         ids=["torch_relu-eager", "torch_relu-onnxrt", "C_gelu-eager"])
def test_graphs_call_the_functions_the_trace_called(make, backend):
    try:
        _differential(make, backend)
    finally:
        torch.relu = _RELU
        torch._C._nn.gelu = _C_GELU
