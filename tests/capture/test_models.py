"""The model zoo captured whole: each model compiles with fullgraph=True into one graph and matches eager
on two fresh inputs (and a new batch shape recompiles once, correctly)."""
from __future__ import annotations

import pytest
import torch

import framejit
from tests.helpers import CountingBackend
from tests.models import zoo


@pytest.mark.parametrize("name", zoo.names())
def test_zoo_model_full_graph(name):
    case = zoo.get(name, size="small")
    backend = CountingBackend()
    compiled = framejit.compile(case.model, backend=backend, fullgraph=True)
    for seed in (0, 1):
        args = case.make_inputs(seed)
        expected = case.model(*args)
        actual = compiled(*args)
        assert type(actual) is type(expected)
        for a, e in zip(zoo.output_tensors(actual), zoo.output_tensors(expected), strict=True):
            torch.testing.assert_close(a, e, **case.tolerance)
    assert backend.graph_count == 1


@pytest.mark.parametrize("name", ["mlp", "gpt", "lstm"])
def test_zoo_model_under_no_grad_recompiles_once(name):
    case = zoo.get(name, size="small")
    backend = CountingBackend()
    compiled = framejit.compile(case.model, backend=backend, fullgraph=True)
    args = case.make_inputs(0)
    compiled(*args)
    with torch.no_grad():
        actual = compiled(*args)
        expected = case.model(*args)
    for a, e in zip(zoo.output_tensors(actual), zoo.output_tensors(expected), strict=True):
        torch.testing.assert_close(a, e, **case.tolerance)
        assert not a.requires_grad
    assert backend.graph_count == 2
