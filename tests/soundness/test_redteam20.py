"""Red team 20 (h12rt20): adversarial programs against the features landed in fc4675b, d360852, d1a75b1,
e565e49, 8afe16b, dbe206e, 79ae420 (deepcopy of tensors, namedtuple methods, match statements, module
flag stores, padded RNN kernels, custom ops, pytree calls). Each test: eager vs compiled, several calls,
state or inputs changed between calls."""
from __future__ import annotations

import copy

import torch

import framejit


def _traced() -> int:
    return framejit.stats()["frames_traced"]


def test_deepcopy_of_a_prefix_view_copies_its_whole_storage():
    # fc4675b: an input contiguous at offset 0 that spans its storage is one clone(); the storage's size was
    # read from the first call's tensor and not guarded, so a later x = big[:4] (contiguous, offset 0, in a
    # storage twice its size) reused the clone: eager's copy has the whole 8-element storage.
    def f(x):
        return copy.deepcopy(x)

    cf = framejit.compile(f, backend="eager")
    for x in (torch.randn(4), torch.randn(8)[:4], torch.randn(4), torch.randn(8)[:4]):
        want, got = f(x), cf(x)
        torch.testing.assert_close(got, want)
        assert got.untyped_storage().nbytes() == want.untyped_storage().nbytes()
        assert got.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()


def test_a_class_registered_as_a_mapping_after_the_trace_matches_mapping_patterns():
    # d1a75b1: MATCH_MAPPING read the subject class's Py_TPFLAGS_MAPPING unguarded; Mapping.register(G)
    # after the first call sets that flag (so eager's `case {"a": v}` then matches), the entry still said no.
    class G:
        def __getitem__(self, k):
            return 1

        def get(self, k, default=None):
            return 2 if k == "a" else default

        def __len__(self):
            return 1

        def __iter__(self):
            return iter(["a"])

    class S:
        def __len__(self):
            return 2

        def __getitem__(self, i):
            return (3, 4)[i]

        def __iter__(self):
            return iter((3, 4))

    def f(x, g):
        match g:
            case {"a": v}:
                return x + v
            case [a, b]:
                return x * a + b
            case _:
                return x - 1

    import collections.abc
    cf = framejit.compile(f, backend="eager")
    eager_before = framejit.stats()["eager_frames"]
    x = torch.ones(2)
    for g in (G(), S()):
        torch.testing.assert_close(cf(x, g), f(x, g))
    collections.abc.Mapping.register(G)
    collections.abc.Sequence.register(S)
    for g in (G(), S()):
        torch.testing.assert_close(cf(x, g), f(x, g))
    assert framejit.stats()["eager_frames"] == eager_before


def test_a_tuple_subclass_with_fields_alone_is_a_pytree_leaf():
    # 79ae420: any tuple subclass with a `_fields` tuple was walked as a namedtuple node; torch's pytree
    # (is_namedtuple_class) also wants callable _make and _asdict, else the tuple is a leaf: tree_leaves
    # gave its two items (eager: the tuple itself) and tree_map mapped into it.
    import torch.utils._pytree as pytree

    class Fields(tuple):
        _fields = ("a", "b")

    def f(x, t):
        return pytree.tree_leaves([x, t]), pytree.tree_map(lambda v: type(v).__name__, [x, t])

    cf = framejit.compile(f, backend="eager")
    for _ in range(2):
        x = torch.randn(2)
        t = Fields((torch.ones(1), 2))
        want, got = f(x, t), cf(x, t)
        assert len(got[0]) == len(want[0]) == 2 and got[0][1] is t
        assert got[1] == want[1] == ["Tensor", "Fields"]


def test_tree_map_keeps_the_structure_it_flattened_when_the_function_changes_the_tree():
    # 79ae420: tree_map rebuilt its result by walking the tree again after the function ran; a function that
    # changes the tree's containers (replaces a list by a leaf, adds or pops keys) changed the result's
    # structure (or raised IndexError inside framejit: an internal error, the frame ran eagerly). torch
    # flattens first, so the result has the structure the tree had before the calls.
    import torch.utils._pytree as pytree

    def f(x, tree):
        def g(t):
            tree["a"] = 0
            tree["z"] = t
            return t * 3
        return pytree.tree_map(g, tree), tree

    def make(x):
        return {"a": [x, x + 1], "b": x * 2}

    cf = framejit.compile(f, backend="eager")
    eager_before = framejit.stats()["eager_frames"]
    for n in (2, 2, 3):
        x = torch.randn(n)
        (want, want_tree), (got, got_tree) = f(x, make(x)), cf(x, make(x))
        assert list(got) == list(want) == ["a", "b"] and len(got["a"]) == 2
        for a, b in ((got["a"][0], want["a"][0]), (got["a"][1], want["a"][1]), (got["b"], want["b"])):
            torch.testing.assert_close(a, b)
        assert list(got_tree) == list(want_tree) and got_tree["a"] == 0
    assert framejit.stats()["eager_frames"] == eager_before


def test_an_object_with_only_getitem_is_iterated_by_the_sequence_protocol():
    # Found while matching sequence patterns: iterating an object whose class has __getitem__ but no
    # __iter__ raised TypeError('... is not iterable') in the trace; CPython iterates self[0], self[1], ...
    # until IndexError. Caught by the user's `except TypeError`, the compiled code took that branch.
    class Seq:
        def __getitem__(self, i):
            if i >= 2:
                raise IndexError(i)
            return (3, 4)[i]

    def unpack(x, s):
        try:
            a, b = s
        except TypeError:
            return x - 100
        return x * a + b

    def listed(x, s):
        try:
            return x + sum(list(s))
        except TypeError:
            return x - 100

    for f in (unpack, listed):
        cf = framejit.compile(f, backend="eager")
        for n in (2, 3):
            x = torch.randn(n)
            torch.testing.assert_close(cf(x, Seq()), f(x, Seq()))
