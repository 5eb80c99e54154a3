"""`warnings.warn` and logging calls with stacklevel >= 2 in compiled code name the frame eager names
(NOTE [Warnings past the hook], [Module calls past the hook], [Logging past the hook] in
capture/caller_frames.py): a compiled module's forward is two frames below its caller in eager (torch's
Module._wrapped_call_impl and _call_impl), a break's call through framejit's frame hook is not.
Differential: the same caller line calls the eager and the compiled callable, on inputs of changing
sizes; warnings' (filename, lineno, module) and records' (pathname, lineno, funcName) must be eager's."""
from __future__ import annotations

import logging
import warnings

import functorch
import pytest
import torch

import framejit
from tests.helpers import CountingBackend, LogRecords

_LOG = logging.getLogger("framejit_test_warning_levels")


_Records = LogRecords


def _caller(f, x):
    return f(x)  # the user's line both runs share


def _observe(f, x, action="always"):
    """(output, warnings as (file, line, module, message), log records) of one call of f from _caller."""
    handler = _Records()
    _LOG.addHandler(handler)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter(action)
            out = _caller(f, x)
    finally:
        _LOG.removeHandler(handler)
        root.removeHandler(handler)
    shown = [(w.filename, w.lineno, str(w.message)) for w in caught]
    return out, shown, handler.records


def _differential(make, sizes=(3, 5, 4), action="always"):
    """Runs eager and compiled modules/functions made by make() on the same inputs; returns the backend."""
    backend = CountingBackend()
    eager = make()
    compiled = framejit.compile(make(), backend=backend)
    for size in sizes:
        x = torch.randn(size)
        want = _observe(eager, x, action)
        got = _observe(compiled, x, action)
        assert torch.equal(got[0], want[0])
        assert got[1] == want[1], (size, got[1], want[1])
        assert got[2] == want[2], (size, got[2], want[2])
        assert want[1] or want[2]
    return backend


class _Warns(torch.nn.Module):
    def __init__(self, level: int) -> None:
        super().__init__()
        self.level = level

    def forward(self, x):
        warnings.warn("from forward", stacklevel=self.level)
        _LOG.warning("record from forward", stacklevel=self.level)
        return x * 2


@pytest.mark.parametrize("level", [2, 3, 4, 5])
def test_a_compiled_modules_forward_names_torchs_frames_and_the_caller(level):
    # before: level 2 named the caller (_caller's line) and hook.py's miss/__call__ for the record, level 3
    # and 4 ('sys', 1) and hook.py
    _differential(lambda: _Warns(level))


class _Outer(torch.nn.Module):
    def __init__(self, level: int) -> None:
        super().__init__()
        self.inner = _Warns(level)

    def forward(self, x):
        y = self.inner(x + 1)
        return y - 1


@pytest.mark.parametrize("level", [2, 3, 4, 6, 7])
def test_a_submodule_called_at_a_break_names_torchs_frames(level):
    _differential(lambda: _Outer(level))


