"""Adversarial differential programs, thirteenth round (issue 12, red team): user code that framejit's own
reads ran where eager runs none (a tensor subclass's or a TorchFunctionMode's __torch_function__ called by
guards, an lru_cache function called by a guard with another call's arguments). Each runs eagerly and
compiled on separate but equal state over several calls, changing the state between calls, and compares
results and the state left behind."""
from __future__ import annotations

import functools

import pytest
import torch
from torch.overrides import TorchFunctionMode

import framejit


def _calls(mode_or_cls) -> list:
    return [n for n in mode_or_cls.log if n not in ("__repr__", "__format__")]


# ---- NOTE [Subclass tensors guarded by type] (capture/graph.py) ----------------------------------------------

def _logging_subclass():
    class Logged(torch.Tensor):
        log: list = []

        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            cls.log.append(getattr(func, "__name__", "?"))
            return super().__torch_function__(func, types, args, kwargs or {})
    return Logged


def test_a_tensor_subclass_sees_only_the_calls_eager_makes():
    # before: the frame runs eagerly for a subclass argument, but its entry guarded the tensor's metadata
    # (shape, stride(), storage_offset(), is_neg(), ...), each read handed to the subclass's
    # __torch_function__: 16 calls more on the first call and 7 more on every later call
    def f(x, y):
        return x * 2 + y.sum()

    logs = []
    for compiled in (False, True):
        T = _logging_subclass()
        fn = framejit.compile(f, backend="eager") if compiled else f
        out = []
        for n in (2, 2, 3, 2):
            T.log.clear()
            r = fn(torch.ones(n).as_subclass(T), torch.ones(3))
            out.append((type(r).__name__, r.detach().as_subclass(torch.Tensor).tolist(), list(T.log)))
        logs.append(out)
    assert logs[0] == logs[1]


class _LogMode(TorchFunctionMode):
    def __init__(self, log):
        super().__init__()
        self.log = log

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.log.append(getattr(func, "__name__", "?"))
        return func(*args, **(kwargs or {}))


# ---- NOTE [No guard past a new torch mode] (guards/codegen.py) -----------------------------------------------

def test_a_torch_function_mode_entered_by_the_caller_sees_only_eager_calls():
    # before: the first call under the mode missed the entry made without it, and explaining the miss
    # evaluated the entry's tensor guards under the mode: stride, storage_offset, is_neg ... logged by the mode
    def f(x, y):
        return x * 2 + y.sum()

    logs = []
    for compiled in (False, True):
        fn = framejit.compile(f, backend="eager") if compiled else f
        out = [fn(torch.ones(2), torch.ones(3)).tolist()]
        for n in (2, 3):
            log = []
            with _LogMode(log):
                out.append((fn(torch.ones(n), torch.ones(3)).tolist(), log))
        out.append(fn(torch.ones(2), torch.ones(3)).tolist())
        logs.append(out)
    assert logs[0] == logs[1]


# ---- NOTE [Cached calls checked last] (capture/cached_calls.py), NOTE [No cached call past a failed guard] ---

def _run_cached(compile_kw, keys):
    results = []
    for compiled in (False, True):
        calls = []

        @functools.lru_cache(maxsize=2)
        def h(k):
            calls.append(k)
            return k * 2

        def f(x, k):
            return x * h(k)

        fn = framejit.compile(f, backend="eager", **compile_kw) if compiled else f
        seen = []
        for k in keys:
            seen.append((fn(torch.ones(1), k).tolist(), list(calls), h.cache_info()))
        results.append(seen)
    return results


def test_an_lru_cache_function_is_looked_up_only_with_the_calls_arguments():
    # before: with k symbolic after its first change, the entry kept k's value as a shape-env guard checked
    # after the cache guard, which called h(2) on a call with k == 1 or 3: a bounded cache reordered and
    # h ran again (calls [1, 2, 3, 2, 1, 3, 2] where eager makes [1, 2, 3, 2, 3])
    eager, compiled = _run_cached({}, (1, 2, 1, 3, 1, 2, 3))
    assert eager == compiled


def test_explaining_a_miss_calls_no_lru_cache_function():
    # before: a miss evaluated every guard of the newest entry (all_failures) and the cache guard looked up
    # h with the entry's own argument, not the call's: cache_info and the recency order differed from eager
    eager, compiled = _run_cached({"dynamic": False}, (1, 2, 3, 1, 2, 3, 3))
    assert eager == compiled


# ---- NOTE [Objects with a finalizer] (capture/calls.py) -------------------------------------------------------

def _run_finalizer(add_del_later: bool):
    results = []
    for compiled in (False, True):
        log = []

        class D:
            def __init__(self, k):
                self.k = k

        def finalizer(self):
            log.append(self.k)

        if not add_del_later:
            D.__del__ = finalizer

        def f(x, k):
            d = D(k)
            r = x * d.k
            del d
            log.append("after")
            return r

        fn = framejit.compile(f, backend="eager") if compiled else f
        seen = []
        for step, k in enumerate((1, 2, 2, 3)):
            if add_del_later and step == 2:
                D.__del__ = finalizer
            seen.append((fn(torch.ones(1), k).tolist(), list(log)))
        results.append(seen)
    return results


def test_an_object_with_a_finalizer_dies_where_eager_drops_it():
    # before: D(k) made inside the frame was never made at all (a traced object that did not escape), so
    # D.__del__ never ran: log ['after', 'after', ...] where eager has [1, 'after', 2, 'after', ...]
    eager, compiled = _run_finalizer(add_del_later=False)
    assert eager == compiled


def test_a_finalizer_added_to_the_class_later_runs():
    # before: __del__ added to D after two calls was not a guarded fact; the entry kept not making D
    eager, compiled = _run_finalizer(add_del_later=True)
    assert eager == compiled


# ---- NOTE [Graphs that leave inference mode] (backends/state.py) ---------------------------------------------

@pytest.mark.parametrize("backend", ["eager", "onnxrt", "triton"])
def test_an_inference_mode_false_block_under_the_callers_inference_mode(backend):
    # before (onnxrt, triton): under the caller's inference_mode the lowered program made y an inference
    # tensor, and the call raised "Inference tensors do not track version counter" where eager returns y
    def f(x):
        with torch.inference_mode(False):
            y = x * 2
        return y, torch.is_grad_enabled()

    def observe(fn, x):
        y, grad = fn(x)
        return y.tolist(), grad, y.is_inference(), y.requires_grad, y._version

    results = []
    for compiled in (False, True):
        fn = framejit.compile(f, backend=backend) if compiled else f
        seen = [observe(fn, torch.ones(2, requires_grad=True))]
        with torch.no_grad():
            seen.append(observe(fn, torch.ones(2, requires_grad=True)))
        for n in (2, 3):
            with torch.inference_mode():
                seen.append(observe(fn, torch.ones(n)))
        results.append(seen)
    assert results[0] == results[1]
