"""A list, dict or set method left on the stack at a graph break (`out.append(f(x))` where f breaks) is read by the
resume function through its `__self__`, not by the identity of that container (NOTE [Container methods from
outside] in values/builder.py; issue 11, helper h11sweep3).

The container is usually made anew on every call, so the identity guard failed on every call: the resume
function was traced again each time and ran wholly eagerly from the recompile limit on (transformers' ViLT:
`select.append(valid_row_idx[i][valid_choice])` in ViltEmbeddings.visual_embed). Differential: eager vs
compiled over calls with new values and sizes, arguments compared after each call (mutations of containers
passed in), plus how often frames were traced.
"""
from __future__ import annotations

import torch

import framejit
from tests.helpers import CountingBackend, run_differential


@framejit.disable
def _opaque(t):
    return t + 1


@framejit.disable
def _opaque_parts(t):
    return {"a": t * 2, "n": t.numel()}


def _appends(x):
    out = []
    out.append(_opaque(x * 2))  # `out.append` is on the stack at the break
    out.append(x.sin())
    return torch.cat(out) * 3


def _into_argument(items, x):
    items.append(_opaque(x))  # a list passed in: the caller sees the item
    items.extend([x * len(items)])
    return len(items), torch.stack(items).sum(0)


def _dict_and_set(x):
    d, s = {"x": x}, {1}
    d.update(_opaque_parts(x))
    s.add(_opaque_parts(x)["n"])
    d.setdefault("y", _opaque(x))
    return sorted(d), sorted(s), d["a"] + d["y"], len(s)


def _traced(calls) -> int:
    return framejit.stats()["frames_traced"] - calls


def test_a_list_method_on_the_stack_is_not_traced_again_on_every_call():
    eager_before = framejit.stats()["eager_frames"]
    compiled = framejit.compile(_appends, backend=CountingBackend())
    run_differential(_appends, lambda seed: (torch.randn(3),), seeds=(0, 1), fullgraph=False, compiled=compiled)
    traced = framejit.stats()["frames_traced"]
    # 9 more calls: before, every one traced the resume function again; the 9th ran it eagerly (limit 8)
    run_differential(_appends, lambda seed: (torch.randn(3),), seeds=range(2, 11), fullgraph=False, compiled=compiled)
    assert framejit.stats()["frames_traced"] == traced
    assert framejit.stats()["eager_frames"] == eager_before


def test_the_container_read_through_the_method_is_guarded_and_mutated_as_the_callers():
    eager_before = framejit.stats()["eager_frames"]

    def make(seed):
        return [torch.randn(2) for _ in range(seed % 3)], torch.randn(2)  # 0, 1, 2, 0, ... items passed in
    run_differential(_into_argument, make, seeds=(0, 1, 2, 3, 4), fullgraph=False)
    run_differential(_dict_and_set, lambda seed: (torch.randn(2 + seed % 2),), seeds=(0, 1, 2, 3), fullgraph=False)
    assert framejit.stats()["eager_frames"] == eager_before