class _ListOfWarns(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList([_Warns(2), _Warns(3), _Warns(4)])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def test_submodules_in_a_loop_name_torchs_frames():
    _differential(_ListOfWarns)


class _WarnsAfterABreak(torch.nn.Module):
    def forward(self, x):
        y = x.sin()
        print("", end="")
        warnings.warn("after the break", stacklevel=2)
        z = y.cos()
        print("", end="")
        _LOG.warning("after two breaks", stacklevel=3)
        return z


def test_a_resume_function_of_forward_stands_for_forward():
    backend = _differential(_WarnsAfterABreak)
    assert backend.graph_count >= 3


class _WarnsInNoGrad(torch.nn.Module):
    def forward(self, x):
        with torch.no_grad():
            y = x * 3
            warnings.warn("in no_grad", stacklevel=2)
            _LOG.info("not shown")
            _LOG.error("in no_grad %d", 7, stacklevel=3)
        return y


def test_calls_in_a_with_block_of_forward():
    _differential(_WarnsInNoGrad)


def _helper_that_warns(x, level):
    warnings.warn("from helper", stacklevel=level)
    _LOG.warning("helper record", stacklevel=level)
    return x + 1


def _calls_helper(x):
    return _helper_that_warns(x, 2) * _helper_that_warns(x, 3)


def test_a_compiled_function_and_its_helper():
    _differential(lambda: _calls_helper)


class _LogVariants(torch.nn.Module):
    def forward(self, x):
        logging.LoggerAdapter(_LOG, {}).warning("adapter", stacklevel=2)
        _LOG.log(logging.WARNING, "log(level)", stacklevel=3)
        _LOG.warning("exact %s", "args", stacklevel=2)
        logging.warning("root function")
        return x - 1


def test_logger_adapter_log_and_module_functions():
    _differential(_LogVariants)


class _WarnsOnce(torch.nn.Module):
    def forward(self, x):
        warnings.warn("once per location", stacklevel=2)
        return x * 2


def _shown_per_call(f, sizes):
    """The warnings each call shows under the default filter, registry kept across the calls."""
    shown = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        for size in sizes:
            before = len(caught)
            _caller(f, torch.randn(size))
            shown.append([(w.filename, w.lineno, w.category) for w in caught[before:]])
    return shown


def test_the_default_filter_shows_a_warning_once_per_eager_location():
    # the registry is that of the location's module (module.py's): the second call shows nothing
    import torch.nn.modules.module as module_py
    backend = CountingBackend()
    compiled = framejit.compile(_WarnsOnce(), backend=backend)
    sizes = (3, 5, 4)
    assert _shown_per_call(compiled, sizes) == _shown_per_call(_WarnsOnce(), sizes) == \
        [[(module_py.__file__, _LINE_OF_FORWARD_CALL, UserWarning)], [], []]
    assert backend.graph_count >= 1


_LINE_OF_FORWARD_CALL = next(i for i, line in enumerate(open(torch.nn.modules.module.__file__), 1)
                             if line.strip().startswith("return forward_call("))


def _hook_warns(name, level):
    def hook(*args):
        warnings.warn(name, stacklevel=level)
        _LOG.warning("record from %s", name, stacklevel=level)
    return hook


def _with_hooks(level, always=False, backward=False):
    module = _Warns(level)
    module.register_forward_pre_hook(_hook_warns("pre", level))
    module.register_forward_pre_hook(_hook_warns("pre with kwargs", level), with_kwargs=True)
    module.register_forward_hook(_hook_warns("post", level), always_call=always)
    module.register_forward_hook(_hook_warns("post with kwargs", level), with_kwargs=True)
    if backward:
        module.register_full_backward_hook(lambda m, gi, go: None)
    return module


@pytest.mark.parametrize("level", [2, 3, 4, 5])
def test_a_module_with_hooks_names_torchs_three_levels(level):
    # eager: the hook or forward is called by _call_impl's `inner` (at the line of that call), which
    # `return inner()` calls, which _wrapped_call_impl calls; before: the caller at level 2, ('sys', 1) after
    _differential(lambda: _with_hooks(level))


class _OuterWithHooked(torch.nn.Module):
    def __init__(self, level, **kw) -> None:
        super().__init__()
        self.inner = _with_hooks(level, **kw)

    def forward(self, x):
        return self.inner(x * 2) + 1


@pytest.mark.parametrize("kw", [{}, {"always": True}, {"backward": True}], ids=["hooks", "always_call", "backward"])
@pytest.mark.parametrize("level", [2, 3, 5])
def test_a_submodule_with_hooks_called_at_a_break(level, kw):
    def make():
        module = _OuterWithHooked(level, **kw)
        return (lambda x: module(x.requires_grad_())) if kw.get("backward") else module
    _differential(make)


# ---- warnings of the ops in a graph (NOTE [Warnings of graph ops] in capture/op_warnings.py) --------------
def _op_warns(x):
    y = torch.tensor(x) + 1                          # C++ TORCH_WARN: "To copy construct from a tensor"
    z = torch.nn.functional.softmax(y) * 2           # Python warnings.warn(stacklevel=3) inside F.softmax
    return z + torch.range(0, x.shape[0] - 1).sum()  # a deprecation


def _std_of_rows(x):
    return x.std(0) + 1  # one row: "degrees of freedom is <= 0", which the fake (meta) kernel does not see


def _vmap_deprecated(x):
    return functorch.vmap(torch.sum)(x) + 1  # functorch's FutureWarning: a call folded out of the graph


def _writes_then_warns(x):
    x.add_(1)
    return torch.tensor(x) * 3  # under "error" eager raises here, after the write


def _observed_calls(f, action, sizes, hook=False):
    """[(result or exception, the input's sum after the call, warnings the call showed)] of calls under
    `action`, with one registry state across the calls."""
    out, shown = [], []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter(action)
        if hook:  # a replaced showwarning sees every warning (as logging.captureWarnings does)
            warnings.showwarning = lambda m, c, f, n, *a: shown.append((f, n, c, str(m)[:40]))
        for size in sizes:
            x = torch.arange(float(size * 3)).reshape(size, 3)
            try:
                got = str(_caller(f, x).sum().item())
            except Exception as e:  # the "error" filter
                got = (type(e), str(e)[:40])
            shown.extend((w.filename, w.lineno, w.category, str(w.message)[:40]) for w in caught)
            out.append((got, x.sum().item(), list(shown)))
            shown.clear()
            caught.clear()
    return out


@pytest.mark.parametrize("action, backend", [("default", "counting"), ("always", "counting"), ("error", "counting"),
                                             ("hook", "counting"), ("always", "onnxrt"), ("error", "onnxrt")])
def test_op_warnings_of_a_graph_show_as_in_eager(action, backend):
    # before: each op's fake run warned at the trace from framejit/capture/graph.py, the eager backend's
    # graph again from `<eval_with_key>` (x.std(0) of one row only from there), onnxrt on no later call;
    # functorch's FutureWarning never showed; "error" raised at the trace, from framejit's file
    counting = CountingBackend()
    hook, action = action == "hook", "default" if action == "hook" else action
    cases = [(_op_warns, (1, 1, 2)), (_vmap_deprecated, (2, 3)), (_writes_then_warns, (2, 2))]
    for fn, sizes in cases + [(_std_of_rows, (1, 1))] * (backend == "counting"):
        compiled = framejit.compile(fn, backend=counting if backend == "counting" else "onnxrt", fullgraph=True)
        assert _observed_calls(compiled, action, sizes, hook) == _observed_calls(fn, action, sizes, hook), fn
    assert backend != "counting" or action == "error" or counting.graph_count == 6  # no break: one graph per
    # function, and a recompile of the first two for the size change


class _TwoArgWarning(UserWarning):
    def __init__(self, text, code):
        super().__init__(text, code)


@torch.library.custom_op("framejit_test::warns_two_args", mutates_args=())
def _warns_two_args(x: torch.Tensor) -> torch.Tensor:
    warnings.warn(_TwoArgWarning("two", 2))
    return x * 2


@_warns_two_args.register_fake
def _(x):
    warnings.warn(_TwoArgWarning("two", 2))
    return torch.empty_like(x)


def _writes_then_custom_warning(x):
    x.add_(1)
    return _warns_two_args(x) + 1


def test_a_warning_class_with_other_init_arguments_is_replayed_as_it_is():
    # review revD HIGH-1: the replay rebuilt the warning from its text (`_TwoArgWarning(str)`): a TypeError from
    # every onnxrt call, the write before it lost. Review revD MED-6: the fake implementation's warning was
    # replayed (from its line) and shown by onnxrt's compile, and the real op, run by torch, warned too.
    for action in ("always", "default"):
        compiled = framejit.compile(_writes_then_custom_warning, backend="onnxrt")
        shown = []
        for f in (_writes_then_custom_warning, compiled, compiled):
            x = torch.ones(3)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter(action)
                out = f(x)
            torch.testing.assert_close(out, torch.full((3,), 5.0))
            assert x.sum().item() == 6.0
            shown.append([(w.category, str(w.message), w.filename, w.lineno) for w in caught])
        assert shown[0] and shown[1] == shown[2] == shown[0], action


def _warns_then_indexes(x, i):
    y = torch.nn.functional.softmax(x) * 2  # warns, then the graph raises at y[i] for i out of range
    return y[i] + 1


def _calls_of_a_graph_that_raises(f, action):
    """[(value or exception, warnings as (category, text, file, line))] of calls whose graph raises on odd calls."""
    out = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter(action)
        for i in (0, 5, 1, 7):
            try:
                got = f(torch.ones(2, 3), torch.tensor([i])).sum().item()
            except IndexError as e:
                got = str(e)
            out.append((got, [(w.category, str(w.message), w.filename, w.lineno) for w in caught]))
            caught.clear()
    return out


@pytest.mark.parametrize("backend", ["counting", "onnxrt"])
def test_a_graph_that_raises_shows_its_warnings_once_in_the_eager_rerun(backend):
    # review revD MED-5: the graph's located code (eager backend) or replay (onnxrt) showed the softmax warning,
    # then the graph raised and the eager rerun showed it again; onnxrt's torch run after its failed ORT run
    # showed it a third time (from `<eval_with_key>`), and on every later call
    for action in ("always", "default"):
        compiled = framejit.compile(_warns_then_indexes, backend=CountingBackend() if backend == "counting" else backend)
        assert _calls_of_a_graph_that_raises(compiled, action) == _calls_of_a_graph_that_raises(_warns_then_indexes, action)


class _SoftmaxOfLinear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(3, 3)

    def forward(self, x):
        return torch.nn.functional.softmax(self.linear(x)).sum()  # warns; the weights need grad: onnxrt's joint


def _calls_of_a_training_graph(f, action):
    out = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter(action)
        for size in (2, 2, 2):
            out.append((round(_caller(f, torch.ones(size, 3)).item(), 4),
                        [(w.category, str(w.message), w.filename, w.lineno) for w in caught]))
            caught.clear()
    return out


def test_a_training_graphs_warnings_show_as_in_eager_on_onnxrt():
    # review revD MED-2: onnxrt's joint (built at the first call that needs grad) ran the graph's ops again:
    # 3 more softmax warnings (`<eval_with_key>`, backends/torch_methods.py) on the first call, and its
    # catch_warnings() emptied the registries, so under "default" the second call replayed it again
    module = _SoftmaxOfLinear()
    compiled = framejit.compile(module, backend="onnxrt")
    assert _calls_of_a_training_graph(compiled, "default") == _calls_of_a_training_graph(module, "default")


def _transposes_3d(x):
    return x.T.sum() + torch.nn.functional.softmax(x.sum(0)).sum()  # x.T of 3 dims: a TORCH_WARN_ONCE


def test_a_spent_torch_warn_once_is_not_shown_again_by_the_backend_compile():
    # review revD MED-3: onnxrt's compile ran with torch's warn-always on, so the x.T once, spent by eager before
    # the compile, showed again from backends/torch_methods.py
    with warnings.catch_warnings(record=True):
        torch.ones(2, 2, 2).T  # spent in this process, whatever ran before
    compiled = framejit.compile(_transposes_3d, backend="onnxrt")
    for action in ("always", "default"):
        shown = []
        for f in (_transposes_3d, compiled, compiled):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter(action)
                out = _caller(f, torch.ones(2, 3, 4)).item()
            shown.append((out, [(w.category, str(w.message), w.filename, w.lineno) for w in caught]))
        assert shown[1] == shown[2] == shown[0], action


def _adds_into_a_small_out(x):
    out = torch.empty(1)
    torch.add(x, 1, out=out)  # resizes `out`: "An output with one or more elements was resized" on every call
    return out * 2


@pytest.mark.parametrize("backend", ["counting", "onnxrt"])
def test_an_out_argument_resized_warns_at_the_users_line(backend):
    # review revD MED-1: the fake run had resized the fake `out`, so the probes for a TORCH_WARN_ONCE saw no
    # warning and the record was dropped as a spent once: onnxrt never showed it, the eager backend from
    # `<eval_with_key>`. (onnxrt replays the text of torch's Python reference, which the fake run went through:
    # "shape torch.Size([1])" where eager's C++ kernel says "shape [1]"; the first 40 characters are compared.)
    text = (lambda m: m) if backend == "counting" else (lambda m: m[:40])
    for action in ("always", "default"):
        compiled = framejit.compile(_adds_into_a_small_out, backend=CountingBackend() if backend == "counting" else backend)
        shown = []
        for f in (_adds_into_a_small_out, compiled):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter(action)
                values = [_caller(f, torch.arange(3.0) + k).sum().item() for k in range(3)]
            shown.append((values, [(w.category, text(str(w.message)), w.filename, w.lineno) for w in caught]))
        assert shown[1] == shown[0], action


def _transposes_3d_times_two(x):
    return x.T * 2


def test_a_graph_whose_warn_once_is_spent_here_is_kept_in_memory_only(monkeypatch, tmp_path):
    # review revD MED-4: x.T's TORCH_WARN_ONCE, spent in this process before the trace, left no record, so the
    # graph was persisted without marks: a new process loading it showed the once from `<eval_with_key>` (eager
    # backend) or never (onnxrt), where eager shows it from the user's line. Spent is a fact of this process only.
    with warnings.catch_warnings(record=True):
        torch.ones(2, 2, 2).T  # spent in this process, whatever ran before
    monkeypatch.setattr(framejit.config, "cache_enabled", True)
    monkeypatch.setattr(framejit.config, "cache_dir", str(tmp_path))
    compiled = framejit.compile(_transposes_3d_times_two, backend="eager")
    for size in (3, 3):
        x = torch.arange(float(2 * size * 4)).reshape(2, size, 4)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert torch.equal(compiled(x), x.permute(2, 1, 0) * 2)
        assert caught == []  # spent: eager shows nothing either
    assert {p.name for p in tmp_path.rglob("*") if p.is_file()} <= {"counters"}  # no entry stored
