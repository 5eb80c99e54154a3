"""Adversarial differential programs, seventh round (issue 12, red team): classes with their own
`__getattribute__` read by guards, version counters of inputs written twice on lowered backends, and
state an ML engineer's code changes between calls. Each runs eagerly and compiled on separate but equal
state over several calls, changing the state between calls."""
from __future__ import annotations

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, assert_same

BACKENDS = ["eager", "onnxrt"]


def _backend(name):
    return CountingBackend() if name == "eager" else name


# ---- a class with its own __getattribute__ (NOTE [Raw attribute reads]) ----------------------------------

class _Aliased:
    """A config mapping attribute aliases (transformers' PretrainedConfig does), counting its hook's runs."""

    __slots__ = ("runs", "k", "alias", "__dict__")

    def __init__(self):
        object.__setattr__(self, "runs", [])
        self.k, self.alias, self.w = 2, {"kk": "k"}, 3.0

    def __getattribute__(self, name):
        object.__getattribute__(self, "runs").append(name)
        if name == "kk":
            name = super().__getattribute__("alias")["kk"]
        return object.__getattribute__(self, name)


def _reads_aliases(x, c):
    y = x * c.kk + c.w
    if hasattr(c, "extra"):
        y = y + c.extra
    return y


def test_guards_read_past_a_custom_getattribute():
    # before: every guard line and the graph-input reload read `c.k`, `c.alias` through the hook (14 runs over
    # 2 calls where eager ran 2; 6 more while tracing); the hook's own runs are a side effect the user sees
    compiled = framejit.compile(_reads_aliases, backend=CountingBackend())
    c_e, c_c = _Aliased(), _Aliased()
    for i in range(4):
        x = torch.randn(3)
        assert_same(compiled(x, c_c), _reads_aliases(x, c_e))
        runs_e, runs_c = object.__getattribute__(c_e, "runs"), object.__getattribute__(c_c, "runs")
        assert runs_c == runs_e
        runs_e.clear()
        runs_c.clear()
        for c in (c_e, c_c):  # state changed between calls: the slot, the dict entry, a new attribute
            c.k = i + 3
            c.w = float(i)
            if i == 1:
                c.extra = 5


# ---- a module's __builtins__ swapped after its functions were defined (NOTE [Builtins of a function]) ------

_MODULE = '''
def helper(x):
    return x * len([1, 2, 3])

def outer(x):
    return helper(x) + len([1, 2])

def nested(x):
    def inner(y):
        return y * len([1])
    return inner(x) + len([1, 2])
'''

_LATER = '''
def later(x):
    return helper(x) - len([1])
'''


def _module_with_swappable_builtins():
    import builtins
    import types
    module = types.ModuleType("redteam7_builtins")
    exec(compile(_MODULE, "<redteam7 builtins>", "exec"), module.__dict__)
    patched = dict(builtins.__dict__, len=lambda s: 10 * builtins.len(s))
    return module, builtins.__dict__, patched


@pytest.mark.parametrize("name", ["outer", "nested", "later"])
def test_functions_keep_the_builtins_they_were_made_with(name):
    # before: the trace read the globals' __builtins__ at trace time: `outer` (defined before the swap) used
    # the patched len where eager keeps the original; `nested` ignored a swap after its first call (its inner
    # function, made on each call, takes the globals' builtins then)
    module, original, patched = _module_with_swappable_builtins()
    if name == "outer":
        module.__dict__["__builtins__"] = patched
    if name == "later":
        module.__dict__["__builtins__"] = patched
        exec(compile(_LATER, "<redteam7 builtins later>", "exec"), module.__dict__)
        module.__dict__["__builtins__"] = original  # `later` keeps patched, `helper` the original
    fn = getattr(module, name)
    compiled = framejit.compile(fn, backend=CountingBackend())
    for i, held in enumerate((None, patched, original, patched)):
        if i and name == "nested":
            module.__dict__["__builtins__"] = held
        x = torch.randn(3)
        assert_same(compiled(x), fn(x))


# ---- version counters of inputs written in place (NOTE [Version counts of written inputs]) ------------------

def _writes_twice(x, y):
    x.add_(1)
    x[0].mul_(2)  # through a view: the same counter
    y.clamp_(min=0)
    return x.sum() + y.sum()


@pytest.mark.parametrize("backend", [*BACKENDS, "triton"])
def test_inputs_written_twice_bump_their_versions_twice(backend):
    # before (onnxrt, triton): one write-back copy per input, `x._version` 1 where eager gives 2
    compiled = framejit.compile(_writes_twice, backend=_backend(backend))
    for n in (3, 4, 3):
        x_e, y_e = torch.randn(n), torch.randn(n)
        x_c, y_c = x_e.clone(), y_e.clone()
        base_e, base_c = x_e[1:], x_c[1:]  # a view made before: it shares the counter
        assert_same(compiled(x_c, y_c), _writes_twice(x_e, y_e))
        assert_same((x_c, y_c), (x_e, y_e))
        assert (x_c._version, y_c._version, base_c._version) == (x_e._version, y_e._version, base_e._version)


