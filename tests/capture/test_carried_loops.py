"""Loops whose body breaks on every iteration (NOTE [Loops carried across breaks], [Strings carried across
breaks] in capture/carried_loops.py, NOTE [Dynamic layouts] in capture/shapes.py): the resume functions of
such a loop must not recompile once per iteration (which ended, at the recompile limit, in a frame run
wholly eagerly). Differential: eager and compiled on fresh inputs over several calls, printed output
compared, no frame run eagerly by framejit."""
from __future__ import annotations

import contextlib
import io
import logging

import pytest
import torch
import torch.nn as nn

import framejit
from framejit.capture import carried_loops
from tests.helpers import CountingBackend, eager_frames


@pytest.fixture(autouse=True)
def _fresh():
    framejit.reset()
    yield
    framejit.reset()


def _run(fn, compiled, make_args, calls):
    for seed in range(calls):
        args = make_args(seed)
        expected_out, got_out = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(expected_out):
            expected = fn(*args)
        with contextlib.redirect_stdout(got_out):
            got = compiled(*make_args(seed))
        torch.testing.assert_close(got, expected)
        assert got_out.getvalue() == expected_out.getvalue()


def rows_with_print(x, rows):
    for r in rows:
        x = x * 2 + r
        print("step", r.shape[0])
    return x.sum()


def _rows_args(seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(4, generator=g), torch.randn(12, 4, generator=g)


def test_long_loop_over_tensor_rows_breaking_every_step():
    backend = CountingBackend()
    compiled = framejit.compile(rows_with_print, backend=backend)
    before = eager_frames()
    _run(rows_with_print, compiled, _rows_args, calls=3)
    assert eager_frames() == before
    assert backend.graph_count <= 10  # 12 steps a call: one entry per step would pass the recompile limit


def test_a_loop_position_that_changed_is_not_called_symbolic(caplog):
    """NOTE [Loop positions are no symbols]: the recompile of a resume function for another loop position
    logged "the int iterator_index(...) changed value; it is symbolic from now on", which nothing made it."""
    compiled = framejit.compile(rows_with_print, backend="eager")
    framejit.set_logs("recompiles")
    try:
        with caplog.at_level(logging.INFO, logger="framejit"):
            _run(rows_with_print, compiled, lambda seed: (_rows_args(seed)[0], list(_rows_args(seed)[1][:6])), calls=2)
    finally:
        framejit.set_logs("")
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "CONSTANT_MATCH on iterator_index(" in text, text  # the position changed: the program still shows it
    assert "iterator_index(L['___stack0']) changed value" not in text, text


def test_long_loop_without_step_breaks_hits_the_limit(monkeypatch):
    """The same program with the loop never broken at its steps: what the rule above prevents."""
    monkeypatch.setattr(carried_loops, "LOOP_POSITIONS", 10 ** 6)
    # a loop body's resume function may have twice the limit's entries (NOTE [Resume functions take the same
    # locals on every pass]): 2 * 5 < 12 steps
    monkeypatch.setattr(framejit.config, "recompile_limit", 5)
    compiled = framejit.compile(rows_with_print, backend=CountingBackend())
    before = eager_frames()
    _run(rows_with_print, compiled, _rows_args, calls=2)
    assert eager_frames() > before


class Dense(nn.Module):
    def __init__(self):
        super().__init__()
        self.wi, self.wo = nn.Linear(8, 16), nn.Linear(16, 8)

    def forward(self, x):
        return self.wo(torch.relu(self.wi(x)))


class Experts(nn.ModuleDict):
    """transformers' SwitchTransformersExperts loop: nonzero(), torch.where and an f-string module name
    per expert hit (three breaks in each iteration)."""

    def __init__(self, n=4):
        super().__init__()
        for idx in range(n):
            self[f"expert_{idx}"] = Dense()

    def forward(self, hidden_states, selected_experts, routing_weights):
        final_hidden_states = torch.zeros_like(hidden_states)
        expert_mask = selected_experts.permute(2, 1, 0)
        expert_hit = torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()
        for expert_idx in expert_hit:
            idx, top_x = torch.where(expert_mask[expert_idx].squeeze(0))
            current_state = hidden_states[None, top_x].reshape(-1, hidden_states.shape[-1])
            current = self[f"expert_{expert_idx[0]}"](current_state) * routing_weights[top_x, idx, None]
            final_hidden_states.index_add_(0, top_x, current.to(hidden_states.dtype))
        return final_hidden_states


def _routing(seed, n=4, tokens=10):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(tokens, 8, generator=g)
    chosen = torch.randint(0, n, (tokens,), generator=g)
    return hidden, nn.functional.one_hot(chosen, n).view(tokens, 1, n), torch.rand(tokens, 1, generator=g)


def test_moe_expert_loop_runs_no_frame_eagerly():
    torch.manual_seed(0)
    model = Experts().eval()
    compiled = framejit.compile(model, backend=CountingBackend())
    before = eager_frames()
    with torch.no_grad():
        _run(model, compiled, _routing, calls=6)
    assert eager_frames() == before


class NamedLayers(nn.ModuleDict):
    """A module picked by a name built from tensor data on each step (the name reaches the resume function
    as a string that changes every iteration)."""

    def __init__(self, n=6):
        super().__init__({f"layer_{i}": nn.Linear(4, 4) for i in range(n)})

    def forward(self, x, order):
        for k in order:
            x = torch.tanh(self[f"layer_{k}"](x))  # formatting a 0-d tensor: a break, then a str
        return x


def test_module_names_from_tensor_data_become_opaque():
    torch.manual_seed(0)
    model = NamedLayers()
    backend = CountingBackend()
    compiled = framejit.compile(model, backend=backend)

    def args(seed):
        g = torch.Generator().manual_seed(seed)
        return torch.randn(2, 4, generator=g), torch.randperm(6, generator=g)

    before = eager_frames()
    with torch.no_grad():
        _run(model, compiled, args, calls=4)
    assert eager_frames() == before


class _Stepper:
    """An iterator class whose `__iter__` returns self and whose `__next__` logs each step."""

    def __init__(self, rows, log):
        self.rows, self.i, self.log = rows, 0, log

    def __iter__(self):
        return self

    def __next__(self):
        self.log.append(("next", self.i))
        if self.i >= self.rows.shape[0]:
            raise StopIteration
        self.i += 1
        return self.rows[self.i - 1]


def loop_over_user_iterator(x, log):
    out = []
    for v in _Stepper(x, log):
        s = v.sum().item()  # a break on data in every step
        log.append("body")
        out.append(v * s)
    return out


def loop_over_callable_iterator(x, log):
    rows, pos = list(x.unbind(0)), [0]

    def draw():
        pos[0] += 1
        log.append(pos[0])
        return rows[pos[0] - 1] if pos[0] <= len(rows) else None
    out = []
    for v in iter(draw, None):
        s = v.sum().item()
        out.append(v * s)
    return out


@pytest.mark.parametrize("fn", [loop_over_user_iterator, loop_over_callable_iterator])
def test_loop_over_an_iterator_no_value_models_steps_in_python(fn):
    """NOTE [Other iterators stepped as Python]: the resume function's FOR_ITER got the iterator itself (an
    internal error, or "L['___stack0'] is a callable_iterator"): it ran wholly eagerly. Now each step runs
    as Python (its `__next__` once per step, as eager) and the body is one resume function for every length."""
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend)
    before = eager_frames()
    for n in (3, 5, 2, 4):
        x = torch.randn(n, 4)
        expected_log, got_log = [], []
        torch.testing.assert_close(compiled(x, got_log), fn(x, expected_log))
        assert got_log == expected_log
    assert eager_frames() == before, framejit.stats()["eager_frame_reasons"][before:]
    assert 1 <= backend.graph_count <= 10, backend.graph_count


