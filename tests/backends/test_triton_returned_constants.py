"""A tensor made from constants alone and returned by a triton-compiled graph is a new tensor on every call, as
in eager (review revD HIGH-1; NOTE [Returned constants are fresh tensors] in backends/triton/wrapper.py)."""
import pytest
import torch
from torch import nn

import framejit


def make_table():
    return torch.tensor([1.0, 2.0, 3.0])


def make_table_and_view():
    t = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    return t, t.t()


def store_data(p):
    p.data = torch.tensor([1.0, 2.0, 3.0])
    return 1


@pytest.mark.parametrize("backend", ["eager", "onnxrt", "triton"])
def test_returned_constants_are_new_tensors_on_every_call(backend, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    framejit.reset()
    results = []
    for fn in (make_table, framejit.compile(make_table, backend=backend)):
        outs = [fn() for _ in range(3)]
        for k, out in enumerate(outs):
            out.add_(10 * (k + 1))  # the caller writes its result
        results.append([o.tolist() for o in outs])
    assert results[1] == results[0]


@pytest.mark.parametrize("backend", ["eager", "triton"])
def test_a_returned_constant_and_its_view_alias_each_other_only(backend, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    framejit.reset()
    compiled = framejit.compile(make_table_and_view, backend=backend)
    first, first_t = compiled()
    first_t.mul_(2)  # a write through the view reaches its own base, not the next call's result
    second, _ = compiled()
    want, want_t = make_table_and_view()
    want_t.mul_(2)
    assert first.tolist() == want.tolist() and second.tolist() == make_table_and_view()[0].tolist()


@pytest.mark.parametrize("backend", ["eager", "triton"])
def test_parameters_given_a_constant_through_data_share_no_memory(backend, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    framejit.reset()
    compiled = framejit.compile(store_data, backend=backend)
    params = [nn.Parameter(torch.zeros(3)) for _ in range(3)]
    for p in params:
        compiled(p)
        p.data.add_(10)
    assert [p.tolist() for p in params] == [[11.0, 12.0, 13.0]] * 3
    assert len({p.data_ptr() for p in params}) == 3
