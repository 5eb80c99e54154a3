"""Callees that read the frame stack break at their call; generators driven with send(); warnings.warn.

NOTE [Breaks at calls that read frames] in framejit/capture/frame_locals.py, NOTE [Generator functions at
breaks] and NOTE [Warnings past the hook]. Differential: eager vs framejit.compile over three calls with
changing shapes and values; what the callee reads from its caller's frame (the names and values of its
locals, its function name and line) must agree, and the caller must stay compiled (graphs reach the
backend, no frame runs wholly eagerly) where the break can be exact.
"""
import inspect
import sys
import warnings

import pytest
import torch

import framejit


class _Counter:
    def __init__(self):
        self.graphs = 0

    def __call__(self, gm, example_inputs):
        self.graphs += 1
        return gm.forward


def _plain(v):
    if isinstance(v, torch.Tensor):
        return ("tensor", tuple(v.shape), v.detach().tolist())
    if isinstance(v, (list, tuple)):
        return (type(v).__name__, [_plain(a) for a in v])
    if isinstance(v, dict):
        return ("dict", [(k, _plain(a)) for k, a in v.items()])
    return v


def _run(fn, x):
    try:
        return ("ok", _plain(fn(x)))
    except Exception as e:  # the exception's type and message are compared
        return ("raised", type(e).__name__, str(e))


def _check(make, sizes=(3, 5, 4)):
    """Eager vs compiled over calls with changing shapes; returns (graphs, frames run wholly eagerly)."""
    framejit.reset()
    fn, compiled_fn = make(), make()
    counter = _Counter()
    compiled = framejit.compile(compiled_fn, backend=counter)
    eager_before = framejit.stats()["eager_frames"]
    for n in sizes:
        x = torch.randn(n, 4) + n
        expected, got = _run(fn, x), _run(compiled, x)
        assert expected[0] == "ok", expected
        assert got == expected, (n, expected, got)
    return counter.graphs, framejit.stats()["eager_frames"] - eager_before


def _caller_view(*args, **kwargs):
    """What a frame reader sees of its caller: local names and values, function name, line offset."""
    frame = sys._getframe(1)
    local_view = {k: (_plain(v) if isinstance(v, (torch.Tensor, int, float, str, list, tuple)) else type(v).__name__)
                  for k, v in frame.f_locals.items()}
    return local_view, frame.f_code.co_name, frame.f_lineno - frame.f_code.co_firstlineno, len(args), sorted(kwargs)


def test_callee_reading_its_callers_locals_breaks_at_its_call():
    def make():
        def f(x):
            a = x.sin()
            y = a * 2  # noqa: F841 (dead after the call: only the reader sees it)
            view = _caller_view()
            return (a + 1).cos(), view
        return f
    graphs, eager_frames = _check(make)
    assert eager_frames == 0
    assert graphs >= 2  # before and after the call, on each of the 2 traces (shape change)


def test_reader_called_with_positional_and_keyword_arguments():
    def make():
        def f(x):
            a = x.sin()
            n = 3
            view = _caller_view(a, n, key=a * 2, other=n)
            return a.cos() * n, view
        return f
    graphs, eager_frames = _check(make)
    assert eager_frames == 0 and graphs >= 2


def _append_local_count(items):
    items.append(len(sys._getframe(1).f_locals))
    return items


def test_reader_receives_the_callers_own_objects():
    def make():
        def f(x):
            a = x.sin()
            items = [a.shape[0]]
            back = _append_local_count(items)
            return a.cos() + len(items), back is items, items
        return f
    graphs, eager_frames = _check(make)
    assert eager_frames == 0 and graphs >= 2


def test_two_readers_one_after_a_print_break():
    def make():
        def f(x):
            a = x.sin()
            first = _caller_view()
            print("between")
            b = a * 2
            second = _caller_view()
            return b.cos(), first, second
        return f
    graphs, eager_frames = _check(make)
    assert eager_frames == 0 and graphs >= 3


def test_reader_after_a_deleted_local_and_with_a_closure_variable():
    def make():
        scale = 3

        def f(x):
            a = x.sin() * scale
            b = a + 1
            del a
            return b.cos(), _caller_view()
        return f
    graphs, eager_frames = _check(make)
    assert eager_frames == 0 and graphs >= 1


def _two_levels_up():
    return _plain(sys._getframe(1).f_locals["z"]), _plain(sys._getframe(2).f_locals["w"]), \
        sys._getframe(2).f_code.co_name


def _middle(x):
    z = x + 1
    return _two_levels_up(), z * 2


def test_reader_two_levels_down_sees_both_frames():
    def make():
        def outer(x):
            w = x * 3
            seen, z = _middle(w.sin())
            return z.cos() - 1, seen
        return outer
    graphs, eager_frames = _check(make)
    assert eager_frames == 0 and graphs >= 1


def test_reader_inside_a_loop():
    def make():
        def f(x):
            views = []
            for i in range(2):
                x = x + i
                views.append(_caller_view())
            return x.cos(), views
        return f
    graphs, eager_frames = _check(make)
    assert eager_frames == 0 and graphs >= 1