class _Queue:
    """A work queue iterated by a for loop whose body may add work (`__iter__` returns self)."""

    def __init__(self, items, log):
        self.items, self.log = list(items), log

    def __iter__(self):
        return self

    def __next__(self):
        self.log.append(("next", len(self.items)))
        if not self.items:
            raise StopIteration
        return self.items.pop(0)


def drain_work_queue(x, q):
    out = []
    for v in q:
        for w in x:  # an inner loop breaking on data: run as Python, its exit a trampoline
            out.append(v * w.sum().item())
        if v.sum().item() > 0 and len(out) < 6:
            q.items.append(v / 2)  # work the eager loop steps to later
    return out


def take_two(x, it):
    out = []
    for v in it:
        try:  # a try block: the body's rest is a tail function
            s = v.sum().item()
        except RuntimeError:
            s = 0.0
        out.append(x * s)
        if len(out) == 2:
            break
    return out


def _drawn(items, log):
    items = list(items)

    def draw():
        log.append(len(items))
        return items.pop(0) if items else None
    return iter(draw, None)  # a callable_iterator


def test_unmodelled_iterator_is_not_drained_at_a_trampoline():
    """NOTE [Iterators passed unread] (review revE HIGH-1): the loop's iterator reached a tail
    function's trampoline as `list(it)`: all its later `__next__` ran at the first step, the work the body
    queued was never seen (6 items where eager steps 16 in revE r2.py) and the caller's iterator was exhausted after a break."""
    compiled_queue = framejit.compile(drain_work_queue, backend=CountingBackend())
    compiled_two = framejit.compile(take_two, backend=CountingBackend())
    for n in (3, 4, 2):
        g = torch.Generator().manual_seed(n)
        x, rows = torch.randn(n, 2, generator=g), torch.randn(n, 2, generator=g)
        expected_log, got_log = [], []
        expected = drain_work_queue(x, _Queue(rows.unbind(0), expected_log))
        got = compiled_queue(x, _Queue(rows.unbind(0), got_log))
        torch.testing.assert_close(got, expected)
        assert got_log == expected_log
        for make in (lambda log: _Queue(rows.unbind(0), log), lambda log: _drawn(rows.unbind(0), log)):
            expected_log, got_log = [], []
            expected_it, got_it = make(expected_log), make(got_log)
            torch.testing.assert_close(compiled_two(x[0], got_it), take_two(x[0], expected_it))
            torch.testing.assert_close(list(got_it), list(expected_it))  # the caller goes on where the loop broke
            assert got_log == expected_log


def alias_dict_iterator(x, d):
    it = iter(d)  # made by the trace (a value models it), and the program's own object
    out = []
    for k in it:
        try:
            s = d[k].sum().item()
        except RuntimeError:
            s = 0.0
        out.append(x * s)
        if len(out) == 2:
            break
    return out, next(it, -1)


def test_modelled_iterator_held_by_a_local_is_not_drained_at_a_trampoline():
    """NOTE [Iterators passed unread]: the try block's trampoline passed `list(it)`, exhausting the local
    `it`: next(it) after the break gave -1 (exhausted) where eager gives the third key."""
    compiled = framejit.compile(alias_dict_iterator, backend=CountingBackend())
    for n in (3, 4, 2):
        g = torch.Generator().manual_seed(n)
        d, x = {i: torch.randn(2, generator=g) for i in range(n)}, torch.randn(2, generator=g)
        torch.testing.assert_close(compiled(x, d), alias_dict_iterator(x, d))
