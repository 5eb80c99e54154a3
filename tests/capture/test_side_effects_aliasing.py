"""Side effects as a log of mutations on objects (issue 12): method calls on containers whose argument
breaks the graph, one object reached through two paths, iteration over a container the loop mutates,
Python attributes of tensors.

Each case is differential: `make_args(seed)` is called twice, so eager and compiled code get equal but
separate objects (with the same aliasing between them, which `clone_args` would not keep), and the state
of every argument after the call is compared, as is the state of module globals the code mutates.
"""
from __future__ import annotations

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, assert_same, call_capturing


def state(obj, seen=None):
    """A comparable picture of `obj`: containers and user objects by contents, aliasing included."""
    seen = {} if seen is None else seen
    if isinstance(obj, torch.Tensor):
        return obj
    if id(obj) in seen:
        return ("alias", seen[id(obj)])
    if isinstance(obj, (list, tuple, dict, set)) or hasattr(obj, "__dict__"):
        seen[id(obj)] = len(seen)
    if isinstance(obj, (list, tuple)):
        return type(obj)(state(o, seen) for o in obj)
    if isinstance(obj, dict):
        return {k: state(v, seen) for k, v in obj.items()}
    if isinstance(obj, set):
        return ("set", sorted(map(repr, obj)))
    if hasattr(obj, "__dict__") and not isinstance(obj, type):
        return (type(obj).__name__, state(vars(obj), seen))
    return obj


def run_aliased(fn, make_args, *, backend=None, seeds=(0, 1, 2), reset=None, min_graphs=1):
    """Eager and compiled on fresh, equally built arguments for each seed; `reset(seed)` sets module
    state (globals the function reads or mutates) before each of the two runs."""
    backend = backend or CountingBackend()
    compiled = framejit.compile(fn, backend=backend)
    for seed in seeds:
        runs = []
        for call in (fn, compiled):
            if reset is not None:
                reset(seed)
            torch.manual_seed(seed)
            args = make_args(seed)
            result, exc, out = call_capturing(call, args, {})
            runs.append((result, exc, out, state(args), state(reset(None)) if reset is not None else None))
        (e_res, e_exc, e_out, e_args, e_glob), (c_res, c_exc, c_out, c_args, c_glob) = runs
        assert c_exc is e_exc, f"eager raised {e_exc}, compiled raised {c_exc}: {c_res!r}"
        assert c_out == e_out
        if e_exc is None:
            assert_same(state(c_res), state(e_res))
        assert_same(c_args, e_args)
        assert_same(c_glob, e_glob)
    if isinstance(backend, CountingBackend):
        assert backend.graph_count >= min_graphs  # some of it was captured, not all run eagerly
    return backend


# ---- container methods whose argument breaks the graph -------------------------------------------------------
def append_item(x):
    r = []
    r.append(x.sum().item())
    r.append(x * 2)
    return r


def list_methods_item_args(x):
    r = [1, 2, 3]
    r.extend([x.sum().item()])
    r.insert(0, x.max().item())
    r.remove(2)
    r.pop(int(x[0].item() > 0))
    return r, x + len(r)


def set_and_dict_methods(x):
    s = set()
    s.add(int(x.sum().item() > 0))
    d = {}
    d.update(a=x.max().item())
    d.setdefault("b", x.min().item())
    d["c"] = x.mean().item()
    return s, d, x * 2


class Accumulator:
    def __init__(self):
        self.values = []

    def add(self, v):
        self.values.append(v)


def local_object_method(x):
    acc = Accumulator()
    acc.add(x.sum().item())
    acc.add(x * 3)
    return acc.values, acc


def outside_containers(out, cfg, x):
    out.append(x.sum().item())
    out.insert(0, x * 2)
    cfg["max"] = x.max().item()
    cfg.update(n=len(out))
    out.pop()
    return x + 1


def one(seed):
    return (torch.randn(3) + seed,)


BREAKING_ARGS = [
    (append_item, one), (list_methods_item_args, one), (set_and_dict_methods, one),
    (local_object_method, one),
    (outside_containers, lambda seed: ([seed, "a"], {"k": seed}, torch.randn(3))),
]


@pytest.mark.parametrize("fn,make_args", BREAKING_ARGS, ids=[c[0].__name__ for c in BREAKING_ARGS])
@pytest.mark.parametrize("backend", ["counting", "onnxrt"])
def test_container_method_with_breaking_argument(fn, make_args, backend):
    run_aliased(fn, make_args, backend=None if backend == "counting" else backend)


# ---- one object, two paths ------------------------------------------------------------------------------
def passed_twice(a, b, x):
    a.append(x + 1)
    b.append(x * 2)
    return x * len(a), len(b)


class Holder:
    def __init__(self, items):
        self.items = items


def argument_and_attribute(items, holder, x):
    items.append(1)
    holder.items.append(2)
    holder.count = len(items)
    return x + len(holder.items)


def dict_twice(a, b, x):
    a["k"] = x.sum()
    b["n"] = len(a)
    return x * len(b)


def aliased_lists(seed):
    shared = [torch.ones(1) * seed]
    return shared, shared, torch.randn(2)


def aliased_dicts(seed):
    shared = {"s": seed}
    return shared, shared, torch.randn(2)


def holder_args(seed):
    items = [seed]
    return items, Holder(items), torch.randn(2)


