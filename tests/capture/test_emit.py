"""capture/emit.py and Codegen: the code framejit writes calls what it means on the running CPython (NOTE
[Call layouts]), and the graph call's offsets are recorded when it is written (NOTE [Graph call span])."""
from __future__ import annotations

import dis

import pytest
import torch

import framejit
from framejit.capture.codegen import GRAPH_OUT, Codegen, FunctionShape, graph_call_span, make_function


def target(*args, **kwargs):
    return args, kwargs


class Obj:
    def method(self, *args, **kwargs):
        return self, args, kwargs


class Rec:
    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs

    def __eq__(self, other):
        return isinstance(other, Rec) and (self.args, self.kwargs) == (other.args, other.kwargs)


def _builtin(nargs: int):
    return {0: list, 1: abs, 2: pow, 3: pow}[nargs]


def _function(cg: Codegen):
    return make_function(FunctionShape.of((lambda: None).__code__), cg, {}, None, None)


@pytest.mark.parametrize("nargs,kw_names", [(0, ()), (1, ()), (3, ()), (1, ("a",)), (2, ("a",)), (2, ("a", "b")),
                                            (3, ("b",))])
@pytest.mark.parametrize("callee", ["function", "bound method", "class", "builtin"])
def test_calls_pass_positional_and_keyword_arguments(nargs, kw_names, callee):
    obj = Obj()
    if callee == "builtin" and kw_names:
        kw_names = ()  # list, abs and pow are called with positional arguments only
    fn = {"function": target, "bound method": obj.method, "class": Rec, "builtin": _builtin(nargs)}[callee]
    cg = Codegen()
    cg.push_null()
    cg.load_const(fn)
    for i in range(nargs):
        cg.load_const(i * 10)
    cg.call(nargs, kw_names)
    cg.return_value()
    positional = tuple(range(0, 10 * (nargs - len(kw_names)), 10))
    keywords = {name: 10 * (nargs - len(kw_names) + k) for k, name in enumerate(kw_names)}
    expected = fn(*positional, **keywords)
    assert _function(cg)() == expected


@pytest.mark.parametrize("with_kwargs", [False, True])
def test_call_ex_passes_the_tuple_and_the_mapping(with_kwargs):
    cg = Codegen()
    cg.push_null()
    cg.load_const(target)
    cg.null_after_callable()
    cg.load_const((1, 2))
    if with_kwargs:
        cg.load_const({"k": 3})
    cg.call_ex(with_kwargs)
    cg.return_value()
    assert _function(cg)() == ((1, 2), {"k": 3} if with_kwargs else {})


def test_method_load_and_plain_attribute_load():
    cg = Codegen()
    cg.push_null()
    cg.load_const(Obj())
    cg.load_attr("method")
    cg.load_const(7)
    cg.call(1)
    cg.return_value()
    obj, args, kwargs = _function(cg)()
    assert isinstance(obj, Obj) and args == (7,) and kwargs == {}


def _graph_fn(x, y):
    return torch.relu(x @ y) + 1


def test_graph_call_span_is_the_call_that_stores_the_graph_outputs():
    compiled = framejit.compile(_graph_fn)
    x, y = torch.randn(3, 4), torch.randn(4, 2)
    torch.testing.assert_close(compiled(x, y), _graph_fn(x, y))
    code = compiled.entries[0].fn.__code__
    start, end = graph_call_span(code)
    insts = list(dis.get_instructions(code))
    call = next(i for i in insts if i.offset == start)
    after = next(i for i in insts if i.offset == end)
    assert call.opname in ("CALL", "CALL_KW")
    assert after.opname == "STORE_FAST" and after.argval == GRAPH_OUT


def _failing_graph(x, index):
    return torch.index_select(x * 2, 0, index).sum()


def test_graph_failure_reruns_eagerly_and_raises_the_users_exception():
    """The span decides whether a run-time error came from the graph (NOTE [Graph failures rerun
    eagerly]): the rerun raises eager's exception from the user's own frame."""
    compiled = framejit.compile(_failing_graph)
    x = torch.randn(4)
    assert compiled(x, torch.tensor([0, 1])) == _failing_graph(x, torch.tensor([0, 1]))
    with pytest.raises(IndexError) as info:
        compiled(x, torch.tensor([0, 9]))
    assert any(entry.name == "_failing_graph" for entry in info.traceback)
