"""NumPy code on traced tensors (capture/numpy_support.py, NOTE [NumPy as torch]).

Differential: every function runs eagerly and compiled on fresh inputs (changing shapes and values),
results are compared with their types and NumPy dtypes; graph and break counts are asserted where
capturing the NumPy code (or breaking on it) is the point.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import framejit
from framejit.capture.breaks import BreakKind
from tests.helpers import CountingBackend


def same(actual, expected, rtol=1e-5, atol=1e-6):
    assert type(actual) is type(expected), f"type {type(actual)} != {type(expected)}"
    if isinstance(expected, (np.ndarray, np.generic)):
        assert actual.dtype == expected.dtype, f"dtype {actual.dtype} != {expected.dtype}"
        assert np.shape(actual) == np.shape(expected)
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol)
    elif isinstance(expected, torch.Tensor):
        torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol)
    elif isinstance(expected, (tuple, list)):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            same(a, e, rtol, atol)
    else:
        assert actual == expected, f"{actual!r} != {expected!r}"


def differential(fn, arg_sets, *, fullgraph=False):
    backend = CountingBackend()  # static shapes: the graph counts below are one per shape
    compiled = framejit.compile(fn, backend=backend, fullgraph=fullgraph, dynamic=False)
    for args in arg_sets:
        expected = fn(*[_copy(a) for a in args])
        actual = compiled(*[_copy(a) for a in args])
        same(actual, expected)
    return backend


def _copy(a):
    if isinstance(a, torch.Tensor):
        return a.clone()
    if isinstance(a, np.ndarray):
        return a.copy()
    return a


def breaks(fn, *args):
    return framejit.explain(fn)(*args)


SHAPES = [(3, 4), (5, 2), (2, 6)]


def tensors(dtype=torch.float32):
    return [(torch.randn(*s).to(dtype),) for s in SHAPES]


# ---- one graph: tensor -> ndarray -> NumPy -> tensor ---------------------------------------------------
def to_numpy_and_back(x):
    a = x.numpy()
    b = np.sum(a * 2, axis=0) + np.mean(a) - np.linalg.norm(a, axis=0)
    return torch.from_numpy(np.fft.fftshift(b)) + x[0]


def test_numpy_round_trip_is_one_graph():
    backend = differential(to_numpy_and_back, tensors(), fullgraph=True)
    assert backend.graph_count == len(SHAPES)  # one per shape (static shapes), no break
    report = breaks(to_numpy_and_back, torch.randn(3, 4))
    assert report.graph_count == 1 and report.graph_break_count == 0


def returns_arrays(x):
    a = x.numpy()
    return a.T, a.imag, a.real, a.copy(), a.transpose(1, 0), a.reshape([1, a.size]), a + a, a - a


def test_returned_ndarrays_are_numpy_arrays_with_numpy_dtypes():
    for dtype in (torch.float32, torch.float64, torch.int32, torch.int64):
        framejit.reset()
        backend = differential(returns_arrays, tensors(dtype), fullgraph=True)
        assert backend.graph_count == len(SHAPES)


def attributes(x):
    a = x.numpy()
    return a.itemsize, a.strides, a.shape, a.ndim, a.size, a.dtype, len(a), a.nbytes


def test_metadata_is_answered_at_trace_time():
    backend = differential(attributes, tensors() + tensors(torch.int16), fullgraph=True)
    assert backend.graph_count == 0  # no tensor work at all


def scalars(x):
    a = x.numpy()
    return a.max(axis=0), a.all(axis=0), a.max(), np.sum(a), a[0, 1], a[0], a.mean() * 2, np.float32(2.5) * a


def test_reductions_and_integer_indexing_give_numpy_scalars():
    backend = differential(scalars, tensors() + tensors(torch.int64), fullgraph=True)
    assert backend.graph_count == 2 * len(SHAPES)


def promotion(x):
    a = x.numpy()
    return a / 2, a // 2, a * 1.5, a / a.shape[0], np.pi * a, a.astype(np.float32) + 1, np.sqrt(a * a), (a > 0) / 2


def test_numpy_dtype_promotion_not_torch():
    """int / int is float64 in NumPy (torch gives float32); int * float64 scalar is float64."""
    for dtype in (torch.int64, torch.int32, torch.float32, torch.bool):
        framejit.reset()
        differential(promotion, [(torch.arange(6).reshape(2, 3).to(dtype),), (torch.arange(8).to(dtype),)],
                     fullgraph=dtype is not torch.bool)  # sqrt of bool: float16 in NumPy, a break here


def builtins_on_arrays(x):
    a = x.numpy()
    return len(a), abs(a), sum(a), -a, [r.sum() for r in a], a ** 2, a > 0, a @ a.T


def test_python_builtins_and_operators():
    differential(builtins_on_arrays, tensors(), fullgraph=True)


def dtype_arguments(x):
    dt = np.dtype("float")
    return (np.ones_like(x, dtype=np.float64), np.full_like(x, 2.4, dtype=dt), np.zeros(3, dtype="int16"),
            np.arange(4.0), np.ones(x.shape[0]).astype(np.int8), np.float32(3.5), np.dtype(np.int32))


def test_dtype_arguments_and_dtype_calls():
    backend = differential(dtype_arguments, tensors(), fullgraph=True)
    assert backend.graph_count == len(SHAPES)


def info_constants(x):
    return x + np.finfo(np.float32).min + np.iinfo(np.int16).max + np.pi + np.e


def test_finfo_iinfo_and_constants():
    backend = differential(info_constants, tensors(), fullgraph=True)
    assert backend.graph_count == len(SHAPES)


def meshgrid(x, y):
    r1, r2 = np.meshgrid(x.numpy(), y.numpy())
    return torch.from_numpy(r1), torch.from_numpy(r2)


def test_meshgrid():
    backend = differential(meshgrid, [(torch.randn(3), torch.randn(2)), (torch.randn(4), torch.randn(5))],
                           fullgraph=True)
    assert backend.graph_count == 2


def in_place(x):
    a = x.numpy()
    a += 1
    a[0] = 5
    a *= 2
    return x


def test_in_place_changes_the_tensor_sharing_memory():
    # each write is a graph break (NOTE [NumPy writes into tensors]): in the graph it would bump x's counter
    x1, x2 = torch.randn(3), torch.randn(4)
    differential(in_place, [(x1,), (x2,)])
    compiled = framejit.compile(in_place, backend="eager")
    x = torch.zeros(3)
    compiled(x)
    # the caller's tensor changed through the array, as in eager, and its version counter did not see it
    assert x.tolist() == [10.0, 2.0, 2.0] and x._version == 0


# ---- ndarray arguments ---------------------------------------------------------------------------------
def array_args(a, b):
    return a @ b + np.float64(1.0), np.exp(a).dtype, a.shape


def test_ndarray_arguments_are_guarded_graph_inputs():
    f64 = [(np.ones((2, 2)), np.full((2, 3), 2.0))]
    f32 = [(np.ones((2, 2), dtype=np.float32), np.ones((2, 3), dtype=np.float32))]
    transposed = [(np.arange(6.0).reshape(3, 2).T, np.ones((3, 3)))]  # other strides
    backend = differential(array_args, f64 + f64 + f32 + transposed, fullgraph=True)
    assert backend.graph_count == 3  # dtype and strides recompile; the same metadata hits


def set_items(a, ind, val):
    a[ind] = val
    return a


def test_setitem_into_argument_array():
    compiled = framejit.compile(set_items, backend=CountingBackend(), fullgraph=True)
    for make, ind, val in [(lambda: np.zeros(4), np.s_[...], np.ones(4)),
                           (lambda: np.array([[1, 1], [2, 2]]), np.s_[0, ...], np.zeros(2)),
                           (lambda: np.array([[1, 1], [2, 2]]), np.s_[..., 0], np.array([3, 3]))]:
        expected_arr, actual_arr = make(), make()
        expected = set_items(expected_arr, ind, val)
        actual = compiled(actual_arr, ind, val)
        assert actual is actual_arr  # the caller's array, changed in place
        same(actual, expected)


# ---- graph breaks that keep both sides captured -----------------------------------------------------
def break_in_the_middle(x):
    a = x.numpy() * 2
    print("between")
    b = np.cos(a)
    return torch.from_numpy(b) + x


def test_break_with_a_live_ndarray():
    backend = differential(break_in_the_middle, tensors())
    report = breaks(break_in_the_middle, torch.randn(3, 4))
    assert report.graph_count == 2 and report.graph_break_count == 1


def random_numbers(x):
    y = x * 2
    r = np.random.randn(3)
    return y + torch.from_numpy(r).float().sum(), r - r


def test_np_random_runs_eagerly():
    compiled = framejit.compile(random_numbers, backend=CountingBackend())
    for x in (torch.randn(3), torch.randn(3)):
        np.random.seed(7)
        expected = random_numbers(x)
        np.random.seed(7)
        actual = compiled(x)
        same(actual, expected)
    report = breaks(random_numbers, torch.randn(3))
    assert report.graph_break_count == 1 and report.graph_count == 2
    assert report.break_reasons[0].kind is BreakKind.UNSUPPORTED_CALL


def data_reads(x):
    a = x.numpy()
    y = x + 1
    if a.sum() > 0:
        return y * 2, a.tolist()
    return y - 2, a.tolist()


def test_data_dependent_numpy_breaks_and_matches():
    differential(data_reads, [(torch.ones(3),), (-torch.ones(4),)])


def unknown_function(x):
    a = x.numpy()
    return np.unwrap(a) + 1, x + 1


def test_numpy_function_without_torch_equivalent_breaks():
    differential(unknown_function, tensors())
    report = breaks(unknown_function, torch.randn(3, 4))
    assert report.graph_break_count >= 1
    assert "unwrap" in str(report.break_reasons[0])


def cumsum_small_ints(x):
    a = x.numpy()
    return np.cumsum(a), a + 1


def test_dtype_that_torch_numpy_gets_wrong_is_a_break_not_a_wrong_dtype():
    """NumPy sums int8 into int64; torch._numpy keeps int8 (NOTE [NumPy dtype oracle])."""
    differential(cumsum_small_ints, [(torch.arange(5, dtype=torch.int8),), (torch.arange(7, dtype=torch.int8),)])
    report = breaks(cumsum_small_ints, torch.arange(5, dtype=torch.int8))
    assert report.graph_break_count == 1


def requires_grad_numpy(x):
    return x.numpy()


def test_numpy_of_a_tensor_requiring_grad_raises_like_eager():
    compiled = framejit.compile(requires_grad_numpy, backend="eager")
    x = torch.randn(3, requires_grad=True)
    with pytest.raises(RuntimeError):
        requires_grad_numpy(x)
    with pytest.raises(RuntimeError):
        compiled(x)


def dtype_guarded(a, dt):
    return a + np.iinfo(dt).max


def test_dtype_and_info_arguments_are_guarded_by_value():
    backend = CountingBackend()
    compiled = framejit.compile(dtype_guarded, backend=backend)
    a = torch.zeros(3)
    for dt in (np.dtype(np.int32), np.dtype("int32"), np.ones(1, dtype=np.int32).dtype):
        same(compiled(a, dt), dtype_guarded(a, dt))
    assert backend.graph_count == 1
    same(compiled(a, np.dtype(np.int8)), dtype_guarded(a, np.dtype(np.int8)))
    assert backend.graph_count == 2

    def info_max(a, info):
        return a + info.max

    backend = CountingBackend()
    compiled = framejit.compile(info_max, backend=backend)
    for info in (np.iinfo(np.int16), np.iinfo(np.dtype("int16")), np.iinfo(np.int64)):
        same(compiled(a, info), info_max(a, info))
    assert backend.graph_count == 2


def tensor_with_numpy_scalars(x):
    return x + np.float16(2.5), x * np.int8(3), x - np.finfo(np.float32).eps, x / np.float64(4.0)


def tensor_with_numpy_bool(x):
    return x + np.bool_(True)


def test_numpy_scalars_in_torch_ops_act_as_python_numbers():
    ints = [(torch.arange(4, dtype=torch.int32),), (torch.arange(3, dtype=torch.int64),)]
    backend = differential(tensor_with_numpy_scalars, tensors() + ints, fullgraph=True)
    assert backend.graph_count == len(SHAPES) + 2
    # torch takes np.bool_ for a float (int + np.bool_ is float32): not modelled, a break
    differential(tensor_with_numpy_bool, ints)
    assert breaks(tensor_with_numpy_bool, ints[0][0]).graph_break_count == 1


def numpy_reduction_of_tensor(x):
    return np.sum(x)  # NumPy calls x.sum(axis=None, out=None): a TypeError, as in eager


def numpy_reshape_of_tensor(x):
    return np.reshape(x, (-1,)) * 2  # NumPy calls x.reshape: a torch.Tensor comes back


def numpy_like_of_tensor(x):
    return np.ones_like(x, dtype=np.float64) + np.full_like(x, 2.0)  # converted to arrays: traced


def numpy_ufunc_of_tensor(x):
    return np.cos(x) * 2  # a ufunc hands a torch.Tensor back (the tensor's __array_wrap__)


def test_numpy_functions_given_torch_tensors_follow_eager():
    compiled = framejit.compile(numpy_reduction_of_tensor, backend="eager")
    with pytest.raises(TypeError):
        numpy_reduction_of_tensor(torch.randn(3))
    with pytest.raises(TypeError):
        compiled(torch.randn(3))
    differential(numpy_reshape_of_tensor, tensors())
    assert breaks(numpy_reshape_of_tensor, torch.randn(3, 4)).graph_break_count == 1
    backend = differential(numpy_like_of_tensor, tensors(), fullgraph=True)
    assert backend.graph_count == len(SHAPES)
    differential(numpy_ufunc_of_tensor, tensors())
    assert breaks(numpy_ufunc_of_tensor, torch.randn(3, 4)).graph_break_count == 1


def same_array_twice(x):
    a = x.numpy()
    b = a * 2
    return a, b, b, [b]


def test_returned_arrays_keep_identity_and_memory_sharing():
    compiled = framejit.compile(same_array_twice, backend="eager")
    for n in (3, 5):
        x = torch.randn(n)
        a, b, b2, [b3] = compiled(x)
        assert b is b2 and b is b3
        a[0] = 42.0  # `x.numpy()` shares x's memory in eager: so does the rebuilt array
        assert x[0].item() == 42.0
    differential(same_array_twice, tensors(), fullgraph=True)
