"""Tensor methods reached through the class (`torch.Tensor.size(x)`, `torch._C.TensorBase.data_ptr(x)`,
`type(x).size(x)`) and object-protocol dunders called explicitly (`x.__hash__()`, `x.__reduce_ex__(2)`,
`x.__deepcopy__(memo)`): compiled == eager (NOTE [Tensor methods called unbound], NOTE [Object protocol methods of
tensors]; revBE PRE-1 / PRE-2, issue 12). Answers tied to an object's identity are compared through relations
(`== id(x)`, `== x.data_ptr()`), computed eagerly on the tensors the frame returns."""
import pytest
import torch

import framejit


class MyT(torch.Tensor):
    pass


def _plain(shape):
    return torch.arange(float(shape[0] * shape[1])).reshape(shape) - 2


def _transposed(shape):
    return _plain(shape[::-1]).t()


MAKERS = {
    "plain": _plain,
    "param": lambda s: torch.nn.Parameter(_plain(s)),
    "transposed": _transposed,
    "subclass": lambda s: _plain(s).as_subclass(MyT),
}
SHAPES = [(2, 3), (4, 3)]


def _outcome(fn, x):
    try:
        return fn(x)
    except Exception as e:  # noqa: BLE001 - the exception is part of what is compared
        return (type(e), str(e)[:60])


def _check(fn, maker, view):
    compiled = framejit.compile(fn, backend="eager")
    for shape in SHAPES:
        want = _outcome(fn, MAKERS[maker](shape))
        got = _outcome(compiled, MAKERS[maker](shape))
        assert view(got) == view(want), (shape, got, want)


def _facts(value):
    if isinstance(value, torch.Tensor):
        return type(value).__name__, value.tolist()
    if isinstance(value, (tuple, list)):
        return type(value).__name__, [_facts(v) for v in value]
    return value


def _returned(fn):
    """The facts of `(t, answer)` a frame returned, identity answers as relations to `t` itself."""
    def view(result):
        if not (isinstance(result, tuple) and isinstance(result[0], torch.Tensor) and type(result[1]) is int):
            return _facts(result)
        t, answer = result
        return type(answer).__name__, answer == id(t), answer == t.data_ptr(), \
            answer if not isinstance(answer, int) else None
    return view


def unbound_data_ptr(x):
    return torch.Tensor.data_ptr(x) == x.data_ptr(), torch._C.TensorBase.data_ptr(x) == x.data_ptr(), \
        type(x).data_ptr(x) == x.data_ptr()


def unbound_data_ptr_made(x):
    y = x * 2
    return y, torch._C.TensorBase.data_ptr(y)


def unbound_size(x):
    sizes = (torch._C.TensorBase.size(x), torch.Tensor.size(x), type(x).size(x), getattr(torch.Tensor, "size")(x),
             torch.Tensor.size(x, 0))
    return [(type(s).__name__, s) for s in sizes]


def unbound_reduce_ex(x):
    return torch.Tensor.__reduce_ex__(x, 2)[0].__name__


def bound_hash(x):
    return x.__hash__() == hash(x), x.__hash__() == id(x)


def bound_hash_made(x):
    y = x + 1
    return y, y.__hash__()


def bound_reduce_ex(x):
    reduced = x.__reduce_ex__(2)
    return reduced[0].__name__, reduced[1][2:4]


def unbound_python_methods(x):
    return torch.Tensor.__repr__(x), torch.Tensor.__format__(x, "")


def unbound_reflected(x):
    return torch.Tensor.__rsub__(x, 1)


def unbound_deepcopy(x):
    return torch.Tensor.__deepcopy__(x, {}).shape


def bound_deepcopy(x):
    copied = x.__deepcopy__({})
    return type(copied).__name__, copied is x, copied.shape


CASES = [
    (unbound_data_ptr, "param"), (unbound_data_ptr, "subclass"), (unbound_data_ptr_made, "plain"),
    (unbound_size, "plain"), (unbound_size, "subclass"),
    (unbound_reduce_ex, "transposed"), (unbound_reduce_ex, "plain"),
    (bound_hash, "param"), (bound_hash, "subclass"), (bound_hash_made, "plain"),
    (bound_reduce_ex, "transposed"), (bound_reduce_ex, "param"), (bound_deepcopy, "subclass"),
    (unbound_python_methods, "subclass"), (unbound_deepcopy, "subclass"), (unbound_reflected, "subclass"),
]


@pytest.mark.parametrize("fn,maker", CASES, ids=[f"{fn.__name__}-{maker}" for fn, maker in CASES])
def test_tensor_methods_unbound_and_dunders_match_eager(fn, maker):
    framejit.reset()
    _check(fn, maker, _returned(fn))


def protocol_checks(x, pair):
    return (torch.overrides.has_torch_function_unary(x), torch.overrides.has_torch_function(pair),
            torch.overrides.has_torch_function_variadic(x, 1))


def test_protocol_checks_of_subclass_tensors_match_eager():
    """NOTE [Protocol checks of subclass tensors]: has_torch_function* of a subclass tensor is True (False on the fake),
    and False under an outside DisableTorchFunctionSubclass (the dispatch state is guarded)."""
    framejit.reset()
    compiled = framejit.compile(protocol_checks, backend="eager")
    calls = [("subclass", False), ("subclass", True), ("plain", False), ("param", False), ("subclass", False)]
    for i, (maker, dispatch_off) in enumerate(calls):
        answers = []
        for fn in (protocol_checks, compiled):
            x = MAKERS[maker](SHAPES[i % 2])
            if dispatch_off:
                with torch._C.DisableTorchFunctionSubclass():
                    answers.append(fn(x, [torch.ones(1), x]))
            else:
                answers.append(fn(x, [torch.ones(1), x]))
        assert answers[1] == answers[0], (i, maker, dispatch_off, answers)
