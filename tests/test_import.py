"""`import framejit` is light (NOTE [Light import] in framejit/__init__.py): the package, its config,
logs, cache and CLI import without torch, and the public API still resolves on first use.

Each check runs in a fresh interpreter (this test process has imported torch long ago)."""
from __future__ import annotations

import functools
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


# ---- import direction inside capture/ (issue 15) --------------------------------------------------------
@functools.lru_cache(maxsize=None)
def _capture_imports(name: str) -> frozenset[str]:
    """The capture modules `framejit.capture.<name>` imports anywhere in its body (function-level imports
    included: a lazy import hides a loop, it does not break it)."""
    import ast
    import pathlib
    path = pathlib.Path(REPO, "framejit", "capture", *name.split(".")).with_suffix(".py")
    package = name.split(".")[:-1]  # relative to capture/
    if not path.exists():
        path, package = path.with_suffix("") / "__init__.py", name.split(".")
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package[:len(package) - (node.level - 1)] if node.level > 1 else package
            if node.level - 1 > len(package):
                continue  # above capture/
            module = ".".join(base + ([node.module] if node.module else []))
            found |= {m for m in [module] + [f"{module}.{a.name}".lstrip(".") for a in node.names] if m}
    return frozenset(m for m in found if pathlib.Path(REPO, "framejit", "capture", *m.split(".")).with_suffix(".py")
                     .exists() or pathlib.Path(REPO, "framejit", "capture", *m.split("."), "__init__.py").exists())


def _reach(start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for module in _capture_imports(todo.pop()) - seen:
            seen.add(module)
            todo.append(module)
    return seen


def test_capture_imports_go_one_way_hook_convert_frame_cache():
    """hook -> convert -> frame_cache: neither convert.py nor frame_cache.py reaches hook.py, and
    frame_cache.py does not reach convert.py, through any import, lazy ones included."""
    assert "hook" not in _reach("convert")
    assert not {"hook", "convert"} & _reach("frame_cache")
    assert {"convert", "frame_cache"} <= _reach("hook")  # the walk sees real imports



def _capture_imports_of(relpath: str) -> list[tuple[str, str]]:
    """(module, name) of each import of the capture package in `framejit/<relpath>` (lazy ones included):
    `from .capture import X` gives ("framejit.capture", "X"), `from .capture.hook import Y` gives
    ("framejit.capture.hook", "Y"), `import framejit.capture.hook` gives ("framejit.capture.hook", "")."""
    import ast
    import pathlib
    found = []
    for node in ast.walk(ast.parse(pathlib.Path(REPO, "framejit", relpath).read_text())):
        if isinstance(node, ast.ImportFrom):
            module = ("framejit." if node.level == 1 else "") + (node.module or "")
            if module.startswith("framejit.capture"):
                found += [(module, a.name) for a in node.names]
            elif module == "framejit" and node.level == 1:
                found += [("framejit.capture", "") for a in node.names if a.name == "capture"]
        elif isinstance(node, ast.Import):
            found += [(a.name, "") for a in node.names if a.name.startswith("framejit.capture")]
    return found


def test_api_and_cli_use_only_the_capture_facade():
    """api.py and cli.py reach the capture frontend through `framejit.capture` (its __init__ names what
    they may use), never through a capture submodule: the facade of issue 15."""
    import types
    import framejit.capture as capture
    facade = set(capture._LAZY) | {n for n, v in vars(capture).items() if not n.startswith("_")
                                   and isinstance(v, types.FunctionType) and v.__module__ == capture.__name__}
    for relpath in ("api.py", "cli.py"):
        imports = _capture_imports_of(relpath)
        assert imports, relpath  # the walk sees their real imports
        internal = [(m, n) for m, n in imports
                    if m != "framejit.capture" or (n and n not in facade)]
        assert not internal, (relpath, internal)
