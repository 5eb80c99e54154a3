"""torch's grouping of tensors by device and dtype over several dtypes, in the C++ function's group order.

NOTE [Foreach groups in the C++ order] (capture/foreach_groups.py). `_group_tensors_by_device_and_dtype` over
tensors of several dtypes was a graph break (EMA of a model with BatchNorm: float parameters and the int64
`num_batches_tracked` in AveragedModel(use_buffers=True); mixed-precision optimizers). The groups are built at
trace time in the order the C++ function gives for the same (device, dtype) sequence. Differential over calls
that change values, sizes and the dtype sequence; the group order itself is part of what is compared.
"""
import torch
import torch.nn as nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
from torch.utils._foreach_utils import _group_tensors_by_device_and_dtype

import framejit
from tests.helpers import CountingBackend


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _plain(x):
    if isinstance(x, torch.Tensor):
        return ("t", x.dtype, x.tolist())
    if isinstance(x, dict):
        return [(_plain(k), _plain(v)) for k, v in x.items()]  # in order
    if isinstance(x, (list, tuple)):
        return [_plain(i) for i in x]
    return x


def test_groups_of_several_dtypes_in_cpp_order():
    def make(dtypes, n, seed):
        g = _gen(seed)
        ws = [torch.randn(n, generator=g).to(d) if d.is_floating_point else torch.randint(5, (n,), generator=g).to(d)
              for d in dtypes]
        ps = [w.clone() + 1 for w in ws]
        ps[1] = None  # None entries of later lists are kept
        return ws, ps

    def f(ws, ps, empty):
        total = ws[0][:1].sum().float() * 0  # a graph op before the grouping
        grouped = _group_tensors_by_device_and_dtype([ws, ps, empty], with_indices=True)
        order = []
        for (device, dtype), ((a, b, c), indices) in grouped.items():
            order.append((str(device), dtype, list(indices), len(c)))
            if dtype.is_floating_point:
                torch._foreach_lerp_(a, [p if p is not None else torch.zeros_like(w) for w, p in zip(a, b)], 0.25)
            total = total + sum(w.sum().float() for w in a)  # summed in the groups' order
        plain = torch._C._group_tensors_by_device_and_dtype([ws], False)
        return total, order, [k for k in plain], [len(v[1]) for v in plain.values()]

    framejit.reset()
    eager_before = framejit.stats()["eager_frames"]  # process-wide: other tests' frames count too
    backend = CountingBackend()
    compiled = framejit.compile(f, backend=backend)
    f64, f32, i64, bf = torch.float64, torch.float32, torch.int64, torch.bfloat16
    runs = [([f32, i64, f32, f64], 3, 0), ([f32, i64, f32, f64], 3, 1), ([f32, i64, f32, f64], 5, 2),
            ([i64, bf, f32, f32, i64], 4, 3), ([f64, f32, bf], 2, 4)]
    for dtypes, n, seed in runs:
        ws, ps = make(dtypes, n, seed)
        ws2, ps2 = [w.clone() for w in ws], [p if p is None else p.clone() for p in ps]
        expected, got = f(ws, ps, []), compiled(ws2, ps2, [])
        assert _plain(expected) == _plain(got), dtypes
        assert _plain(ws) == _plain(ws2), dtypes
    assert framejit.stats()["eager_frames"] == eager_before
    # one graph per dtype sequence and size specialisation, no breaks (the grouping was a break: 2 graphs each)
    assert backend.graph_count <= 4, backend.graph_count


def test_ema_of_a_model_with_batchnorm():
    def build():
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 2))
        return model, AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.9), use_buffers=True)

    def step(model, ema, x):
        out = model(x).sum()
        ema.update_parameters(model)
        return out

    (m1, e1), (m2, e2) = build(), build()
    framejit.reset()
    eager_before = framejit.stats()["eager_frames"]  # process-wide: other tests' frames count too
    backend = CountingBackend()
    compiled = framejit.compile(step, backend=backend)
    per_call = []
    for i, n in enumerate((4, 4, 6, 6)):
        x = torch.randn(n, 3, generator=_gen(i))
        before = backend.graph_count
        assert torch.allclose(step(m1, e1, x), compiled(m2, e2, x))
        per_call.append(backend.graph_count - before)
        assert _plain(e1.state_dict()) == _plain(e2.state_dict()) or all(
            torch.allclose(a.float(), b.float()) for a, b in zip(e1.state_dict().values(), e2.state_dict().values()))
    assert framejit.stats()["eager_frames"] == eager_before
    assert sum(per_call) <= 6, per_call
