"""cache_key: deterministic across processes, sensitive to every part and to the runtime versions."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from framejit.cache import cache_key, keys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PARTS = dict(kind="onnx", graph="def forward(self, x):\n    return (x + 1,)", inputs="f32[2,3]", backend="onnxrt[1.32]",
             options="{'opt_level': 2}", device="cpu")


def test_key_is_hex_sha256_and_stable_within_a_process():
    key = cache_key(**PARTS)
    assert keys.is_valid_key(key)
    assert cache_key(**PARTS) == key
    assert cache_key(**dict(reversed(list(PARTS.items())))) == key  # argument order does not matter


def test_key_is_the_same_in_another_process():
    code = f"from framejit.cache import cache_key; print(cache_key(**{PARTS!r}))"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == cache_key(**PARTS)


@pytest.mark.parametrize("name", sorted(PARTS))
def test_changing_any_part_changes_the_key(name):
    changed = dict(PARTS, **{name: PARTS[name] + " "})
    assert cache_key(**changed) != cache_key(**PARTS)


def test_part_names_and_structure_matter():
    assert cache_key(a="1", b="2") != cache_key(a="2", b="1")
    assert cache_key(a="1") != cache_key(b="1")
    assert cache_key(a="1") != cache_key(a=1)
    assert cache_key(a="1", b="") != cache_key(a="1")
    assert cache_key(a={"x": 1, "y": [1, 2]}) == cache_key(a={"y": [1, 2], "x": 1})


@pytest.mark.parametrize("field", ["framejit", "framejit_source", "python", "torch", "machine"])
def test_runtime_versions_are_part_of_the_key(monkeypatch, field):
    before = cache_key(**PARTS)
    versions = dict(keys.runtime_versions(), **{field: "other"})
    monkeypatch.setattr(keys, "runtime_versions", lambda: versions)
    assert cache_key(**PARTS) != before


def test_runtime_versions_name_the_running_versions():
    import torch

    import framejit

    versions = keys.runtime_versions()
    assert versions["torch"] == torch.__version__
    assert versions["framejit"] == framejit.__version__
    assert versions["python"].endswith(".".join(map(str, sys.version_info[:3])))


def test_bad_parts_are_rejected_with_their_name():
    with pytest.raises(TypeError, match="'graph'"):
        cache_key(graph=object())
    with pytest.raises(TypeError, match="'opts'"):
        cache_key(opts={1: "x"})
    with pytest.raises(ValueError, match="NaN"):
        cache_key(x=float("nan"))
    with pytest.raises(ValueError, match="at least one part"):
        cache_key()


def test_is_valid_key():
    assert not keys.is_valid_key("../" + "a" * 61)
    assert not keys.is_valid_key("A" * 64)
    assert not keys.is_valid_key(123)


def _digest_of_copy(package_root):
    import subprocess
    code = "from framejit.cache import keys; print(keys.source_digest())"
    out = subprocess.run([sys.executable, "-c", code], cwd=package_root, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(package_root)}, check=True)
    return out.stdout.strip()


def test_source_digest_follows_framejit_code_not_its_location(tmp_path):
    """NOTE [Source digest in keys]: an edited framejit (same __version__) makes other keys; a copy of the
    same code elsewhere makes the same keys."""
    import shutil

    import framejit

    src = os.path.dirname(framejit.__file__)
    copy = tmp_path / "a"
    shutil.copytree(src, copy / "framejit", ignore=shutil.ignore_patterns("__pycache__"))
    same = _digest_of_copy(copy)
    assert same == keys.source_digest()
    target = copy / "framejit" / "capture" / "guards_note.py"
    target.write_text("# an edit\n")
    edited = _digest_of_copy(copy)
    assert edited != same
    target.unlink()
    (copy / "framejit" / "cache" / "keys.py").write_text((copy / "framejit" / "cache" / "keys.py").read_text() + "\n")
    assert _digest_of_copy(copy) not in (same, edited)


def test_the_source_digest_is_logged_once_per_process(cache_log):
    """A warm process that misses because framejit's sources changed since the cold one (a shared checkout being
    edited) says so: its log names another digest than the cold process's (NOTE [Source digest in keys])."""
    from framejit.cache import keys

    keys.runtime_versions.cache_clear()
    try:
        keys.cache_key(kind="x")
        keys.cache_key(kind="y")
        lines = [m for m in cache_log() if "source digest" in m]
        assert lines == [f"framejit source digest {keys.source_digest()[:16]} (part of every cache key: an edit of "
                         "framejit makes earlier entries misses)"]
    finally:
        keys.runtime_versions.cache_clear()
