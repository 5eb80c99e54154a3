"""Guards: change one property at a time and assert a recompile and a correct result; compare the
generated guard function with the reference evaluator on randomised inputs."""
from __future__ import annotations

import logging
import random
import traceback

import pytest
import torch

import framejit
from framejit.capture.hook import FrameHook
from tests.helpers import CountingBackend, assert_same, clone_args

FACTOR = 2.0


def scaled(x, k):
    return x * k + FACTOR


def compiled_pair(fn):
    backend = CountingBackend()
    return framejit.compile(fn, backend=backend), backend


def check(compiled, fn, *args):
    assert_same(compiled(*clone_args(args)), fn(*clone_args(args)))


@pytest.mark.parametrize("change", ["dtype", "shape", "strides", "constant", "grad_mode", "requires_grad",
                                    "ndim", "int_to_float"])
def test_one_property_change_recompiles(change):
    compiled, backend = compiled_pair(scaled)
    x = torch.randn(4, 6)
    check(compiled, scaled, x, 3)
    check(compiled, scaled, torch.randn(4, 6), 3)  # same properties, new values: no recompile
    assert backend.graph_count == 1
    variants = {
        "dtype": lambda: ((torch.randn(4, 6, dtype=torch.float64), 3), {}),
        "shape": lambda: ((torch.randn(5, 6), 3), {}),
        "strides": lambda: ((torch.randn(6, 4).t(), 3), {}),
        "constant": lambda: ((torch.randn(4, 6), 4), {}),
        "grad_mode": lambda: ((torch.randn(4, 6), 3), {"grad": False}),
        "requires_grad": lambda: ((torch.randn(4, 6, requires_grad=True), 3), {}),
        "ndim": lambda: ((torch.randn(4, 6, 1), 3), {}),
        "int_to_float": lambda: ((torch.randn(4, 6), 3.0), {}),
    }
    args, opts = variants[change]()
    with torch.set_grad_enabled(opts.get("grad", True)):
        result = compiled(*clone_args(args))
        expected = scaled(*clone_args(args))
    assert_same(result, expected)
    assert backend.graph_count == 2
    # the first entry still hits for the original properties
    check(compiled, scaled, torch.randn(4, 6), 3)
    assert backend.graph_count == 2


def test_global_change_recompiles():
    global FACTOR
    compiled, backend = compiled_pair(scaled)
    x = torch.randn(3)
    check(compiled, scaled, x, 2)
    old = FACTOR
    try:
        FACTOR = 5.0
        check(compiled, scaled, x, 2)
        assert backend.graph_count == 2
    finally:
        FACTOR = old


def test_recompile_limit_runs_eagerly_and_logs(caplog):
    framejit.config.recompile_limit, old = 3, framejit.config.recompile_limit
    framejit.config.automatic_dynamic = False  # each value of the int k is its own entry (no symbolic int)
    try:
        compiled, backend = compiled_pair(scaled)
        framejit.set_logs("recompiles")
        with caplog.at_level(logging.INFO, logger="framejit"):
            for k in range(6):
                check(compiled, scaled, torch.randn(2), k)
        assert backend.graph_count == 3
        limit_lines = [r.getMessage() for r in caplog.records if "recompile limit" in r.getMessage()]
        assert len(limit_lines) == 1
        assert "scaled" in limit_lines[0] and "CONSTANT_MATCH" in limit_lines[0]
        recompiles = [r.getMessage() for r in caplog.records if r.getMessage().startswith("recompiling")]
        assert recompiles and "L['k']" in recompiles[0] and "expected" in recompiles[0]
    finally:
        framejit.config.recompile_limit = old
        framejit.config.automatic_dynamic = True
        framejit.set_logs("")


def test_recompile_log_names_tensor_property(caplog):
    compiled, _ = compiled_pair(scaled)
    framejit.set_logs("recompiles")
    try:
        with caplog.at_level(logging.INFO, logger="framejit"):
            compiled(torch.randn(3), 2)
            compiled(torch.randn(3, dtype=torch.float64), 2)
        text = "\n".join(r.getMessage() for r in caplog.records)
        assert "TENSOR_DTYPE" in text and "torch.float64" in text and "test_recompiles.py" in text
    finally:
        framejit.set_logs("")


def _hook_of(compiled) -> FrameHook:
    return compiled


def _random_args(rng: random.Random):
    dtype = rng.choice([torch.float32, torch.float64, torch.float16])
    shape = rng.choice([(4, 6), (5, 6), (4, 6, 1), (6, 4)])
    x = torch.randn(*shape, dtype=dtype)
    if rng.random() < 0.3 and x.dim() == 2:
        x = x.t()
    if rng.random() < 0.3:
        x.requires_grad_(True)
    k = rng.choice([3, 4, 3.0, True, "s", None])
    return x, k


def test_generated_guards_agree_with_reference_evaluator():
    compiled, _ = compiled_pair(scaled)
    compiled(torch.randn(4, 6), 3)
    compiled(torch.randn(4, 6, dtype=torch.float64), 3.0)
    rng = random.Random(0)
    hits = misses = 0
    for _ in range(300):
        args = _random_args(rng)
        for entry in _hook_of(compiled).entries:
            fast = entry.guard(*args)
            slow = entry.guard.reference_check(*args)
            assert fast == slow, (args, entry.guard.first_failure(*args))
            hits += fast
            misses += not fast
    assert hits > 0 and misses > 0


