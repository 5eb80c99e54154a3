"""Generators with try/finally, except or with-blocks that change state, traced step by step in their
consumer's order when they end within the trace (NOTE [Generators with finalizers traced lazily] in
capture/lazy_generators.py). Before, any such generator made the frame that consumed it run wholly eagerly.

Each program runs eagerly and compiled on fresh inputs (two shapes) with state reset to a per-call value;
the result, the log of effects (order included), the flags and grad mode left behind must be eager's. The
captured ones make one graph per shape and no eager frame; where eager closes a suspended generator (a
break, del, an exception, a list of them dropped, a generator kept or returned) the frame runs eagerly."""
from __future__ import annotations

import contextlib

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, assert_same

LOG: list = []
STATE = {"on": False, "k": 1}
STACK: list = []
LAYERS = torch.nn.ModuleList([torch.nn.Linear(4, 4) for _ in range(3)])


def _reset(call):
    LOG[:] = [("call", call % 2)]
    STATE["on"], STATE["k"] = False, 1 + call % 2
    STACK.clear()
    torch.set_grad_enabled(True)


def _compare(fn, calls=4):
    """Eager and compiled per call; the counting backend and the frames framejit ran wholly eagerly."""
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend)
    eager_before = framejit.stats()["eager_frames"]  # process-wide: other tests' frames are in it
    try:
        for call in range(calls):
            x = torch.randn(8 + 4 * (call // 2), 4) + call
            runs = []
            for run in (fn, compiled):
                _reset(call)
                try:
                    result, error = run(x.clone()), None
                except Exception as e:  # noqa: BLE001 - compared with eager's
                    result, error = None, (type(e), str(e))
                runs.append((result, error, list(LOG), dict(STATE), list(STACK), torch.is_grad_enabled()))
            assert runs[1][1:] == runs[0][1:], (runs[1][1:], runs[0][1:])
            assert_same(runs[1][0], runs[0][0])
    finally:
        torch.set_grad_enabled(True)
    return backend, framejit.stats()["eager_frames"] - eager_before


def chunks(x, n):
    LOG.append("open")
    try:
        for c in x.chunk(n):
            yield c
    finally:
        LOG.append("close")


def layers(ms):
    STATE["on"] = True
    try:
        for m in ms:
            yield m
    finally:
        STATE["on"] = False


def inner(x):
    LOG.append("inner-start")
    try:
        yield x + 1
        yield x + 2
    finally:
        LOG.append("inner-end")


def outer(x):
    yield x
    yield from inner(x)
    LOG.append("outer-after")


def frozen(x):
    with torch.no_grad():
        for c in x.chunk(2):
            LOG.append(torch.is_grad_enabled())
            yield c * 2
    LOG.append(("frozen-done", torch.is_grad_enabled()))


@contextlib.contextmanager
def push(name):
    STACK.append(name)
    try:
        yield
    finally:
        STACK.pop()


def with_push(x):
    with push("g"):
        yield x * len(STACK)
        yield x * 2
    LOG.append("gen-done")


def cm_like(v):
    LOG.append(("enter", v))
    old = STATE["on"]
    STATE["on"] = v
    try:
        yield v
    finally:
        STATE["on"] = old
        LOG.append("exit")


def safe_scale(x, table):
    for i, c in enumerate(x.chunk(2)):
        try:
            s = table[i]
        except KeyError:
            s = 10
            LOG.append(("miss", i))
        yield c * s


def loop_over_chunks(x):
    out = []
    for c in chunks(x, 3):
        out.append(c.sin())
        LOG.append("use")
    LOG.append("after")
    return torch.cat(out)


def layers_flag(x):
    for m in layers(LAYERS):
        x = m(x) * (2 if STATE["on"] else 1)
    return x * (2 if STATE["on"] else 1)


def yield_from(x):
    s = 0
    for v in outer(x):
        s = s + v
        LOG.append("use")
    return s


def no_grad_inside(x):
    x = x.requires_grad_()
    ys = []
    for c in frozen(x):
        ys.append((c * x.chunk(2)[0]).sum())
        LOG.append(("body", torch.is_grad_enabled()))
    LOG.append(("after", torch.is_grad_enabled()))
    return torch.stack(ys), torch.stack(ys).requires_grad


def manager_used_directly(x):
    g = cm_like(True)
    v = next(g)
    y = x * (2 if STATE["on"] else 3) + v
    next(g, None)
    return y + (1 if STATE["on"] else 0)


def with_block_inside(x):
    return [v + len(STACK) for v in with_push(x)]


def listed(x):
    cs = list(chunks(x, 2))
    LOG.append("listed")
    return torch.cat(cs) * 2


def except_inside(x):
    return torch.cat(list(safe_scale(x, {0: 2})))


def next_then_loop(x):
    g = chunks(x, 2)
    a = next(g)
    for rest in g:
        a = a + rest.sum()
    LOG.append("end")
    return a


@pytest.mark.parametrize("fn", [loop_over_chunks, layers_flag, yield_from, no_grad_inside, manager_used_directly,
                                with_block_inside, listed, except_inside, next_then_loop])
def test_generator_with_finalizers_ended_in_the_trace_is_captured(fn):
    backend, eager = _compare(fn)
    assert (backend.graph_count, eager) == (2, 0)  # one graph per shape, nothing eager


def breaks_out(x):
    s = x.sum() * 0
    for i, c in enumerate(chunks(x, 4)):
        s = s + c.sum()
        if i == 1:
            break  # eager closes the generator here: "close" before "after"
    LOG.append("after")
    return s


def kept_in_a_local(x):
    g = chunks(x, 4)
    s = x.sum() * 0
    for c in g:
        s = s + c.sum()
        break
    LOG.append("after-loop")  # eager: "close" only when the frame returns
    return s


def deleted(x):
    g = chunks(x, 4)
    a = next(g)
    del g
    LOG.append("deleted")
    return a


def raises_in_the_loop(x):
    try:
        for m in layers(LAYERS):
            x = m(x)
            if STATE["on"]:
                raise ValueError("v")
    except ValueError:
        LOG.append(("caught", STATE["on"]))  # eager: the flag was reset while unwinding
    return x + (1 if STATE["on"] else 0)


def _starts_and_raises(x):
    g = inner(x)
    next(g)
    raise ValueError("callee")


def callee_raises(x):
    try:
        _starts_and_raises(x)
    except ValueError:
        LOG.append("caught")  # eager: the traceback keeps the callee's frame: "inner-end" after this
    LOG.append("after")
    return x * 2


def list_dropped(x):
    gs = [chunks(x, 2), inner(x), chunks(x, 3)]
    for g in gs:
        next(g)
    gs = None  # eager closes them last-first
    LOG.append("dropped")
    return x + 1


def returned_started(x):
    g = chunks(x, 2)
    a = next(g)
    return a, len(LOG)


def yield_from_broken(x):
    s = 0
    for i, v in enumerate(outer(x)):
        s = s + v
        if i == 1:
            break
    LOG.append("after")
    return s


def any_stops_early(x):
    r = any(c.sum() > -1e9 for c in chunks(x, 2))
    LOG.append("any")
    return x * 2 if r else x


def closed_explicitly(x):
    g = chunks(x, 2)
    a = next(g)
    g.close()
    LOG.append("closed")
    return a


def no_grad_broken(x):
    x = x.requires_grad_()
    for c in frozen(x):
        y = c * x.chunk(2)[0]
        break
    LOG.append(("after", torch.is_grad_enabled()))
    return y, y.requires_grad


@pytest.mark.parametrize("fn", [breaks_out, kept_in_a_local, deleted, raises_in_the_loop, callee_raises,
                                list_dropped, returned_started, yield_from_broken, any_stops_early,
                                closed_explicitly, no_grad_broken])
def test_generator_closed_while_suspended_keeps_eagers_order(fn):
    _compare(fn)


def gen_switch(x):
    try:
        for i in range(STATE["k"]):
            yield x * i
    finally:
        LOG.append(("k", STATE["k"]))


def state_changes_between_calls(x):
    r = x * 0
    for v in gen_switch(x):
        r = r + v
    LOG.append("done")
    return r


def test_state_read_by_the_generator_is_guarded():
    backend, eager = _compare(state_changes_between_calls, calls=6)
    assert eager == 0 and backend.graph_count == 4  # two values of STATE["k"], two shapes


def blocks_maybe_logged(x, logged):
    try:
        for c in x.chunk(4):
            yield c
    finally:
        if logged:
            LOG.append("fin")


def enumerated_blocks(x, logged):  # enumerate() cannot draw a lazy generator with finalizers one step at a time
    s = x.sum() * 0
    for i, t in enumerate(blocks_maybe_logged(x, logged)):
        s = s + t.sum() * i
    return s


def looped_blocks(x, logged):
    s = x.sum() * 0
    for t in blocks_maybe_logged(x, logged):
        s = s + t.sum()
    return s


def test_lazy_decision_is_per_frame_and_call():
    """NOTE [Lazy generators decided per frame] (review revT T4): `looped_blocks(x, True)` finds the generator
    changing state and traces it lazily; that no longer makes `enumerated_blocks(x, False)` (under which the
    generator changes nothing, so it runs ahead) run wholly eagerly, nor does the frame's own earlier lazy call
    `enumerated_blocks(x, True)` (eager: enumerate over a lazy one) decide its later calls with False."""
    backend_a, backend_b = CountingBackend(), CountingBackend()
    a, b = framejit.compile(enumerated_blocks, backend=backend_a), framejit.compile(looped_blocks, backend=backend_b)
    eager_frames = []
    for n, logged in ((8, True), (8, False), (12, False), (16, True), (20, False)):
        before = framejit.stats()["eager_frames"]
        for fn, compiled in ((looped_blocks, b), (enumerated_blocks, a)):
            x = torch.randn(n, 3)
            LOG.clear()
            want = (fn(x, logged), list(LOG))
            LOG.clear()
            got = (compiled(x, logged), list(LOG))
            assert_same(got[0], want[0])
            assert got[1] == want[1]
        eager_frames.append(framejit.stats()["eager_frames"] - before)
    assert eager_frames == [1, 0, 0, 1, 0]  # only enumerate over the generator that logs
    assert backend_b.graph_count >= 2 and backend_a.graph_count >= 2
