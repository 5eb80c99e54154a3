"""Dynamic shapes, issue 13: generator expressions over a symbolic range consumed by a builtin (`sum(x[i] for i
in range(x.size(0)))`, `tuple(...)`, `dict(...)`; NOTE [Generator expressions over symbolic ranges] in
python_loops.py), dict and set comprehension results read after them (NOTE [Dict and set results of changing
size] in carried_loops.py) and walrus targets of inlined comprehensions (3.12+; NOTE [Walrus targets of
comprehensions run as Python] in inlined_comprehensions.py) no longer compile once per size. Before, each
compiled per size until the recompile limit (8) ran the frame eagerly (stock torch.compile: the same). Now the
generator or comprehension runs as Python, the frame that owns it serves every size (plus its static first
trace under dynamic=None and the 0/1 specialisations), and the frame after it is traced at most twice.
Differential: eager vs compiled on fresh inputs of changing sizes (0 and 1 included), values, types,
exceptions and a log of side effects compared; trace counts asserted."""
from __future__ import annotations

import collections
import contextlib

import pytest
import torch

import framejit

SIZES = [3, 5, 7, 4, 9, 6, 11, 2, 0, 1, 8, 10]  # more sizes than the recompile limit (8), 0 and 1 among them
LOG: list = []


def summed_rows(x):
    return sum(x[i] for i in range(x.size(0)))


def summed_ints(x):
    return x * sum(i * i for i in range(x.size(0)))


def tuple_of_ints(x):
    return x, tuple(i for i in range(x.size(0)))


def any_row(x):
    return x + any(x[i].sum() > 0 for i in range(x.size(0)))


def nested(x):
    return sum(sum(x[i, j] for j in range(x.size(1))) for i in range(x.size(0)))


def logged(x):
    LOG.append("a")
    out = sum((LOG.append(i) or x[i]) for i in range(x.size(0)))
    LOG.append("b")
    return out


def largest(x):  # max() of an empty generator raises ValueError, as eager
    return max(x[i].sum() for i in range(x.size(0)))


def dict_of_rows(x):
    d = dict((i, x[i] + 1) for i in range(x.size(0)))
    return len(d), d


def sets(x):
    s = set(i % 4 for i in range(x.size(0)))
    return x * len(s), frozenset(i for i in range(x.size(0)))


def dict_comprehension(x):
    d = {i: i * 2 for i in range(x.size(0))}
    return x * len(d), d


def set_comprehension(x):
    s = {i % 3 for i in range(x.size(0))}
    return x + len(s), s


def dict_get(x):
    d = {i: x[i] * 2 for i in range(x.size(0))}
    return d.get(1, x.sum()), len(d)


def dict_mutated(x):
    d = {i: i for i in range(x.size(0))}
    e = d
    e[100] = x.sum()
    d.pop(0, None)
    return d, e is d, x * len(d)


def set_added(x):
    s = {i * 2 for i in range(x.size(0))}
    s.add(-1)
    return x * (4 in s), sorted(s)


def walrus(x):  # `last` unbound after an empty range: UnboundLocalError, as eager
    ys = [(last := i * 2) for i in range(x.size(0))]
    return x * last, ys


def walrus_prebound(x):
    last = -1
    ys = [(last := i) for i in range(x.size(0))]
    return x + last, len(ys)


def walrus_tensor(x):
    ys = [(acc := x[i] * 2) for i in range(x.size(0))]
    return acc, len(ys)


GENERATORS = [summed_rows, summed_ints, tuple_of_ints, any_row, nested, logged, largest, dict_of_rows, sets]
KEYED = [dict_comprehension, set_comprehension, dict_get, dict_mutated, set_added]
WALRUS = [walrus, walrus_prebound, walrus_tensor]


def _outcome(fn, x):
    LOG.clear()
    try:
        result = ("value", fn(x))
    except Exception as e:  # noqa: BLE001 (compared with eager's)
        result = ("raised", type(e), str(e))
    return result, list(LOG)


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return type(a) is type(b) and list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def _run(fn, dynamic, sizes) -> collections.Counter:
    framejit.reset()
    before = len(framejit.stats()["frames"])
    compiled = framejit.compile(fn, backend="eager", dynamic=dynamic)
    for size in sizes:
        x = torch.randn(size, 3, generator=torch.Generator().manual_seed(size))
        want, got = _outcome(fn, x.clone()), _outcome(compiled, x.clone())
        assert _same(want, got), (size, want, got)
    return collections.Counter(row["function"] for row in framejit.stats()["frames"][before:]
                               if row["cache"] == "miss")


