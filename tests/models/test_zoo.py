"""Tests of the model zoo itself: every model at every size builds, runs, is seeded and deterministic,
its declared facts (`fx_traceable`, `dynamo_fullgraph`) are true, and eager matches the reference
compiler (`torch.compile` with an eager backend that also counts graphs).
"""

from __future__ import annotations

import dataclasses
import itertools

import pytest
import torch
import torch.fx

from tests.models import zoo

ALL_CASES = list(itertools.product(zoo.names(), zoo.SIZES))
SMALL_LIMIT = 4096  # "small" keeps every tensor (inputs, weights, buffers, outputs) to this many elements


def _outputs(case: zoo.Case, seed: int) -> list[torch.Tensor]:
    with torch.no_grad():
        return zoo.output_tensors(case.model(*case.make_inputs(seed)))


def _differs(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return any(not torch.equal(x, y) for x, y in zip(a, b, strict=True))


def test_names_cover_the_required_architectures():
    names = zoo.names()
    assert names == zoo.names()
    assert len(set(names)) == len(names)
    for required in ("mlp", "cnn", "gpt", "bert", "vit", "lstm", "gru_cell", "moe"):
        assert required in names


def test_bad_arguments_raise_clear_errors():
    with pytest.raises(ValueError, match="unknown model 'resnet9000'.*mlp"):
        zoo.get("resnet9000")
    with pytest.raises(ValueError, match="size must be one of"):
        zoo.get("mlp", size="huge")
    with pytest.raises(TypeError, match="seed must be an int"):
        zoo.get("mlp").make_inputs("0")


@dataclasses.dataclass
class _Out:
    logits: torch.Tensor
    loss: torch.Tensor | None = None


def test_output_tensors_flattens_nested_structures():
    a, b, c, d = (torch.full((n,), float(n)) for n in (1, 2, 3, 4))
    out = {"x": (a, [b, None]), "y": _Out(c), "z": _Out(d, loss=c), "n": 3}
    flat = zoo.output_tensors(out)
    assert [t.shape[0] for t in flat] == [1, 2, 3, 4, 3]
    with pytest.raises(TypeError, match="cannot flatten"):
        zoo.output_tensors(object())


@pytest.mark.parametrize("name,size", ALL_CASES)
def test_case_is_fresh_seeded_eval_float32(name, size):
    rng_before = torch.get_rng_state()
    case, again = zoo.get(name, size), zoo.get(name, size)
    assert torch.equal(torch.get_rng_state(), rng_before), "building a case changed the global RNG"
    assert (case.name, case.size) == (name, size)
    assert case.model is not again.model
    assert not any(m.training for m in case.model.modules())
    state, state_again = case.model.state_dict(), again.model.state_dict()
    assert state.keys() == state_again.keys()
    for key, value in state.items():
        assert torch.equal(value, state_again[key]), key
        if value.is_floating_point():
            assert value.dtype == torch.float32, key
    assert set(case.tolerance) == {"atol", "rtol"}
    assert case.param_count > 0


@pytest.mark.parametrize("name,size", ALL_CASES)
def test_inputs_and_outputs_deterministic_per_seed(name, size):
    case = zoo.get(name, size)
    first, repeat, other = case.make_inputs(0), case.make_inputs(0), case.make_inputs(1)
    assert [(t.shape, t.dtype) for t in first] == [(t.shape, t.dtype) for t in other]
    assert not _differs(list(first), list(repeat))
    assert _differs(list(first), list(other))

    out_first, out_repeat, out_other = _outputs(case, 0), _outputs(case, 0), _outputs(case, 1)
    assert out_first and all(torch.isfinite(t).all() for t in out_first)
    assert not _differs(out_first, out_repeat)
    assert _differs(out_first, out_other)
    if size == "small":
        tensors = [*first, *out_first, *case.model.parameters(), *case.model.buffers()]
        assert max(t.numel() for t in tensors) <= SMALL_LIMIT


def _fx_trace_matches(case: zoo.Case) -> bool:
    try:
        traced = torch.fx.symbolic_trace(case.model)
        with torch.no_grad():
            actual = zoo.output_tensors(traced(*case.make_inputs(7)))
    except Exception:  # any failure to trace or to run the traced module means "not traceable"
        return False
    torch.testing.assert_close(actual, _outputs(case, 7), atol=0, rtol=0)
    return True


@pytest.mark.parametrize("name,size", ALL_CASES)
def test_fx_traceable_flag_is_true_to_fact(name, size):
    case = zoo.get(name, size)
    assert _fx_trace_matches(case) == case.fx_traceable


def _compile_counting(model, fullgraph: bool):
    """torch.compile with a backend that records each graph and runs it as is (what backend="eager" does)."""
    graphs = []

    def counting_eager(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    return torch.compile(model, backend=counting_eager, fullgraph=fullgraph), graphs


@pytest.mark.parametrize("name,size", ALL_CASES)
def test_eager_matches_reference_compiler(name, size):
    case = zoo.get(name, size)
    compiled, graphs = _compile_counting(case.model, fullgraph=case.dynamo_fullgraph)
    for seed in (0, 1):
        expected = _outputs(case, seed)
        with torch.no_grad():
            actual = zoo.output_tensors(compiled(*case.make_inputs(seed)))
        torch.testing.assert_close(actual, expected, **case.tolerance)
    assert len(graphs) == 1 if case.dynamo_fullgraph else len(graphs) >= 1


@pytest.mark.parametrize("name", [n for n in zoo.names() if not zoo.get(n).dynamo_fullgraph])
def test_dynamo_fullgraph_false_is_true_to_fact(name):
    case = zoo.get(name)
    compiled, _ = _compile_counting(case.model, fullgraph=True)
    with pytest.raises(torch._dynamo.exc.Unsupported):
        compiled(*case.make_inputs(0))