def _sgd_step(x, p, opt):
    opt.zero_grad()
    (p * x).sum().backward()
    opt.step()
    return p.detach().clone()


def test_parameter_versions_after_steps_with_a_changing_learning_rate():
    # before (onnxrt, since b238f05): with lr a float graph input, the fake `p.add_(g, alpha=-lr)` bumped the fake
    # parameter's counter 3 times, which was taken as eager's count: p._version advanced by 3 per step, eager's by 1
    p_e, p_c = torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(3))
    opt_e, opt_c = torch.optim.SGD([p_e], lr=0.1), torch.optim.SGD([p_c], lr=0.1)
    compiled = framejit.compile(_sgd_step, backend="onnxrt")
    for lr in (0.5, 0.01, 1.0):
        x = torch.randn(3)
        assert_same(compiled(x, p_c, opt_c), _sgd_step(x, p_e, opt_e))
        assert p_c._version == p_e._version
        opt_e.param_groups[0]["lr"] = opt_c.param_groups[0]["lr"] = lr


_VERSIONS_PROGRAM = '''
import json, sys, torch, framejit

def f(x):
    x.add_(1)
    x.mul_(2)
    return x * 3

compiled = framejit.compile(f, backend=sys.argv[1])
x = torch.ones(3)
compiled(x)
print(json.dumps({"version": x._version, "loaded": framejit.stats()["frames_loaded"]}))
'''


def test_written_input_versions_from_a_warm_cache(tmp_path):
    from tests.helpers import run_cache_program
    cold = run_cache_program(tmp_path, "versions.py", _VERSIONS_PROGRAM, "onnxrt", preload=("onnx", "onnxscript"))
    warm = run_cache_program(tmp_path, "versions.py", _VERSIONS_PROGRAM, "onnxrt", preload=("onnx", "onnxscript"))
    assert (cold, warm) == ({"version": 2, "loaded": 0}, {"version": 2, "loaded": 1})


# ---- a graph that fails at run time, loaded from a warm cache (NOTE [Graph failures rerun eagerly]) ---------

_CHECKED_PROGRAM = '''
import json, torch, framejit

def f(x, log):
    try:
        log.append("start")
        if x.sum() > 0:  # a speculated check (NOTE [Speculated checks]): fails for positive sums
            raise KeyError("pos")
        log.append("neg")
    except KeyError as e:
        log.append(f"caught {e}")
    return x + 1

compiled = framejit.compile(f, backend="eager")
logs = []
for sign in (-1, 1, -1, 1):
    x, log = torch.full((3,), 2.0 * sign), []
    try:
        out = compiled(x, log).tolist()
    except Exception as e:
        out = f"{type(e).__name__}: {e}"
    logs.append([out, log])
print(json.dumps({"logs": logs, "loaded": framejit.stats()["frames_loaded"]}))
'''


def test_warm_entry_whose_graph_fails_reruns_eagerly(tmp_path):
    # before: an entry restored from the frame cache judged its graph as writing inputs (its placeholders,
    # `L_x_`, end with "_" like in-place ops), so it never reran eagerly: the failing check raised
    # "RuntimeError: Expected Tensor with single nonzero value" where eager catches its KeyError
    from tests.helpers import run_cache_program
    expected = [[[-1.0] * 3, ["start", "neg"]], [[3.0] * 3, ["start", "caught 'pos'"]]] * 2
    cold = run_cache_program(tmp_path, "checked.py", _CHECKED_PROGRAM)
    warm = run_cache_program(tmp_path, "checked.py", _CHECKED_PROGRAM)
    assert (cold, warm) == ({"logs": expected, "loaded": 0}, {"logs": expected, "loaded": 1})


# ---- run-time checks on lowered backends (NOTE [Run-time checks as outputs]) ----------------------------

def _caught_check(x, log):
    try:
        log.append("start")
        if x.sum() > 0:  # a speculated check (NOTE [Speculated checks])
            raise KeyError("pos")
        log.append("neg")
    except KeyError as e:
        log.append(f"caught {e}")
    return x + 1


@pytest.mark.parametrize("backend", [*BACKENDS, "triton"])
def test_speculated_checks_are_kept_by_every_backend(backend):
    # before (onnxrt, triton): the lowering dropped the graph's _assert_async (no users), so positive sums took
    # the "neg" branch silently
    compiled = framejit.compile(_caught_check, backend=_backend(backend))
    for sign in (-1, 1, -1, 1):
        x = torch.full((3,), 2.0 * sign)
        log_e, log_c = [], []
        assert_same(compiled(x, log_c), _caught_check(x, log_e))
        assert log_c == log_e
