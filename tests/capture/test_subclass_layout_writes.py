"""An in-place layout op (`t_`, `unsqueeze_`, `as_strided_`...) on a tensor subclass input changes the caller's
own tensor, as eager (NOTE [In-place layout ops on subclass tensors]; review revH HIGH-1).

Differential: eager vs framejit on fresh inputs over several calls with changing sizes, comparing the caller's
tensor afterwards (shape, strides, values, type), the result, and what the user's __torch_function__ saw. Before,
the graph wrote the layout of a plain alias and the caller's tensor kept its old shape.
"""
import pytest
import torch

import framejit

LOG = []


class Logged(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        LOG.append(getattr(func, "__name__", "?"))
        return super().__torch_function__(func, types, args, kwargs)


class Plain(torch.Tensor):
    pass


OPS = {
    "t_": lambda x: x.t_(),
    "transpose_": lambda x: x.transpose_(0, 1),
    "swapdims_": lambda x: x.swapdims_(0, 1),
    "unsqueeze_": lambda x: x.unsqueeze_(0),
    "squeeze_": lambda x: x.unsqueeze_(0).squeeze_(0).unsqueeze_(1),
    "as_strided_": lambda x: x.as_strided_((x.shape[1], x.shape[0]), (1, x.shape[1])),
}


def _state(x, r):
    return (type(x), tuple(x.shape), x.stride(), x.storage_offset(), x.as_subclass(torch.Tensor).tolist(),
            type(r), tuple(r.shape), r.as_subclass(torch.Tensor).tolist())


CASES = [(op, cls, "eager") for op in sorted(OPS) for cls in (Logged, Plain)] + \
    [("t_", Logged, "onnxrt"), ("unsqueeze_", Plain, "onnxrt")]


@pytest.mark.parametrize("op,cls,backend", CASES)
def test_layout_write_reaches_callers_tensor(op, cls, backend):
    write = OPS[op]

    def f(x):
        y = x * 2
        write(x)
        return x * 1 + y.sum()

    cf = framejit.compile(f, backend=backend)
    for n in (2, 3):
        runs = []
        for fn in (f, cf):
            LOG.clear()
            x = torch.arange(2.0 * n).reshape(2, n).as_subclass(cls)
            r = fn(x)
            runs.append((_state(x, r), list(LOG)))
        assert runs[1] == runs[0]
