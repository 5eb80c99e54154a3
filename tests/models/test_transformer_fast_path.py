"""torch.nn's Transformer fast paths under framejit (issue 11: real model code captured whole).

nn.TransformerEncoder in eval, grad off, batch_first, with a key padding mask takes the nested-tensor fast
path: it checks the mask is left aligned (a data-dependent answer), converts the input to a nested tensor,
runs each layer's fused kernel on it and pads the result back (zeros at padded positions, then the final
norm). Each test runs eagerly and compiled on fresh inputs (two calls with new values, one with a new shape)
and checks values (padded positions included), the graphs each call runs, the frames traced and the frames
run wholly eagerly.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import framejit

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning")]


class RunCounting:
    """A backend that counts the graphs it compiles and how often they run."""

    def __init__(self) -> None:
        self.compiled = 0
        self.runs = 0

    def __call__(self, gm, example_inputs):
        self.compiled += 1
        forward = gm.forward

        def run(*args):
            self.runs += 1
            return forward(*args)
        return run


def _inputs(call: int, float_mask: bool = False):
    batch, seq = ((2, 5), (2, 5), (3, 7))[call]
    x = torch.randn(batch, seq, 8, generator=torch.Generator().manual_seed(call))
    mask = torch.zeros(batch, seq, dtype=torch.bool)
    mask[1, seq - 1 - call % 2:] = True  # right padding, another length on the second call
    if float_mask:
        mask = torch.zeros(batch, seq).masked_fill(mask, float("-inf"))
    return x, mask


def _encoder(layers: int = 2) -> nn.Module:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, batch_first=True)
    return nn.TransformerEncoder(layer, layers, enable_nested_tensor=True, norm=nn.LayerNorm(8)).eval()


def _run(module, calls):
    """(outputs, [(graphs compiled, graphs run) per call], frames traced, eager-frame records)."""
    framejit.reset()
    backend = RunCounting()
    compiled = framejit.compile(module, backend=backend)
    before = framejit.stats()
    outs, per_call = [], []
    for x, mask in calls:
        runs = backend.runs
        with torch.no_grad():
            outs.append(compiled(x, src_key_padding_mask=mask))
        per_call.append((backend.compiled, backend.runs - runs))
    after = framejit.stats()
    return outs, per_call, after["frames_traced"] - before["frames_traced"], \
        after["eager_frame_reasons"][before["eager_frames"]:]


@pytest.mark.parametrize("float_mask", [False, True], ids=["bool_mask", "float_mask"])
def test_encoder_nested_fast_path_matches_eager_in_few_graphs(float_mask):
    encoder = _encoder()
    calls = [_inputs(c, float_mask) for c in range(3)]
    with torch.no_grad():
        want = [encoder(x, src_key_padding_mask=m) for x, m in calls]
    outs, per_call, traced, eager = _run(encoder, calls)
    for i, (got, exp) in enumerate(zip(outs, want)):
        torch.testing.assert_close(got, exp, msg=lambda m: f"call {i}: {m}")
    assert eager == [], eager
    # graphs: up to the left-aligned check, up to the nested tensor, the final norm (it was 4: a break at
    # is_compiling() split the first); new values compile nothing
    assert [runs for _, runs in per_call] == [3, 3, 3], per_call
    assert per_call[1][0] == per_call[0][0], per_call


# NOTE [Loops carrying nested tensors] (python_loops.py): the loop over the layers carries the nested tensor
# from step to step, so each step broke; its resume function was traced again for each loop position (one
# entry per layer, up to the recompile limit). The loop now runs as Python (each layer's forward through its
# frame hook): the frames traced do not grow with the number of layers.
def test_encoder_layer_loop_on_a_nested_tensor_is_traced_once_whatever_the_depth():
    traced = {}
    for layers in (1, 4):
        encoder = _encoder(layers)
        calls = [_inputs(c) for c in range(2)]
        with torch.no_grad():
            want = [encoder(x, src_key_padding_mask=m) for x, m in calls]
        outs, per_call, traced[layers], eager = _run(encoder, calls)
        for i, (got, exp) in enumerate(zip(outs, want)):
            torch.testing.assert_close(got, exp, msg=lambda m: f"{layers} layers, call {i}: {m}")
        assert eager == [] and [runs for _, runs in per_call] == [3, 3], (eager, per_call)
    assert traced[4] == traced[1], traced


def _nested(seed: int, dims: int = 3):
    g = torch.Generator().manual_seed(seed)
    parts = [torch.randn(*([2] * (dims - 2)), n, 4, generator=g) for n in (3, 2)]
    return torch.nested.nested_tensor(parts)


def _asks_about_a_nested_tensor(nt, x):
    if nt.dim() == 3 and nt.is_floating_point() and not torch.overrides.has_torch_function((nt, x)):
        return nt, x.sin() * 2
    return nt, x.cos()


# NOTE [Metadata of nested tensors] (capture/nested_tensors.py): dim(), is_floating_point() and the
# __torch_function__ protocol check of a nested tensor were a break each (nn.TransformerEncoderLayer asks
# them before its fused kernel: three breaks per layer frame); they are answered while tracing and guarded.
def test_metadata_questions_about_a_nested_tensor_do_not_break():
    x = torch.randn(3, 4)
    report = framejit.explain(_asks_about_a_nested_tensor)(_nested(0), x)
    assert report.graph_break_count == 0 and report.graph_count == 1, str(report)
    framejit.reset()
    compiled = framejit.compile(_asks_about_a_nested_tensor, backend=RunCounting())
    for nt in (_nested(1), _nested(2), _nested(3, dims=4), _nested(4)):  # another dim() recompiles
        got_nt, got = compiled(nt, x)
        want_nt, want = _asks_about_a_nested_tensor(nt, x)
        assert got_nt is nt
        torch.testing.assert_close(got, want)


def test_encoder_switches_between_fast_and_regular_path_as_eager_does():
    """Right padding takes the nested fast path (zeros at padded positions, then the norm), left padding the
    regular path (values computed there): the data-dependent left-aligned check picks the path on every
    call, as eagerly, with nothing compiled again once both paths were seen."""
    encoder = _encoder()
    calls = []
    for call in range(4):
        x = torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(call))
        mask = torch.zeros(2, 5, dtype=torch.bool)
        if call % 2:
            mask[1, :2] = True  # left padding
        else:
            mask[1, 3:] = True  # right padding
        calls.append((x, mask))
    with torch.no_grad():
        want = [encoder(x, src_key_padding_mask=m) for x, m in calls]
    bias = encoder.norm.bias.detach()
    assert torch.equal(want[0][1, 3:], bias.expand(2, 8)) and not torch.equal(want[1][1, :2], bias.expand(2, 8))
    outs, per_call, _, eager = _run(encoder, calls)
    for i, (got, exp) in enumerate(zip(outs, want)):
        torch.testing.assert_close(got, exp, msg=lambda m: f"call {i}: {m}")
    assert eager == [] and per_call[3][0] == per_call[1][0], (eager, per_call)
    assert [runs for _, runs in per_call] == [3, 2, 3, 2], per_call
