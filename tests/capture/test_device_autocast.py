"""torch.cpu.amp.autocast / torch.cuda.amp.autocast inside compiled code (NOTE [Device autocast classes] in
capture/context.py): the deprecated per-device classes bind their own signature (enabled, dtype,
cache_enabled; the device from the class; their own dtype default). Before, reading them with torch.autocast's
arguments raised KeyError inside the trace and the frame ran wholly eagerly."""
from __future__ import annotations

import warnings

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, assert_same, eager_frames

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


def made_inside(x, dt):
    with torch.cpu.amp.autocast(dtype=dt):
        y = x @ x.T
    with torch.cpu.amp.autocast(False):  # positional: enabled
        z = x @ x.T
    with torch.cpu.amp.autocast(True, torch.bfloat16, False):
        v = x @ x.T
    return y, y.dtype, z.dtype, v.dtype


def default_dtype(x):
    with torch.cpu.amp.autocast():  # the class's own default (bfloat16), not torch.get_autocast_dtype
        return (x @ x.T).dtype, x @ x.T


def test_device_autocast_made_inside_is_captured():
    backend = CountingBackend()
    compiled = framejit.compile(made_inside, backend=backend)
    before = eager_frames()
    for dt, shape in ((torch.bfloat16, (4, 4)), (torch.float16, (3, 5)), (torch.bfloat16, (2, 6))):
        x = torch.randn(*shape)
        assert_same(compiled(x, dt), made_inside(x, dt))
    assert eager_frames() == before
    assert backend.graph_count >= 1


def test_default_dtype_is_the_classs_own_not_the_autocast_setting():
    compiled = framejit.compile(default_dtype, backend="eager")
    before = eager_frames()
    old = torch.get_autocast_dtype("cpu")
    try:
        for setting in (torch.bfloat16, torch.float16, torch.bfloat16):
            torch.set_autocast_dtype("cpu", setting)
            x = torch.randn(3, 3)
            assert_same(compiled(x), default_dtype(x))
    finally:
        torch.set_autocast_dtype("cpu", old)
    assert eager_frames() == before


def test_device_autocast_object_from_outside():
    def f(x, ctx):
        with ctx:
            return x @ x.T

    compiled = framejit.compile(f, backend="eager")
    before = eager_frames()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ctxs = [torch.cpu.amp.autocast(), torch.cpu.amp.autocast(dtype=torch.float16),
                torch.cpu.amp.autocast(enabled=False), torch.cpu.amp.autocast()]
    for ctx in ctxs:
        x = torch.randn(4, 2)
        assert_same(compiled(x, ctx), f(x, ctx))
    assert eager_frames() == before


def test_cuda_autocast_class_on_cpu_tensors():
    def f(x):
        with torch.cuda.amp.autocast():
            y = x @ x.T
        return y, y.dtype

    compiled = framejit.compile(f, backend="eager")
    before = eager_frames()
    for shape in ((3, 3), (2, 5)):
        x = torch.randn(*shape)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert_same(compiled(x), f(x))
    assert eager_frames() == before


def test_bad_arguments_raise_as_eager():
    def f(x):
        with torch.cpu.amp.autocast(bogus=1):
            return x + 1

    compiled = framejit.compile(f, backend="eager")
    with pytest.raises(TypeError) as eager:
        f(torch.ones(2))
    with pytest.raises(TypeError) as got:
        compiled(torch.ones(2))
    assert str(got.value) == str(eager.value)