@pytest.mark.parametrize("dynamic", [None, True], ids=["automatic", "dynamic"])
@pytest.mark.parametrize("fn", GENERATORS + KEYED + WALRUS, ids=lambda f: f.__name__)
def test_one_compilation_serves_every_size(fn, dynamic):
    eager = framejit.stats()["eager_frames"]
    traces = _run(fn, dynamic, SIZES)
    # the owner frame: static first (dynamic=None), symbolic, then size 0 and size 1 where they specialise
    assert traces[fn.__name__] <= (4 if dynamic is None else 3), traces
    assert max(traces.values()) <= 4 and sum(traces.values()) <= 10, traces
    # an eager entry only where an unrolled trace met eager's own exception (walrus at size 0, static)
    assert framejit.stats()["eager_frames"] - eager <= (1 if fn in WALRUS else 0)


@pytest.mark.parametrize("dynamic", [None, True], ids=["automatic", "dynamic"])
@pytest.mark.parametrize("fn", GENERATORS + KEYED + WALRUS, ids=lambda f: f.__name__)
def test_sizes_zero_and_one_first_raise_and_return_as_eager(fn, dynamic):
    _run(fn, dynamic, [0, 3, 1, 5, 0, 4, 1, 6])


def _with_start(x):  # sum(gen, start): NOTE [Consumers with more arguments]
    return sum((x[i] for i in range(x.size(0))), torch.zeros(3))


def _user_consumer(x):  # a user function consumes it: inlined and unrolled as before
    def total(gen):
        return sum(gen)
    return total(x[i] * 2 for i in range(x.size(0)))


def _shadowed(x):
    tuple = list  # noqa: A001 (a consumer that is not the builtin it is named after)
    return tuple(i for i in range(x.size(0)))


def _captured_dict(x):  # the opaque dict's first use cannot break (a closure captures it)
    d = {i: i for i in range(x.size(0))}

    def g():
        return len(d)
    d[-1] = 0
    return x * g(), g()


@pytest.mark.parametrize("fn", [_with_start, _user_consumer, _shadowed, _captured_dict],
                         ids=["start", "user_consumer", "shadowed", "captured_dict"])
@pytest.mark.parametrize("dynamic", [None, True], ids=["automatic", "dynamic"])
def test_other_consumers_and_uses_still_match_eager(fn, dynamic):
    _run(fn, dynamic, [3, 5, 0, 1, 4, 6])


def test_the_recompile_log_names_the_dimension_once(caplog):
    import logging
    framejit.set_logs("recompiles")
    try:
        with caplog.at_level(logging.INFO):
            _run(summed_rows, None, [3, 5, 7, 4, 9])
    finally:
        framejit.set_logs("")
    text = caplog.text
    assert "size of dim 0 of L['x'] changed" in text, text
    assert text.count("recompiling summed_rows ") == 1, text


class _Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, v):
        LOG.append("forward")
        return torch.relu(self.lin(v))


_LAYER = _Layer()


def _row(v, k=1):
    LOG.append(("row", k))
    return v * 2 + k


def _module_in_body(x):
    return sum(_LAYER(x[i]) for i in range(x.size(0)))


def _function_in_body(x):
    return tuple(_row(x[i], k=i) for i in range(x.size(0)))


_TORCH_LAYERS = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.ReLU())


def _torch_layers_in_body(x):  # NOTE [torch.nn layers routed]: torch's own forward, routed too
    return sum(_TORCH_LAYERS(x[i]) for i in range(x.size(0)))


def _function_in_nested(x):  # the inner generator expression's function is made in the outer's body
    return sum(sum(_row(x[i]) for _ in range(2)) for i in range(x.size(0)))


def _function_in_listcomp(x):  # 3.11: the comprehension's own function; 3.12+: inlined
    return torch.stack([_row(x[i]) for i in range(x.size(0))] + [x.sum(0)])