ALIASES = [(passed_twice, aliased_lists), (argument_and_attribute, holder_args), (dict_twice, aliased_dicts)]


@pytest.mark.parametrize("fn,make_args", ALIASES, ids=[c[0].__name__ for c in ALIASES])
@pytest.mark.parametrize("backend", ["counting", "onnxrt"])
def test_object_reached_through_two_paths(fn, make_args, backend):
    run_aliased(fn, make_args, backend=None if backend == "counting" else backend)


def test_aliasing_that_changes_between_calls_recompiles():
    """Compiled for distinct lists, called with one list twice (and back): the aliasing is guarded."""
    backend = CountingBackend()
    compiled = framejit.compile(passed_twice, backend=backend)
    for aliased in (False, True, False, True):
        results = []
        for call in (passed_twice, compiled):
            a = [torch.ones(1)]
            b = a if aliased else [torch.ones(1)]
            results.append((call(a, b, torch.ones(2)), state((a, b))))
        assert_same(results[1], results[0])
    assert backend.graph_count == 2


class Recorder:
    def __init__(self, log):
        self.log = log

    def __enter__(self):
        self.log.append("enter")
        return self

    def __exit__(self, *exc):
        self.log.append("exit")
        return False


def exit_append_after_break(log, x):
    with Recorder(log):
        y = x.sum().item()
        log.append(y)
        x = x * 2
    return x + 1


def test_user_context_manager_exit_append_at_break():
    run_aliased(exit_append_after_break, lambda seed: ([seed], torch.randn(3)))


# ---- iteration over a container the loop mutates --------------------------------------------------------
ITEMS: list = []
OPTS: dict = {}


def reset_items(seed):
    if seed is not None:
        ITEMS[:] = [1.0, 2.0, 3.0, 4.0][:3 + seed % 2]
    return ITEMS


def remove_while_iterating(x):
    for v in ITEMS:
        if v > 1.5:
            ITEMS.remove(v)
        x = x + v
    return x


def append_while_iterating(x):
    for v in ITEMS:
        if v == 2.0:
            ITEMS.append(10.0)
        x = x * v
    return x


def remove_while_iterating_with_break(x):
    for v in ITEMS:
        print(v)
        if v == 2.0:
            ITEMS.remove(3.0)
        x = x + v
    return x


@pytest.mark.parametrize("fn", [remove_while_iterating, append_while_iterating, remove_while_iterating_with_break])
def test_list_mutated_while_iterated(fn):
    run_aliased(fn, lambda seed: (torch.randn(2),), reset=reset_items)


def reset_opts(seed):
    if seed is not None:
        OPTS.clear()
        OPTS.update(a=1.0, b=2.0 + seed)
    return OPTS


def add_key_while_iterating(x):
    try:
        for k in OPTS:
            if k == "a":
                OPTS["c"] = 3.0
            x = x + OPTS[k]
    except RuntimeError:
        return x, "changed size"
    return x, "ok"


def add_key_while_iterating_uncaught(x):
    for k in OPTS:
        OPTS[k + "!"] = 1.0
        x = x + 1
    return x


def update_values_while_iterating(x):
    for k in OPTS:
        OPTS[k] = OPTS[k] * 2  # same keys: allowed
        x = x + OPTS[k]
    return x


def add_key_while_iterating_with_break(x):
    for k in OPTS:
        print(k)
        if k == "a":
            OPTS["z"] = 0.0
        x = x + 1
    return x


def set_add_while_iterating(x):
    s = {1, 2}
    for v in s:
        s.add(v + 10)
        x = x + v
    return x


DICT_CASES = [add_key_while_iterating, add_key_while_iterating_uncaught, update_values_while_iterating,
              add_key_while_iterating_with_break, set_add_while_iterating]


@pytest.mark.parametrize("fn", DICT_CASES, ids=[f.__name__ for f in DICT_CASES])
def test_dict_or_set_mutated_while_iterated(fn):
    run_aliased(fn, lambda seed: (torch.randn(2),), reset=reset_opts, min_graphs=0)


def test_dict_iteration_changed_size_raises_in_compiled_code():
    compiled = framejit.compile(add_key_while_iterating_uncaught, backend="eager")
    reset_opts(0)
    with pytest.raises(RuntimeError, match="dictionary changed size during iteration"):
        compiled(torch.ones(1))


# ---- Python attributes of tensors ---------------------------------------------------------------------
def tensor_attribute(x):
    x.tag = "seen"
    y = x + 1
    return y, getattr(x, "tag", None), x.tag


def test_tensor_python_attribute():
    run_aliased(tensor_attribute, lambda seed: (torch.randn(2),), min_graphs=0)
    x = torch.ones(1)
    framejit.compile(tensor_attribute, backend="eager")(x)
    assert x.tag == "seen"


# ---- replay order and concurrency-safe replay -----------------------------------------------------------
EVENTS: list = []


def reset_events(seed):
    if seed is not None:
        EVENTS[:] = ["start"] * (seed + 1)
    return EVENTS


def appends_around_graph(x):
    EVENTS.append("a")
    y = x.sin()
    EVENTS.insert(0, "first")
    EVENTS.append(y.sum())
    EVENTS.pop(1)
    return y


def test_global_list_log_replayed_in_order_as_it_grows():
    """The global list changes length between calls (guards re-check it) and the calls are replayed in
    program order."""
    run_aliased(appends_around_graph, lambda seed: (torch.randn(3),), reset=reset_events)