def test_hf_style_module_whose_helper_reads_the_forward_frame():
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(4, 4)

        def _debug(self, tag):
            caller = inspect.currentframe().f_back
            return tag, caller.f_code.co_name, sorted(caller.f_locals), _plain(caller.f_locals["hidden_states"])

        def forward(self, hidden_states, attention_mask=None):
            residual = hidden_states
            hidden_states = self.proj(hidden_states).relu()
            info = self._debug("block")
            return self.proj(hidden_states) + residual, info

    def make():
        torch.manual_seed(0)
        return Block()
    graphs, eager_frames = _check(make)
    assert eager_frames == 0 and graphs >= 2


def test_inspect_stack_and_getargvalues_of_the_caller():
    def reader():
        stack = inspect.stack()
        args = inspect.getargvalues(stack[1].frame)
        return stack[1].function, stack[1].code_context[0].strip(), args.args, args.varargs, \
            sorted(args.locals)

    def make():
        def f(x, *rest, scale=2):
            a = x.sin() * scale
            return a.cos(), reader()
        return f
    graphs, eager_frames = _check(make)
    assert eager_frames == 0 and graphs >= 2


@pytest.mark.parametrize("block", ["no_grad", "try"])
def test_reader_in_a_block_keeps_eagers_view(block):
    # inside a with-block or a try the call would run through framejit's frames: the frame runs eagerly
    def make():
        if block == "no_grad":
            def f(x):
                a = x.sin()
                with torch.no_grad():
                    view = _caller_view()
                return a.cos(), view
        else:
            def f(x):
                a = x.sin()
                try:
                    view = _caller_view()
                except KeyError:
                    view = None
                return a.cos(), view
        return f
    _check(make)


def _accumulator():
    total = 0
    while True:
        sent = yield total
        total = total + sent


def test_generator_driven_with_send_runs_no_frame_eagerly():
    def make():
        def f(x):
            gen = _accumulator()
            next(gen)
            gen.send(x.sin())
            total = gen.send(x.cos())
            return total * 2
        return f
    graphs, eager_frames = _check(make)
    assert eager_frames == 0 and graphs >= 1


def _deprecated_helper(t):
    warnings.warn("helper is deprecated", DeprecationWarning, stacklevel=2)
    return t + 1


def _warnings_of(fn, sizes, action):
    """Results and (message, category, file, line) of every warning over calls of fn, in one registry state."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter(action)
        results = [_run(fn, torch.randn(n, 4)) for n in sizes]
    return results, [(str(w.message), w.category.__name__, w.filename, w.lineno) for w in caught]


@pytest.mark.parametrize("action", ["default", "always", "error", "ignore"])
def test_warnings_in_a_compiled_function_are_eagers(action):
    def make():
        def f(x):
            y = x.sin()
            warnings.warn("careful", UserWarning)
            z = _deprecated_helper(y)
            return z.cos()
        return f
    sizes = (3, 5, 5, 4)
    framejit.reset()
    torch.manual_seed(0)
    expected = _warnings_of(make(), sizes, action)
    counter = _Counter()
    eager_before = framejit.stats()["eager_frames"]
    torch.manual_seed(0)
    got = _warnings_of(framejit.compile(make(), backend=counter), sizes, action)
    assert got == expected
    assert framejit.stats()["eager_frames"] == eager_before
    if action != "error":
        assert counter.graphs >= 2


def test_reader_called_with_values_below_it_on_the_stack_and_a_cell():
    def make():
        def f(x):
            a = x.sin()
            get_a = lambda: a * 2  # noqa: E731  (a is a cell variable of f)
            out = [a.cos(), len(_caller_view()[0]), get_a()]
            return out, a + sum(_caller_view()[0]["a"][2][0])
        return f
    graphs, eager_frames = _check(make)
    assert eager_frames == 0 and graphs >= 1


def _missing_local():
    return sys._getframe(1).f_locals["never_bound"]


def test_reader_raising_reaches_the_caller_as_in_eager():
    def make():
        def f(x):
            a = x.sin()
            try_value = _missing_local()
            return a + try_value
        return f
    framejit.reset()
    compiled = framejit.compile(make(), backend=_Counter())
    eager_before = framejit.stats()["eager_frames"]
    for n in (3, 5):
        x = torch.randn(n, 4)
        expected = _run(make(), x)
        assert expected[:2] == ("raised", "KeyError")
        assert _run(compiled, x) == expected
    assert framejit.stats()["eager_frames"] == eager_before


def _write_callers_local():
    sys._getframe(1).f_locals["scale"] = 5  # written through on 3.13 (PEP 667), a snapshot before
    return 1


def test_reader_writing_its_callers_locals():
    def make():
        def f(x):
            scale = 2
            a = x.sin()
            _write_callers_local()
            return a * scale, scale
        return f
    graphs, eager_frames = _check(make)
    assert eager_frames == 0 and graphs >= 1


def test_reader_inside_a_comprehension():
    # 3.12 inlines the comprehension into f's frame: the reader sees f's locals (and the loop variable), 3.11
    # a <listcomp> frame of its own; either way no framejit frame may stand between
    def make():
        def f(x):
            a = x.sin()
            views = [_caller_view(i) for i in range(2)]
            return a.cos(), views
        return f
    _check(make)