@pytest.mark.parametrize("fn, callee", [(_module_in_body, "_Layer.forward"), (_function_in_body, "_row"),
                                        (_function_in_nested, "_row"), (_function_in_listcomp, "_row"),
                                        (_torch_layers_in_body, "Sequential.forward")],
                         ids=["module", "function", "nested", "listcomp", "torch_layers"])
def test_calls_in_the_body_are_captured_as_frames(fn, callee):
    # NOTE [Comprehension bodies routed]: the body's callees are traced (once, plus once when the row's
    # storage offset first changes), the owner once; before, the callee ran eagerly on every call
    with torch.no_grad():
        traces = _run(fn, True, [3, 5, 0, 4, 2])
    assert 1 <= traces[callee] <= 2, traces
    assert traces[fn.__name__] <= 2, traces


def _row_read_by_python(v, w):
    n = int(w.item() > 0)  # a break on data inside the comprehension's body
    LOG.append(("read", n))
    return v * 2 + n


def _breaking_in_zipped_listcomp(x):
    return [_row_read_by_python(a, b) for a, b in zip(x, x.sum(1))]


def test_a_call_breaking_inside_a_comprehension_is_captured_as_a_frame():
    # NOTE [Comprehensions called at breaks] (3.11: the frame breaks at the `<listcomp>` call and ran the
    # comprehension as plain Python, its callee never captured; 3.12+: the inlined comprehension's tail routes
    # it): the callee is traced as its own frame, once (plus its storage offset and resume functions)
    with torch.no_grad():
        traces = _run(_breaking_in_zipped_listcomp, None, [3, 4])
    assert 1 <= traces["_row_read_by_python"] <= 2, traces


def _keys_looped(x):
    d = {i: i * i for i in range(x.size(0))}
    out = x.clone()
    for k in d:
        out = out + d[k]
    return out


def _items_looped(x):
    d = {i: x[i] for i in range(x.size(0))}
    out = x.sum()
    for n, (k, v) in enumerate(d.items()):
        if k == 6:
            return out * 3
        out = out + v.sum() * n
    return out


def _set_looped(x):
    s = {i % 4 for i in range(x.size(0))}
    out = []
    for k in s:
        out.append(_row(x[0] if len(x) else x.sum(), k=k))
    return x * len(out), out


def _values_list_looped(x):
    vals = list({i: x[i] for i in range(x.size(0))}.values())
    acc = x.new_zeros(3)
    for v in vals:
        LOG.append("v")
        acc = acc + v
    return acc


@pytest.mark.parametrize("fn", [_keys_looped, _items_looped, _set_looped, _values_list_looped],
                         ids=["keys", "items", "set", "values_list"])
def test_a_loop_over_a_result_of_changing_size_runs_as_python(fn):
    # NOTE [Loops over sequences of changing length]: the loop ran a resume function per step whose key
    # specialised (one trace per key value until the recompile limit); now no frame compiles per key or size
    traces = _run(fn, None, [3, 5, 0, 1, 7, 2, 6])
    assert traces[fn.__name__] <= 4, traces  # static, symbolic, 0 and 1
    assert all(n <= 3 for name, n in traces.items() if name != fn.__name__), traces


def _reversed_mutated(x):
    d = {i: x[i] for i in range(x.size(0))}
    out = x.sum()
    for k in reversed(d):
        if k == 5:
            d[50] = out  # eager raises RuntimeError at the next step
        out = out * 0.5 + d[k].sum()
    return out


def _iter_next_rest(x):
    d = {i: x[i] for i in range(x.size(0))}
    it = iter(d)
    first = next(it, None)
    out = x.sum()
    for k in it:
        if k == 3:
            break
        out = out + d[k].sum() * k
    return out, first, list(it)


def _enumerate_reversed_list(x):
    rows = [x[i] for i in range(x.size(0))]
    out = x.sum()
    for j, t in enumerate(reversed(rows)):
        LOG.append(j)
        if j == 4:
            break
        out = out + t.sum() * j
    else:
        out = out * 2
    return out


@pytest.mark.parametrize("fn", [_reversed_mutated, _iter_next_rest, _enumerate_reversed_list],
                         ids=["reversed", "iter_next", "enumerate_reversed"])
