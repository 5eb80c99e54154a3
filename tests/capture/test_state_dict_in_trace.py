"""`module.state_dict()` inside compiled code (issue 11, NOTE [Attributes of OrderedDicts made while
tracing] in framejit/capture/modules.py).

Module.state_dict makes `destination = OrderedDict()` and stores `destination._metadata = OrderedDict()`;
that attribute store broke in every module the call walked. Each test runs eagerly on a module and compiled
on an identical twin over calls that change the weights in between, and compares the results; a state dict
that outlives the frame must be eager's object in every respect (its _metadata, tensors sharing the
parameters' storage).
"""
from __future__ import annotations

import copy
from collections import OrderedDict

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, logged_breaks


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.norm = torch.nn.LayerNorm(3)
        self.register_buffer("steps", torch.zeros(()))
        self.register_buffer("scratch", torch.ones(3), persistent=False)

    def forward(self, x):
        return self.norm(self.lin(x))


class Checksummed(torch.nn.Module):
    """Reads its own state dict in forward (a weight checksum)."""

    def __init__(self):
        super().__init__()
        self.block = Block()

    def forward(self, x):
        sd = self.state_dict()
        total = sum(v.float().sum() for v in sd.values())
        return self.block(x) * total + len(sd) + len(sd._metadata)


def _twins():
    torch.manual_seed(0)
    eager = Checksummed()
    return eager, copy.deepcopy(eager)


def test_a_state_dict_read_in_forward_is_one_graph_and_follows_weight_updates():
    eager, twin = _twins()
    backend = CountingBackend()
    compiled = framejit.compile(twin, backend=backend)
    before = framejit.stats()["eager_frames"]
    with logged_breaks() as breaks:
        for step in range(3):
            x = torch.randn(2, 3)
            torch.testing.assert_close(compiled(x), eager(x))
            with torch.no_grad():
                for p_eager, p_twin in zip(eager.parameters(), twin.parameters()):
                    p_eager.add_(0.1 * step)
                    p_twin.add_(0.1 * step)
    assert (backend.graph_count, list(breaks), framejit.stats()["eager_frames"] - before) == (1, [], 0)


@pytest.mark.parametrize("keep_vars", [False, True])
def test_a_returned_state_dict_is_eagers_object(keep_vars):
    eager, twin = _twins()

    def fn(model, x):
        sd = model.state_dict(keep_vars=keep_vars)
        return model(x), sd

    compiled = framejit.compile(fn)
    for _ in range(2):
        x = torch.randn(2, 3)
        (e_out, e_sd), (g_out, g_sd) = fn(eager, x), compiled(twin, x)
        torch.testing.assert_close(g_out, e_out)
        assert type(g_sd) is OrderedDict and list(g_sd) == list(e_sd)
        assert g_sd._metadata == e_sd._metadata
        for name, value in g_sd.items():
            torch.testing.assert_close(value, e_sd[name])
            assert value.requires_grad == e_sd[name].requires_grad
        twin_tensors = dict(twin.named_parameters(), **dict(twin.named_buffers()))
        for name, value in g_sd.items():  # the parameters' own storage, as eager's detach() or the tensor itself
            assert value.data_ptr() == twin_tensors[name].data_ptr()
            assert (value is twin_tensors[name]) == keep_vars


def test_state_dict_hooks_run_as_in_eager():
    eager, twin = _twins()
    calls = {"eager": 0, "compiled": 0}

    def hook_for(key):
        def hook(module, state_dict, prefix, local_metadata):
            calls[key] += 1
            state_dict[prefix + "extra"] = torch.full((2,), float(calls[key]))
        return hook

    eager.block._register_state_dict_hook(hook_for("eager"))
    twin.block._register_state_dict_hook(hook_for("compiled"))

    def fn(model, x):
        sd = model.state_dict()
        return x + sd["block.extra"].sum() + len(sd)

    compiled = framejit.compile(fn)
    for _ in range(3):
        x = torch.randn(2)
        torch.testing.assert_close(compiled(twin, x), fn(eager, x))
    assert calls["eager"] == calls["compiled"] == 3


def test_attributes_of_an_ordered_dict_made_in_the_frame():
    def fn(x, tag):
        od = OrderedDict(a=1)
        od.tag = tag
        od.tag += 1
        kept = od.tag
        return x + kept + len(od)

    def escapes(x, tag):
        od = OrderedDict(a=x)
        od.tag = tag
        return od

    for tag in (1, 2):
        x = torch.randn(2)
        torch.testing.assert_close(framejit.compile(fn)(x, tag), fn(x, tag))
        got, expected = framejit.compile(escapes)(x, tag), escapes(x, tag)
        assert type(got) is OrderedDict and got.tag == expected.tag == tag and got["a"] is x


def test_a_copy_of_an_ordered_dict_with_attributes_matches_eager():
    def fn(x):
        od = OrderedDict(a=1)
        od.tag = 5
        shallow = copy.copy(od)  # copies __dict__ too (OrderedDict.__reduce__)
        plain = od.copy()  # does not
        return x + getattr(shallow, "tag", -1) + getattr(plain, "tag", -1)

    for _ in range(2):
        x = torch.randn(2)
        torch.testing.assert_close(framejit.compile(fn)(x), fn(x))


def test_attributes_of_an_ordered_dict_passed_in_are_read_as_in_eager():
    # before: hasattr(sd, "_metadata") was False in the trace (eager True) and sd._metadata raised
    def fn(x, sd):
        meta = len(sd._metadata) if hasattr(sd, "_metadata") else -1
        return x + meta + len(sd), getattr(sd, "tag", None)

    lin = torch.nn.Linear(2, 2)
    plain = OrderedDict(a=1)
    tagged = OrderedDict(a=1)
    tagged.tag = "t"
    compiled = framejit.compile(fn)
    for sd in (lin.state_dict(), plain, tagged, plain, lin.state_dict(), tagged):
        x = torch.randn(2)
        (e, e_tag), (g, g_tag) = fn(x, sd), compiled(x, sd)
        torch.testing.assert_close(g, e)
        assert g_tag == e_tag
    plain.tag = "later"  # an attribute added between calls: the absence guard fails
    x = torch.randn(2)
    assert compiled(x, plain)[1] == fn(x, plain)[1] == "later"


@pytest.mark.parametrize("copier", [copy.copy, copy.deepcopy])
def test_a_copy_of_a_state_dict_passed_in_keeps_its_metadata(copier):
    def fn(x, sd):
        return x + 1, copier(sd)

    lin = torch.nn.Linear(2, 2)
    compiled = framejit.compile(fn)
    for sd in (lin.state_dict(), OrderedDict(a=torch.ones(2))):
        x = torch.randn(2)
        (e, e_copy), (g, g_copy) = fn(x, sd), compiled(x, sd)
        torch.testing.assert_close(g, e)
        assert vars(g_copy).keys() == vars(e_copy).keys() and list(g_copy) == list(e_copy)
        assert getattr(g_copy, "_metadata", None) == getattr(e_copy, "_metadata", None)
