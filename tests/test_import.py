"""`import framejit` is light (NOTE [Light import] in framejit/__init__.py): the package, its config,
logs, cache and CLI import without torch, and the public API still resolves on first use.

Each check runs in a fresh interpreter (this test process has imported torch long ago)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import framejit

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_python(code: str, tmp_path) -> dict:
    env = dict(os.environ, PYTHONPATH=REPO, FRAMEJIT_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("FRAMEJIT_LOGS", None)
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_light_modules_do_not_import_torch(tmp_path):
    result = run_python("""
        import json, sys
        import framejit, framejit.cache, framejit.cli, framejit.config, framejit.logs
        import framejit.backends.registry
        store = framejit.cache.default_store()
        names = framejit.list_backends()
        print(json.dumps({"torch": "torch" in sys.modules, "names": names,
                          "cache_dir": framejit.config.cache_dir, "store": store is not None}))
    """, tmp_path)
    assert result["torch"] is False
    assert result["names"] == sorted(framejit.list_backends())
    assert result["cache_dir"] == str(tmp_path / "cache") and result["store"] is True


def test_cli_cache_command_does_not_import_torch(tmp_path):
    result = run_python("""
        import contextlib, io, json, sys
        from framejit import cli
        with contextlib.redirect_stdout(io.StringIO()):
            status = cli.main(["cache", "stats"])
        print(json.dumps({"status": status, "torch": "torch" in sys.modules}))
    """, tmp_path)
    assert result == {"status": 0, "torch": False}


def test_public_api_resolves_lazily_and_works(tmp_path):
    result = run_python("""
        import json, sys
        import framejit
        before = "torch" in sys.modules
        import torch

        def f(x, y):
            return torch.relu(x) * y + 1

        compiled = framejit.compile(f, backend="eager")
        ok = []
        for seed in (0, 1):
            g = torch.Generator().manual_seed(seed)
            x, y = torch.randn(4, 5, generator=g), torch.randn(4, 5, generator=g)
            ok.append(torch.equal(compiled(x, y), f(x, y)))
        names = [n for n in framejit.__all__ if n != "__version__"]
        resolved = {n: callable(getattr(framejit, n)) for n in names}
        from framejit import Unsupported, FramejitError
        print(json.dumps({"before": before, "ok": ok, "resolved": resolved,
                          "subclass": issubclass(Unsupported, FramejitError),
                          "graphs": framejit.stats().get("graphs")}))
    """, tmp_path)
    assert result["before"] is False
    assert result["ok"] == [True, True]
    assert all(result["resolved"].values()), result["resolved"]
    assert result["subclass"] is True
    assert result["graphs"] == 1


def test_unknown_attribute_raises_attribute_error():
    try:
        framejit.no_such_name
    except AttributeError as exc:
        assert "no_such_name" in str(exc)
    else:
        raise AssertionError("framejit.no_such_name did not raise AttributeError")
    assert set(framejit.__all__) <= set(dir(framejit))