def test_a_loop_over_an_iterator_of_changing_length_runs_as_python(fn):
    # NOTE [Iterators over sequences of changing length]: the iterator was stepped in Python with the body as
    # a resume function that specialised each key (16 traces, then the recompile limit and an eager frame)
    eager = framejit.stats()["eager_frames"]
    traces = _run(fn, True, [3, 6, 0, 1, 7, 2])
    assert max(traces.values()) <= 3, traces
    assert framejit.stats()["eager_frames"] == eager


def _name_reused(x):
    d = {i: x[i] for i in range(x.size(0))}
    out = x.sum()
    for k in d:
        out = out + d[k].sum()
        if k == 5:
            d[k + 100] = out  # eager raises RuntimeError at the next step
    for k in d:  # stores `k` before reading it: the first loop's `k` is dead after it
        out = out * 1.01 + k
    return out


def _name_reused_in_outer_loop(x):
    d = {i: x[i] for i in range(x.size(0))}
    out = x.sum()
    for r in range(2):
        for k in d:
            out = out + d[k].sum() * r
        LOG.append(r)
        k = -1
        out = out + k
    return out


@pytest.mark.parametrize("fn", [_name_reused, _name_reused_in_outer_loop], ids=["two_loops", "outer_loop"])
def test_a_loop_whose_variable_is_stored_again_before_a_read_runs_as_python(fn):
    # NOTE [Locals first bound in a loop run as Python]: the loop variable was read after the first loop, so
    # that loop stepped per key (16 traces, the recompile limit, an eager frame)
    eager = framejit.stats()["eager_frames"]
    traces = _run(fn, True, [3, 6, 0, 1, 7, 2])
    assert max(traces.values()) <= 3, traces
    assert framejit.stats()["eager_frames"] == eager


def _variable_read_after(x):
    d = {i: x[i] for i in range(x.size(0))}
    out = x.sum()
    for k in d:
        out = out + d[k].sum()
    LOG.append("after")
    return out, k  # UnboundLocalError after an empty dict, as eager


def _variable_deleted_after(x):
    d = {i: x[i] for i in range(x.size(0))}
    out = x.sum()
    for k in d:
        out = out + d[k].sum()
    try:
        del k
    except NameError as e:  # an empty dict: the loop left it unbound
        LOG.append(type(e).__name__)
    return out


def _range_variable_in_block(x):
    out = x.sum()
    with torch.no_grad():
        for i in range(x.size(0)):
            out = out + x[i].sum() * i
    try:
        return out, i * 2
    except UnboundLocalError as e:
        return out, str(e)


@pytest.mark.parametrize("fn", [_variable_read_after, _variable_deleted_after, _range_variable_in_block],
                         ids=["read_after", "deleted_after", "range_in_block"])
def test_a_loop_variable_read_after_the_loop_runs_as_python(fn):
    # NOTE [Locals a loop run as Python may leave unbound]: the loop stepped per key or unrolled per size (16-32
    # traces, the recompile limit, an eager frame); size 0 traced statically meets eager's UnboundLocalError there
    eager = framejit.stats()["eager_frames"]
    traces = _run(fn, True, [3, 5, 0, 1, 7, 2, 6, 4, 9, 0])
    assert max(traces.values()) <= 3, traces
    assert framejit.stats()["eager_frames"] - eager <= 1


_W = torch.nn.Parameter(torch.ones(3))


def _no_grad_loop(x):
    out = (x * _W).sum()
    with torch.no_grad():
        for i in range(x.size(0)):
            LOG.append(torch.is_grad_enabled())
            if i == 6:
                raise KeyError(i)  # as eager: the block exits (grad mode restored), the error propagates
            out = out + _row(x[i]).sum()
    return out, out.requires_grad, torch.is_grad_enabled()


def _set_grad_loop_break(x):
    out = (x * _W).sum()
    with torch.set_grad_enabled(False):
        for i in range(x.size(0)):
            if i == 4:
                break
            out = out + x[i].sum() * i
    return out * 2, out.requires_grad, torch.is_grad_enabled()


@pytest.mark.parametrize("fn", [_no_grad_loop, _set_grad_loop_break], ids=["no_grad", "set_grad_break"])
def test_a_loop_ending_a_torch_state_block_runs_as_python(fn):
    # NOTE [Loops run as Python at the end of a with-block]: it unrolled (one trace per size, then the recompile
    # limit ran the frame eagerly); now the owner frame compiles for the static, symbolic, 0 and 1 sizes
    eager = framejit.stats()["eager_frames"]
    traces = _run(fn, None, [3, 5, 0, 1, 7, 2, 6, 4, 9, 8])
    assert traces[fn.__name__] <= 4, traces
    assert all(n <= 2 for name, n in traces.items() if name != fn.__name__), traces
    assert framejit.stats()["eager_frames"] == eager


