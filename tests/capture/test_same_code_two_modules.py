"""Two functions of one source in two modules, each reading its own module's global, broken inside by a
graph break the root takes plainly (inside a try block): the callee's resume function was keyed by its code
object, and code objects compare equal without their file, so the second module's function resumed in the
first one's resume function, made with the first module's globals (review revI HIGH-2: K = 2 where eager
read 100, with the cache off too). Values compared with eager on alternating calls."""
from __future__ import annotations

import importlib.util

import pytest
import torch

import framejit

SOURCE = "K = {k}\n\ndef same(x):\n    y = x + 1\n    print('same')\n    return y * K\n"


@pytest.fixture(autouse=True)
def _reset():
    framejit.reset()
    yield
    framejit.reset()


def _module(tmp_path, name, k):
    path = tmp_path / f"{name}.py"
    path.write_text(SOURCE.format(k=k))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def apply(f, x):
    try:
        return f(x - 1) * 3
    except KeyError:
        return x


def test_same_code_of_two_modules_resumes_with_its_own_globals(tmp_path, capsys):
    twins = [_module(tmp_path, "fj_twin_a", 2), _module(tmp_path, "fj_twin_b", 100)]
    compiled = framejit.compile(apply, backend="eager")
    for s in range(4):
        f = twins[s % 2]
        x = torch.randn(3, generator=torch.Generator().manual_seed(s))
        torch.testing.assert_close(compiled(f.same, x), apply(f.same, x))
    assert capsys.readouterr().out == "same\n" * 8
