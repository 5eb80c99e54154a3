"""Python attributes stored on tensors in the trace are replayed after the graph (NOTE [Attributes stored on
tensors]): a tensor subclass whose __torch_function__ tags its results, and user code marking tensors.

Differential: eager vs framejit on fresh inputs over calls with changing sizes, comparing values, exact types
and every tensor's instance `__dict__` (results and inputs). Before: a break at every store ("assignment to the
attribute 'tag' of Tensor(y)"), so a tagging __torch_function__ broke at every op (/tmp/htf/adv5.py, adv3
f_tag). Stock torch.compile(backend="eager"): 2 graphs for these programs (/tmp/htf2/p4.py).
"""
import pytest
import torch

import framejit
from tests.helpers import CountingBackend


class Tagger(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        out = super().__torch_function__(func, types, args, kwargs)
        if isinstance(out, Tagger):
            out.tag = getattr(func, "__name__", "?")
        return out


class Meta(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        metas = [a.meta for a in args if isinstance(a, Meta) and hasattr(a, "meta")]
        out = super().__torch_function__(func, types, args, kwargs)
        if isinstance(out, Meta):
            out.meta = metas[0] + 1 if metas else 0
        return out


class Slotted(torch.Tensor):
    __slots__ = ("s",)


def _plain(t):
    with torch._C.DisableTorchFunctionSubclass():
        return t.as_subclass(torch.Tensor)


def _norm(r):
    if isinstance(r, torch.Tensor):
        return (type(r), _plain(r).detach().clone(), {k: _norm(v) for k, v in r.__dict__.items()})
    if isinstance(r, (list, tuple)):
        return type(r), [_norm(x) for x in r]
    return r


def _same(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.shape == b.shape and bool((a == b).all())
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    return a == b


def _twin(a):
    with torch._C.DisableTorchFunctionSubclass():
        return a.clone().as_subclass(type(a))


def _run(fn, cls=torch.Tensor, sizes=(2, 3, 2, 4)):
    cb = CountingBackend()
    compiled = framejit.compile(fn, backend=cb)
    for n in sizes:
        x = torch.randn(n, 3).as_subclass(cls)
        y = _twin(x)
        expected = _norm((fn(x), x))
        got = _norm((compiled(y), y))
        assert _same(expected, got), (expected, got)
    return cb


def _breaks(fn, cls=torch.Tensor):
    framejit.reset()
    return framejit.explain(fn)(torch.randn(2, 3).as_subclass(cls)).graph_break_count


def _tag(x):
    y = (x * 3).relu() + 1
    z = y.add_(1)
    return y, y.tag, z is y, getattr(y, "missing", "d"), hasattr(y, "tag")


def _meta(x):
    return (x + 1) * 2, ((x + 1) * 2).meta


def _marks(x):
    y = x * 2
    y.scale = x.shape[0]
    y.buddy = y + 1
    y.scale = y.scale * 10
    setattr(y, "kind", "m")
    x.seen = True
    return y, y.scale, y.buddy * 2, y.kind, x.seen


def _marks_across_a_break(x):
    y = x * 2
    y.a = 5
    print("break")
    return y + y.a, y.a


def test_tagging_torch_function_is_captured_whole():
    for fn, cls in ((_tag, Tagger), (_meta, Meta)):
        framejit.reset()
        assert 1 <= _run(fn, cls).graph_count <= 2  # was 0
        assert _breaks(fn, cls) == 0


def test_stores_on_made_tensors_and_inputs_are_read_back_and_replayed():
    framejit.reset()
    assert 1 <= _run(_marks).graph_count <= 2
    framejit.reset()
    assert 1 <= _run(_marks, Tagger).graph_count <= 2
    assert _breaks(_marks) == 0


def test_a_store_live_across_a_break(capsys):
    framejit.reset()
    _run(_marks_across_a_break)
    assert _breaks(_marks_across_a_break) == 1  # the print only


def test_a_slot_store_still_runs_in_python():
    def f(x):
        y = x * 2
        y.s = x.shape[0]
        return y, y.s
    framejit.reset()
    _run(f, Slotted)
    assert _breaks(f, Slotted) >= 1  # the store (then the slot's read in the resume function)


def test_a_parameter_marked_in_forward():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 3)

        def forward(self, x):
            self.lin.weight.seen = x.shape[0]
            y = self.lin(x)
            y.src = "lin"
            return y, self.lin.weight.seen
    eager, twin = M(), M()
    twin.load_state_dict(eager.state_dict())
    framejit.reset()
    compiled = framejit.compile(twin, backend=CountingBackend())
    for n in (2, 3, 4):
        x = torch.randn(n, 3)
        (a, sa), (b, sb) = eager(x), compiled(x)
        torch.testing.assert_close(b, a)
        assert (sb, b.src, twin.lin.weight.seen) == (sa, a.src, eager.lin.weight.seen) == (n, "lin", n)


def _through_contiguous(x):
    z = x.contiguous()  # x itself, in eager as in the trace
    z.tag = "z"
    return hasattr(x, "tag"), x + 1


def _overwrite_through_inplace(x):
    x.tag = 1
    x.clamp_(min=-100).tag = 2
    return x.tag, x * 1


def _interleaved_names(x):
    z = x.float()
    z.tag = 1
    x.tag = 2
    z.tag = 3
    x.other = 4
    return x + 1


def _add_then_store(x):
    x.add_(1).tag = "a"
    x.mul_(2).tag = "m"
    return x.tag, x.contiguous().tag, x * 1


def _read_existing_through_another_name(x):
    return getattr(x.contiguous(), "pre", "absent"), getattr(x.float(), "pre", "absent"), x + 1


def _run_on(fn, make, sizes=(2, 3, 4)):
    cb = CountingBackend()
    compiled = framejit.compile(fn, backend=cb)
    for n in sizes:
        x = make(n)
        y = x.clone()
        y.__dict__.update(x.__dict__)
        expected = _norm((fn(x), x))
        got = _norm((compiled(y), y))
        assert _same(expected, got), (expected, got)
    return cb


def _with_pre(n):
    x = torch.randn(n, 3)
    if n != 3:
        x.pre = n
    return x


def test_a_store_through_another_name_of_an_input_is_a_store_on_the_input():
    # revM HIGH-1: eager (True, ...), 2, x.__dict__ {'tag': 3, 'other': 4}; was False, 1, {'tag': 2, ...}
    for fn in (_through_contiguous, _overwrite_through_inplace, _interleaved_names):
        framejit.reset()
        assert _run_on(fn, lambda n: torch.randn(n, 3)).graph_count >= 1
        assert _breaks(fn) == 0


def test_a_store_on_the_result_of_an_inplace_op_of_an_input():
    # revM MED-1: was an internal error ('NoneType' object has no attribute 'reload'), the frame ran eagerly
    framejit.reset()
    before = framejit.stats()["eager_frames"]  # process-wide: earlier tests' eager frames count too
    cb = _run_on(_add_then_store, lambda n: torch.randn(n, 3))
    assert cb.graph_count >= 1 and framejit.stats()["eager_frames"] == before
    assert _breaks(_add_then_store) == 0


def test_an_existing_attribute_read_through_another_name_of_an_input():
    # revM PRE-2: was "absent" (0 breaks); guarded, so an input without the attribute recompiles
    framejit.reset()
    _run_on(_read_existing_through_another_name, _with_pre, sizes=(2, 3, 4, 3, 2))


def _setattr_method(x):
    x.__setattr__("t3", x.shape[0])
    y = x * 2
    y.__setattr__("t4", 7)
    return y, y.t4, x.t3, x.contiguous().t3


def test_the_setattr_method_of_a_tensor_stores():
    # revM PRE-1: the store landed on the fake tensor at trace time: x.__dict__ {} and AttributeError at `y.t4`
    framejit.reset()
    _run_on(_setattr_method, lambda n: torch.randn(n, 3))
    assert _breaks(_setattr_method) == 0


def _getattribute_method(x):
    y = x * 2
    y.tag = x.shape[0]
    try:
        missing = x.__getattribute__("absent_attr")
    except AttributeError as e:
        missing = str(e)
    return y, y.__getattribute__("tag"), getattr(x, "pre", None) and x.__getattribute__("pre"), missing, \
        x.__getattribute__("shape")[1], x.__getattribute__("sum")()


def test_the_getattribute_method_of_a_tensor_reads_stored_attributes():
    # `y.__getattribute__("tag")` was read on the fake tensor, which has no stored attribute: AttributeError at
    # trace time, and every call ran eagerly (NOTE [object's methods of tensors])
    framejit.reset()
    before = framejit.stats()["eager_frames"]  # process-wide: compare before/after
    assert _run_on(_getattribute_method, _with_pre, sizes=(2, 3, 4, 3, 2)).graph_count >= 1
    assert framejit.stats()["eager_frames"] == before
    assert _breaks(_getattribute_method) == 0


def _chain(x):
    for _ in range(6):
        x = x * 1.5 + 1
    return x.sum()


def _dead_but_reachable(x):
    y = x * 2
    y.tag = "kept"
    z = x * 3
    z.friend = y  # y reaches the caller through z's attribute
    w = x * 4
    w.tag = "dead"
    return z + w.sum()


def test_stores_on_tensors_that_die_in_the_frame_are_not_graph_outputs():
    # revM MED-4: every tagged intermediate was a graph output (13 here), kept alive until the replay
    framejit.reset()
    cb = _run(_chain, Tagger)
    outputs = [n for n in cb.graphs[0].graph.nodes if n.op == "output"][0].args[0]
    assert len(outputs) == 1
    framejit.reset()
    _run(_dead_but_reachable)
    assert _breaks(_dead_but_reachable) == 0


def _dict_pop_then_alias(x):
    x.__dict__.pop("pre")
    return hasattr(x.contiguous(), "pre"), x + 1


def _vars_update_then_float(x):
    vars(x).update(pre=-5)
    return x.float().pre, x * 2


def _dict_clear_then_inplace(x):
    x.__dict__.clear()
    return getattr(x.add_(1), "pre", "absent"), x


def _dict_write_then_direct(x):
    x.__dict__["pre"] = -1
    return x.pre, x - 1


def _vars_shadows_a_method(x):
    vars(x)["new"] = 1
    return getattr(x, "new", None), x + 2


@pytest.mark.parametrize("fn", [_dict_pop_then_alias, _vars_update_then_float, _dict_clear_then_inplace,
                                _dict_write_then_direct, _vars_shadows_a_method])
def test_reads_after_the_frame_changed_the_inputs_dict_see_the_change(fn):
    """Review revQ HIGH-1 (after f1de3b2) and PRE-A: a read through `x` or another name of it (`x.contiguous()`,
    `x.add_(1)`) after a write into `x.__dict__` / `vars(x)` answered the dict as traced (2, 3, 4: the value the
    attribute had when traced) where eager answers the changed dict."""
    compiled = framejit.compile(fn, backend=CountingBackend())
    for n in (2, 3, 4):
        runs = []
        for f in (fn, compiled):
            x = torch.full((n,), float(n))
            x.pre = n
            out = f(x)
            runs.append((out[0], out[1].tolist(), dict(x.__dict__)))
        assert runs[1] == runs[0], n