def _doubled(v):
    LOG.append(("doubled", torch.is_grad_enabled()))
    return v * 2


def _code_after_the_loop_in_block(x):
    out = (x * _W).sum()
    with torch.no_grad():
        for i in range(x.size(0)):
            out = out + _row(x[i]).sum() * i
        LOG.append(torch.is_grad_enabled())
        out = _doubled(out)  # routed: captured as its own frame
        seven = [0] * 7
        seven[x.size(0)]  # IndexError at size 7 (or more), after the loop, inside the block
    return out, out.requires_grad, torch.is_grad_enabled()


def _nested_blocks_loop(x):
    out = (x * _W).sum()
    with torch.no_grad():
        with torch.enable_grad():
            for i in range(x.size(0)):
                LOG.append(torch.is_grad_enabled())
                if i == 4:
                    break
                out = out + x[i].sum() * i
    return out, out.requires_grad, torch.is_grad_enabled()


def _raising_arm_before_exit(x):
    out = (x * _W).sum()
    with torch.enable_grad():
        with torch.no_grad():
            for i in range(x.size(0)):
                out = out + x[i].sum() * i
            if x.size(0) == 5:  # NOTE [Raising arms before a with-block's exit]: raised in the tail, as eager
                raise KeyError("five", torch.is_grad_enabled())
            if x.size(0) == 7:
                raise ValueError("seven") from KeyError(7)
        out = out * 3
    return out, out.requires_grad, torch.is_grad_enabled()


@pytest.mark.parametrize("fn", [_code_after_the_loop_in_block, _nested_blocks_loop, _raising_arm_before_exit],
                         ids=["code_after", "nested", "raising_arm"])
def test_a_loop_ending_torch_state_blocks_through_straight_code_runs_as_python(fn):
    # NOTE [Loops run as Python at the end of a with-block]: code after the loop inside the block, blocks nested,
    # or a conditional raise before the exit, unrolled the range (one trace per size, the recompile limit)
    eager = framejit.stats()["eager_frames"]
    traces = _run(fn, True, [3, 5, 0, 1, 7, 2, 6, 4, 9])
    assert max(traces.values()) <= 3, traces
    assert framejit.stats()["eager_frames"] == eager
    assert fn is not _code_after_the_loop_in_block or traces["_doubled"] >= 1, traces


def _bound_after_the_loop(x):
    out = (x * _W).sum()
    with torch.no_grad():
        for i in range(x.size(0)):
            out = out + x[i].sum() * i
        doubled = out * 2  # first bound here, read after the block
        LOG.append(torch.is_grad_enabled())
    return doubled, doubled.requires_grad, torch.is_grad_enabled()


def _bound_between_exits(x):
    out = (x * _W).sum()
    with torch.no_grad():
        with torch.enable_grad():
            for i in range(x.size(0)):
                out = out + x[i].sum() * i
            scaled = out * 3
        shifted = scaled + 1
    return scaled, shifted, shifted.requires_grad


@pytest.mark.parametrize("fn", [_bound_after_the_loop, _bound_between_exits], ids=["after_loop", "between_exits"])
def test_a_local_bound_after_the_loop_in_its_block_runs_as_python(fn):
    # NOTE [Locals bound after a loop inside its with-block]: a local first bound after the loop and read after
    # the block counted as one the body binds: the range unrolled (one trace per size, the recompile limit)
    eager = framejit.stats()["eager_frames"]
    traces = _run(fn, True, [3, 5, 0, 1, 7, 2, 6, 4, 9])
    assert max(traces.values()) <= 3, traces
    assert framejit.stats()["eager_frames"] == eager


def _comprehension_in_block(x):
    with torch.no_grad():
        rows = [_doubled(x[i]) for i in range(x.size(0))]  # 3.11: its own function's call; 3.12+: inlined
        n = len(rows) + 1  # first bound after it, read after the block
    return torch.stack(rows) if rows else x, n, torch.is_grad_enabled()


