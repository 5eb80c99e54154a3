"""tools/share_dists.py (Makefile, NOTE on disk): python-independent binary distributions are hard-linked from
one virtual environment into another so that pip treats them as installed; everything else is left to pip."""
import importlib.util
import os
import subprocess
import sys
import venv

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
spec = importlib.util.spec_from_file_location("share_dists", os.path.join(ROOT, "tools", "share_dists.py"))
share_dists = importlib.util.module_from_spec(spec)
spec.loader.exec_module(share_dists)


def _dist(site, name, version, tag, files, extra_record=()):
    info = os.path.join(site, f"{name}-{version}.dist-info")
    os.makedirs(info)
    with open(os.path.join(info, "WHEEL"), "w") as fh:
        fh.write(f"Wheel-Version: 1.0\nTag: {tag}\n")
    with open(os.path.join(info, "METADATA"), "w") as fh:
        fh.write(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    record = [f"{name}-{version}.dist-info/WHEEL,,", f"{name}-{version}.dist-info/METADATA,,"]
    for rel, body in files.items():
        path = os.path.join(site, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as fh:
            fh.write(body)
        record.append(f"{rel},,")
    record.extend(extra_record)
    record.append(f"{name}-{version}.dist-info/RECORD,,")
    with open(os.path.join(info, "RECORD"), "w") as fh:
        fh.write("\n".join(record) + "\n")


@pytest.fixture
def sites(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir(), dst.mkdir()
    _dist(str(src), "nvidia_cublas", "13.1", "py3-none-manylinux_2_27_x86_64",
          {"nvidia/cublas/lib/libcublas.so.13": "ELF", "nvidia/cublas/__init__.py": ""})
    _dist(str(src), "sympy", "1.14", "py3-none-any", {"sympy/__init__.py": "x = 1"})
    _dist(str(src), "triton", "3.8", "cp313-cp313-manylinux_2_27_x86_64", {"triton/__init__.py": ""})
    _dist(str(src), "withscript", "1.0", "py3-none-manylinux_2_27_x86_64", {"ws/lib.so": "ELF"},
          extra_record=["../../../bin/ws,,"])
    _dist(str(src), "already", "2.0", "py3-none-manylinux_2_27_x86_64", {"already/lib.so": "new"})
    _dist(str(dst), "already", "1.0", "py3-none-manylinux_2_27_x86_64", {"already/lib.so": "old"})
    return str(src), str(dst)


def test_only_python_independent_binary_distributions_are_linked(sites):
    src, dst = sites
    shared = share_dists.share(dst, src)
    assert shared == ["nvidia_cublas-13.1.dist-info"]
    lib = os.path.join(dst, "nvidia/cublas/lib/libcublas.so.13")
    assert os.path.samefile(lib, os.path.join(src, "nvidia/cublas/lib/libcublas.so.13"))
    assert os.path.isfile(os.path.join(dst, "nvidia_cublas-13.1.dist-info", "RECORD"))
    # pure-Python (py3-none-any), interpreter-specific (cp313), files outside site-packages, and a name the
    # destination already has (another version) are all left to pip
    for absent in ("sympy", "triton", "ws", "sympy-1.14.dist-info", "triton-3.8.dist-info"):
        assert not os.path.exists(os.path.join(dst, absent)), absent
    with open(os.path.join(dst, "already/lib.so")) as fh:
        assert fh.read() == "old"
    # idempotent: a second run links nothing more and raises nothing
    assert share_dists.share(dst, src) == []


def test_a_distribution_that_cannot_be_linked_whole_leaves_nothing_behind(sites):
    src, dst = sites
    os.makedirs(os.path.join(dst, "nvidia/cublas"))
    with open(os.path.join(dst, "nvidia/cublas/__init__.py"), "w") as fh:
        fh.write("# a file pip did not record")
    assert share_dists.share(dst, src) == []
    assert not os.path.exists(os.path.join(dst, "nvidia/cublas/lib"))
    assert not os.path.exists(os.path.join(dst, "nvidia_cublas-13.1.dist-info"))


def test_pip_in_the_destination_sees_a_linked_distribution_as_installed(tmp_path, sites):
    src, _ = sites
    env = tmp_path / "env"
    venv.create(env, with_pip=False, symlinks=True)
    python = str(env / "bin" / "python")
    # the tool looks for SOURCE/lib/python3*/site-packages: point it at a venv-shaped copy of src
    fake = tmp_path / "fakevenv" / "lib" / "python3.99" / "site-packages"
    fake.parent.mkdir(parents=True)
    os.symlink(src, fake)
    out = subprocess.run([python, os.path.join(ROOT, "tools", "share_dists.py"), str(tmp_path / "fakevenv")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "linked 2 distributions" in out.stdout  # nvidia_cublas and `already`, which this venv lacks
    probe = "import importlib.metadata as m; print(m.version('nvidia_cublas'))"
    out = subprocess.run([python, "-c", probe], capture_output=True, text=True)
    assert out.stdout.strip() == "13.1", out.stderr