def test_guard_source_is_readable_and_commented():
    compiled, _ = compiled_pair(scaled)
    compiled(torch.randn(2, 3), 3)
    source = compiled.entries[0].guard.source
    assert source.startswith("def ___guard_scaled")
    assert "x.shape == (2, 3)" in source and "k == 3" in source
    assert "test_recompiles.py" in source  # each line names the user code that caused it


def test_module_parameter_replaced_and_train_eval():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5), torch.nn.ReLU())
    model.eval()
    backend = CountingBackend()
    compiled = framejit.compile(model, backend=backend)
    x = torch.randn(2, 4)
    assert_same(compiled(x), model(x))
    model[0].weight = torch.nn.Parameter(torch.randn(4, 4))
    assert_same(compiled(x), model(x))
    assert backend.graph_count == 1  # a same-shaped new parameter is reloaded, not recompiled
    model[0].weight = torch.nn.Parameter(torch.randn(4, 4, dtype=torch.float64))
    model[0].bias = torch.nn.Parameter(torch.randn(4, dtype=torch.float64))
    assert_same(compiled(x.double()), model(x.double()))
    assert backend.graph_count == 2
    model.train()
    torch.manual_seed(0)
    out = compiled(x.double())
    torch.manual_seed(0)
    assert_same(out, model(x.double()))
    assert backend.graph_count == 3


def test_module_swapped_for_another():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    backend = CountingBackend()
    compiled = framejit.compile(model, backend=backend)
    x = torch.randn(2, 4)
    assert_same(compiled(x), model(x))
    model[1] = torch.nn.Tanh()
    assert_same(compiled(x), model(x))
    assert backend.graph_count == 2


class _Offset(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x, offset, *rest, flag=False):
        y = self.lin(x) + offset + len(rest)
        return y * 2 if flag else y


def test_recompile_log_of_a_compiled_module_names_its_forward_and_parameters(caplog):
    # NOTE [Recompiles of compiled modules] in hook.py: the guards are on module_call's *args/**kwargs
    module = _Offset()
    compiled = framejit.compile(module, backend="eager", dynamic=False)
    framejit.set_logs("recompiles")
    try:
        with caplog.at_level(logging.INFO, logger="framejit"):
            calls = [((1,), {}), ((2,), {}), ((2, 7), {}), ((2, 7), {}), ((2, 7), {"flag": True})]
            for i, (args, kwargs) in enumerate(calls):
                if i == 3:
                    module.lin.weight.requires_grad_(False)
                x = torch.randn(2, 3)
                assert_same(compiled(x, *args, **kwargs), module(x, *args, **kwargs))
        lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("recompiling")]
        assert len(lines) == 4
        assert all(line.startswith("recompiling _Offset.forward (") and "test_recompiles.py" in line for line in lines)
        assert "CONSTANT_MATCH on L['offset']: expected 1, got 2" in lines[0]
        assert "on the positional arguments: expected 2, got 3" in lines[1]
        assert "TENSOR_REQUIRES_GRAD on L['self'].lin.weight" in lines[2]
        assert "DICT_KEYS on the keyword arguments: expected [], got ['flag']" in lines[3]
        assert not any("module_frame.py" in line or "L['args']" in line for line in lines)
    finally:
        framejit.set_logs("")


def _held_int_method(x, n, log):
    b = n.bit_length
    log.append("break")  # a break: print into a list would be folded; the list is an argument
    print(end="")
    return x + b(), b.__self__ == n


def _int_methods_compared(x, n, k):
    return x + 1, n.bit_length == k.bit_length


def test_a_symbolic_int_method_is_specialised_only_when_called():
    # NOTE [Methods of symbolic ints] (capture/attributes.py): reading `n.bit_length` of an int that went symbolic
    # specialised n at the read: the top frame recompiled on every call (review revW W6: 2 frames traced per call
    # where stock traces 1); and `n.bit_length == k.bit_length` of two equal ints that are distinct objects was
    # folded True (eager False: a builtin method compares its __self__ by identity)
    compiled = framejit.compile(_held_int_method, backend="eager")
    traced = []
    for k in range(5):
        n = 2 ** k + 1000
        before = framejit.stats()["frames_traced"]
        assert_same(compiled(torch.ones(2), n, []), _held_int_method(torch.ones(2), n, []))
        traced.append(framejit.stats()["frames_traced"] - before)
    assert traced[3:] == [1, 1]
    compiled = framejit.compile(_int_methods_compared, backend="eager")
    for k in range(3):
        n, m = 2 ** k + 1000, (2 ** k + 1000 if k % 2 else 7)
        assert_same(compiled(torch.ones(2), n, m), _int_methods_compared(torch.ones(2), n, m))


def _formats_the_exception(x):
    s = traceback.format_exc()
    return x + 1, s.splitlines()[-1]


def test_traceback_formatting_runs_as_a_whole_at_the_break():
    # NOTE [Traceback formatting at breaks] (capture/break_callees.py): format_exc broke deep inside and each callee
    # at a break went through a frame hook of its own: 6 frames traced on the first call (stock 1)
    compiled = framejit.compile(_formats_the_exception, backend="eager")
    traced = []
    for i in range(4):
        before = framejit.stats()["frames_traced"]
        try:
            if i in (1, 2):
                raise KeyError("k")
            assert_same(compiled(torch.ones(2) * i), _formats_the_exception(torch.ones(2) * i))
        except KeyError:
            assert_same(compiled(torch.ones(2) * i), _formats_the_exception(torch.ones(2) * i))
        traced.append(framejit.stats()["frames_traced"] - before)
    assert traced[0] <= 2, traced  # then a string read after the break is specialised per value, as in stock
