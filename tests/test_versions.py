"""On a CPython framejit does not support (3.14 and later, 3.10 and earlier), `framejit.compile` runs the
model eagerly with one warning and never crashes (the version is stood in for by monkeypatching
`framejit.versions.python_version`, the one place that reads it)."""
from __future__ import annotations

import subprocess
import sys
import warnings

import pytest
import torch

import framejit
from framejit import versions


def fn(x, y):
    return x[1:, ::2] + y[:-1, 1::2] * 2


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)

    def forward(self, x):
        return torch.relu(self.linear(x))


@pytest.fixture
def unsupported(monkeypatch, request):
    monkeypatch.setattr(versions, "python_version", lambda: request.param)
    monkeypatch.setattr(versions, "_warned", False)
    return request.param


@pytest.mark.parametrize("unsupported", [(3, 14), (3, 15), (3, 10)], indirect=True)
def test_unsupported_python_runs_eagerly_with_one_warning(unsupported):
    before = framejit.stats()["frames_traced"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = framejit.compile(fn)
        decorated = framejit.compile(backend="eager", fullgraph=True)(fn)
        module = Net()
        compiled_module = framejit.compile(module)
        for n in (5, 7):
            x, y = torch.randn(n, 6), torch.randn(n, 6)
            assert torch.equal(compiled(x, y), fn(x, y))
            assert torch.equal(decorated(x, y), fn(x, y))
            inp = torch.randn(n, 4)
            assert torch.equal(compiled_module(inp), module(inp))
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(messages) == 1, messages
    assert f"this is {unsupported[0]}.{unsupported[1]}" in messages[0] and "eagerly" in messages[0]
    assert caught[0].filename == __file__  # the warning points at the user's call
    assert compiled is fn and decorated is fn and compiled_module is module
    assert framejit.stats()["frames_traced"] == before  # nothing was traced


def test_supported_python_compiles():
    assert versions.unsupported_reason() is None
    assert versions.python_version() in versions.SUPPORTED
    compiled = framejit.compile(fn)
    assert compiled is not fn
    x, y = torch.randn(4, 6), torch.randn(4, 6)
    assert torch.equal(compiled(x, y), fn(x, y))


def test_unsupported_python_never_imports_the_api():
    """In a fresh process on an 'unsupported' CPython, `framejit.compile` resolves without importing
    framejit.api or torch (so no capture code can meet an instruction set it does not know)."""
    script = (
        "import sys, warnings\n"
        "import framejit.versions as v\n"
        "v.python_version = lambda: (3, 14)\n"
        "import framejit\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        "    f = framejit.compile(lambda a: a + 1)\n"
        "assert f(2) == 3\n"
        "assert len(w) == 1, w\n"
        "assert 'framejit.api' not in sys.modules and 'torch' not in sys.modules\n"
        "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