def _genexpr_in_block(x):
    with torch.enable_grad():
        with torch.no_grad():
            total = sum(x[i] * i for i in range(x.size(0)))
    return total, getattr(total, "requires_grad", None)


@pytest.mark.parametrize("fn", [_comprehension_in_block, _genexpr_in_block], ids=["listcomp", "genexpr"])
def test_a_comprehension_ending_a_torch_state_block_runs_as_python(fn):
    # NOTE [Comprehensions ending a with-block]: the range unrolled under the block (one trace per size, the
    # recompile limit, an eager frame)
    eager = framejit.stats()["eager_frames"]
    traces = _run(fn, True, [3, 5, 0, 1, 7, 2, 6, 4, 9])
    assert max(traces.values()) <= 3, traces
    assert framejit.stats()["eager_frames"] == eager


def _raised_in_try(x):
    out = (x * _W).sum()
    try:
        with torch.no_grad():
            for i in range(x.size(0)):
                LOG.append(torch.is_grad_enabled())
                if i == 3:
                    raise KeyError(i)  # handled by the tail function's copy of the except body, as eager
                out = out + x[i].sum() * i
    except KeyError as e:
        LOG.append(("caught", e.args, torch.is_grad_enabled()))
        out = out - 1
    return out, out.requires_grad, torch.is_grad_enabled()


def _comprehension_in_try(x):
    try:
        with torch.enable_grad():
            with torch.no_grad():
                rows = [x[i] * 2 for i in range(x.size(0))]
                if x.size(0) == 5:
                    raise KeyError(5)
    except KeyError:
        rows = "caught"
    return rows, torch.is_grad_enabled()


def _raised_after_block_in_try(x):
    out = (x * _W).sum()
    try:
        with torch.no_grad():
            for i in range(x.size(0)):
                out = out + x[i].sum()
        doubled = _doubled(out)  # after the trampoline: in the resume function, inside the try
        if x.size(0) == 7:
            raise ValueError("seven")  # handled by the resume function's copy of the except body
    except ValueError as e:
        doubled = str(e)
    finally:
        LOG.append(("finally", torch.is_grad_enabled()))
    return doubled, out.requires_grad


@pytest.mark.parametrize("fn", [_raised_in_try, _comprehension_in_try, _raised_after_block_in_try],
                         ids=["raised_in_body", "comprehension", "raised_after"])
def test_torch_state_blocks_inside_a_try_body_end_a_loop_run_as_python(fn):
    # NOTE [With-blocks inside a try body]: a try around the blocks refused the loop: the range unrolled (one trace
    # per size, the recompile limit, an eager frame; stock torch.compile the same)
    eager = framejit.stats()["eager_frames"]
    traces = _run(fn, True, [3, 5, 0, 1, 7, 2, 6, 4, 9])
    assert max(traces.values()) <= 3, traces
    assert framejit.stats()["eager_frames"] == eager


def _calls_after_a_raise_in_try(x):
    out = (x * _W).sum(0)
    try:
        with torch.no_grad():
            for i in range(x.size(0)):
                if i == 2:
                    raise KeyError(i)  # every size from 3: the except body runs in the tail function
                out = out + x[i]
    except KeyError as e:
        out = _doubled(out) + e.args[0]  # routed: its own frame
    return _TORCH_LAYERS(out), out.requires_grad  # after the try, reached from the except body: routed too


def test_calls_on_the_exception_path_of_a_loop_in_a_try_are_captured_as_frames():
    # NOTE [Calls of a tail function outside its loop] in resume.py: the except body and the code after the try ran
    # in the tail function as plain Python, so `_doubled` and the layers were never compiled (review revL H1)
    eager = framejit.stats()["eager_frames"]
    traces = _run(_calls_after_a_raise_in_try, True, [3, 5, 4, 7, 6])
    assert 1 <= traces["_doubled"] <= 2 and 1 <= traces["Sequential.forward"] <= 2, traces
    assert framejit.stats()["eager_frames"] == eager


def _summed_from_start(x):
    with torch.no_grad():
        total = sum((x[i] * i for i in range(x.size(0))), _doubled(x.new_ones(3)))  # start: after the generator
    return total, total.requires_grad


def _largest_or_default(x):
    largest = max((x[i].sum() for i in range(x.size(0))), default=None)  # None at size 0, as eager
    return largest, torch.is_grad_enabled()


