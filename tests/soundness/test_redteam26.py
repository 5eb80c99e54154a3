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
