"""NOTE [One guard for the inputs written in place]: the guard that keeps a graph writing inputs in place from
serving calls where a written input shares memory with another input is one check over all the inputs; it
still catches every pair: two list entries being one tensor, two views of one storage, a written input that is
another one's read-only argument, far apart in a long list and introduced between calls. Differential against
eager on the eager backend and on onnxrt (which writes inputs back from functional results, so a graph reused
across aliased inputs would lose a write)."""
from __future__ import annotations

import pytest
import torch

import framejit
from tests.guards.test_guard_cost import _calls

N = 8


@pytest.fixture(autouse=True)
def _reset():
    framejit.reset()
    yield
    framejit.reset()


def data_sgd(ps, gs):
    for p, g in zip(ps, gs):
        p.data.add_(g, alpha=-0.5)


def detach_sgd(ps, gs):
    for p, g in zip(ps, gs):
        p.detach().mul_(0.5).add_(g)


def plain_update(ps, gs):
    for p, g in zip(ps, gs):
        p.add_(g * 2)


def _make(alias: str, grad: bool):
    torch.manual_seed(0)
    ps = [torch.randn(4, requires_grad=grad) for _ in range(N)]
    gs = [torch.randn(4) for _ in range(N)]
    if alias == "same":  # one tensor twice in the list, far apart
        ps[N - 1] = ps[1]
    elif alias == "overlapping views":
        base = torch.randn(8)
        ps[0], ps[N - 2] = base[:4], base[2:6]
    elif alias == "disjoint views":
        base = torch.randn(8)
        ps[3], ps[7] = base[:4], base[4:]
    elif alias == "read is written":  # a read-only argument is a written input
        gs[N - 1] = ps[0].detach() if grad else ps[0]
    elif alias == "read is a view of written":
        gs[2] = (ps[5].detach() if grad else ps[5]).view(2, 2).view(4)
    return ps, gs


ALIASES = ["same", "overlapping views", "disjoint views", "read is written", "read is a view of written"]


def _check(fn, compiled, alias: str, grad: bool) -> int:
    """One call of each on equal fresh inputs: eager's values; how many frames the call traced."""
    expected, gs_e = _make(alias, grad)
    got, gs_c = _make(alias, grad)
    traced = framejit.stats()["frames_traced"]
    fn(expected, gs_e)
    compiled(got, gs_c)
    for e, g in zip([*expected, *gs_e], [*got, *gs_c]):
        assert torch.equal(e.detach(), g.detach()), alias
    return framejit.stats()["frames_traced"] - traced


@pytest.mark.parametrize("fn, backend", [(data_sgd, "eager"), (detach_sgd, "eager"), (plain_update, "eager"),
                                         (data_sgd, "onnxrt")])
@pytest.mark.parametrize("alias", ALIASES)
def test_aliasing_introduced_between_calls_gives_eagers_values(fn, backend, alias):
    compiled = framejit.compile(fn, backend=backend)
    grad = fn is not plain_update
    assert _check(fn, compiled, "none", grad) == 1
    assert _check(fn, compiled, "none", grad) == 0
    traced = _check(fn, compiled, alias, grad)
    if alias != "disjoint views":  # the entry compiled for distinct inputs is not reused for aliased ones
        assert traced >= 1
    _check(fn, compiled, alias, grad)
    _check(fn, compiled, "none", grad)


def test_distinct_inputs_keep_hitting_one_entry():
    compiled = framejit.compile(data_sgd, backend="eager")
    assert [_check(data_sgd, compiled, "none", True) for _ in range(4)] == [1, 0, 0, 0]


def test_read_only_inputs_may_share_memory_without_a_miss():
    """The others (read, not written) may alias each other: one gradient tensor for every parameter."""
    compiled = framejit.compile(data_sgd, backend="eager")
    for shared in (False, True, True):
        expected, gs_e = _make("none", True)
        got, gs_c = _make("none", True)
        if shared:
            gs_e, gs_c = [gs_e[0]] * N, [gs_c[0]] * N
        data_sgd(expected, gs_e)
        compiled(got, gs_c)
        assert all(torch.equal(e.detach(), g.detach()) for e, g in zip(expected, got))


@pytest.mark.parametrize("n", [4, 16])
def test_the_written_inputs_are_checked_apart_in_one_pass(n):
    """Counted, not timed: one NO_ALIASING guard for all the written inputs, and a check reads each input's
    storage once (2n reads for n parameters and n gradients), where one guard per written input read
    n * (2n - 1) + n."""
    compiled = framejit.compile(data_sgd, backend="eager")
    ps, gs = [torch.randn(2, requires_grad=True) for _ in range(n)], [torch.randn(2) for _ in range(n)]
    compiled(ps, gs)
    guard = compiled.entries[0].guard
    assert [g.kind for g in guard.guards].count("NO_ALIASING") == 1
    reads = [c for c in _calls(guard.check, ps, gs) if c == ("c", "untyped_storage")]
    assert len(reads) == 2 * n


def test_a_parameters_storage_is_read_without_a_context_manager():
    """Counted: a Parameter's `__torch_function__` is torch's disabled one, so its storage is read directly (the
    context manager that turns subclass dispatch off took most of a 400-parameter SGD guard check)."""
    from framejit.guards.codegen import _storage_pointer
    p = torch.nn.Parameter(torch.randn(2))

    def check():
        return _storage_pointer(p) == p.data_ptr()

    assert _calls(check) == [("py", "_storage_pointer"), ("c", "untyped_storage"), ("c", "data_ptr"),
                             ("c", "data_ptr")]


def _restrided(x, lr, n):
    y = x * lr + n
    y.as_strided_((2, 2), (2, 1))
    return y.sum(0)


@pytest.mark.parametrize("dynamic", [None, True])
def test_an_op_moving_storages_with_number_inputs_compiles(dynamic):
    """Review revG MED-1 (regression of eef350e): after `as_strided_` every input was a write candidate, the
    dynamic float and int inputs too, which have no fake: AttributeError, the frame ran eagerly (and raised on
    every call with fullgraph=True)."""
    framejit.reset()
    compiled = framejit.compile(_restrided, backend="eager", fullgraph=True, dynamic=dynamic)
    before = framejit.stats()["eager_frames"]
    for i in range(4):
        x = torch.arange(4.) + i
        torch.testing.assert_close(compiled(x, 0.5 / (i + 1), 3 + i), _restrided(x, 0.5 / (i + 1), 3 + i))
    assert framejit.stats()["eager_frames"] == before