def _sorted_by_key(x):
    with torch.enable_grad():
        with torch.no_grad():
            rows = sorted((x[i].sum() for i in range(x.size(0))), key=lambda v: -v)
    return rows


@pytest.mark.parametrize("fn", [_summed_from_start, _largest_or_default, _sorted_by_key],
                         ids=["sum_start", "max_default", "sorted_key"])
def test_a_generator_consumer_with_more_arguments_runs_as_python(fn):
    # NOTE [Consumers with more arguments]: only `consumer(genexpr)` was taken: with a start, a default or a key the
    # range unrolled (one trace per size, the recompile limit, an eager frame; stock torch.compile the same)
    eager = framejit.stats()["eager_frames"]
    traces = _run(fn, True, [3, 5, 0, 1, 7, 2, 6, 4, 9])
    assert max(traces.values()) <= 3, traces
    assert framejit.stats()["eager_frames"] == eager


@contextlib.contextmanager
def _logging_manager():
    LOG.append("enter")
    yield
    LOG.append("exit")


def _user_manager_loop(x):
    out = x.sum()
    with _logging_manager():
        for i in range(x.size(0)):
            out = out + x[i].sum() * i
    return out


def _suppress_loop(x):
    out = x.sum()
    with contextlib.suppress(KeyError):
        for i in range(x.size(0)):
            if i == 4:
                raise KeyError(i)  # suppressed by the block, as eager
            out = out + x[i].sum()
    return out


def _sdpa_kernel_loop(x):
    out = x.sum()
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        for i in range(x.size(0)):
            out = out + x[i].sum()
    return out


@pytest.mark.parametrize("fn", [_user_manager_loop, _suppress_loop, _sdpa_kernel_loop],
                         ids=["contextmanager", "suppress", "sdpa_kernel"])
def test_a_loop_ending_another_with_block_unrolls_as_before(fn):
    # NOTE [Loops run as Python at the end of a with-block]: a manager that is not a torch state block was
    # refused only in code generation, after the loop was chosen: the frame ran eagerly from the second size
    eager = framejit.stats()["eager_frames"]
    traces = _run(fn, None, [3, 5, 3, 5])
    assert traces == {fn.__name__: 2}, traces  # one unrolled trace per size, each served again
    assert framejit.stats()["eager_frames"] == eager


def _values_starred(x):
    vs = {i: x[i] for i in range(x.size(0))}.values()
    rows = [x.sum(0), *vs]  # LIST_EXTEND reads the view: no break there, the view's length is guarded
    return torch.stack(rows).sum(0) * 2


def _keys_compared(x):
    ks = {i: i for i in range(x.size(0))}.keys()
    same = ks == {0, 1, 2}  # the set display's SET_UPDATE does not read the view; the COMPARE_OP does
    return x + int(same), same


def _items_sorted(x):
    it = {i: x[i] for i in range(x.size(0))}.items()
    return sum(v.sum() for k, v in sorted(it, key=lambda kv: -kv[0])) + x.sum()  # the lambda's MAKE_FUNCTION


@pytest.mark.parametrize("fn", [_values_starred, _keys_compared, _items_sorted],
                         ids=["starred", "compared", "sorted"])
def test_a_view_read_inside_an_expression_breaks_at_its_reader(fn):
    # NOTE [Readers of opaque operands]: the break came at an instruction that no frame can resume after, so
    # the resume function holding the view (and its tensor code) ran eagerly on every call
    eager = framejit.stats()["eager_frames"]
    traces = _run(fn, None, [3, 5, 0, 1, 4])
    assert traces[fn.__name__] <= 4, traces
    assert framejit.stats()["eager_frames"] == eager


def _popped(x):
    d = {i: x[i] for i in range(x.size(0))}
    if d:
        k, v = d.popitem()  # a tuple, not a view: not opaque (NOTE [Only views of opaque containers are opaque])
        return v * k, len(d)
    return x, 0


def test_a_popped_item_does_not_recompile_per_size():
    eager = framejit.stats()["eager_frames"]
    traces = _run(_popped, True, [3, 5, 0, 1, 4, 7, 2, 6, 9, 10])
    assert sum(traces.values()) <= 8 and max(traces.values()) <= 3, traces  # was 14, then an eager frame
    assert framejit.stats()["eager_frames"] == eager
