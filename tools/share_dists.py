"""Hard-link Python-version-independent binary distributions from one virtual environment into another.

Usage (run by the new environment's own interpreter, before its first `pip install`):

    .venv312/bin/python tools/share_dists.py .venv313 [.venv ...]

Why: PyPI's torch for CPython 3.12/3.13 is a CUDA build whose nvidia-* dependencies take about 3.2 GB per
environment. Those wheels are tagged py3-none-<platform>: the same files serve every interpreter. Linking the
installed files of such a distribution (its RECORD, dist-info included) into the new environment makes pip see
the requirement as satisfied, so `make test` downloads and stores them once instead of once per interpreter
(CI ran out of disk installing the second copy). A distribution is shared only when the destination has no
distribution of that name, every wheel tag is python-independent with abi `none` and a platform other than
`any` (pure-Python packages are small and may declare Requires-Python), and every file it records can be linked;
otherwise nothing of it is left behind and pip installs it as usual. Standard library only.
"""
from __future__ import annotations

import csv
import glob
import os
import sys
import sysconfig


def _site_packages(venv: str) -> str | None:
    found = sorted(glob.glob(os.path.join(venv, "lib", "python3*", "site-packages")))
    return found[0] if found else None


def _shareable(dist_info: str) -> bool:
    try:
        with open(os.path.join(dist_info, "WHEEL"), encoding="utf-8") as fh:
            tags = [line.split(":", 1)[1].strip() for line in fh if line.startswith("Tag:")]
    except OSError:
        return False
    if not tags:
        return False
    for tag in tags:
        parts = tag.split("-")
        if len(parts) != 3:
            return False
        py, abi, plat = parts
        if abi != "none" or plat == "any" or not all(p in ("py3", "py2") for p in py.split(".")):
            return False
    return True


def _recorded_files(dist_info: str) -> list[str] | None:
    try:
        with open(os.path.join(dist_info, "RECORD"), encoding="utf-8", newline="") as fh:
            rows = list(csv.reader(fh))
    except OSError:
        return None
    paths = []
    for row in rows:
        if not row or not row[0]:
            continue
        path = row[0]
        if os.path.isabs(path) or path.split("/")[0] == "..":
            return None  # a script or data file outside site-packages: leave it to pip
        paths.append(path)
    return paths


def _dist_name(dist_info: str) -> str:
    base = os.path.basename(dist_info)[: -len(".dist-info")]
    return base.rsplit("-", 1)[0].replace("-", "_").replace(".", "_").lower()


def share(dest_site: str, src_site: str) -> list[str]:
    have = {_dist_name(p) for p in glob.glob(os.path.join(dest_site, "*.dist-info"))}
    shared = []
    for dist_info in sorted(glob.glob(os.path.join(src_site, "*.dist-info"))):
        name = _dist_name(dist_info)
        if name in have or not _shareable(dist_info):
            continue
        files = _recorded_files(dist_info)
        if not files:
            continue
        made: list[str] = []
        try:
            for rel in files:
                src = os.path.join(src_site, rel)
                if not os.path.exists(src):
                    if "__pycache__" in rel:
                        continue  # never compiled there: pip tolerates a missing .pyc on uninstall
                    raise OSError(f"{src} is recorded but missing")
                dst = os.path.join(dest_site, rel)
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                if os.path.exists(dst):
                    raise OSError(f"{dst} exists already")
                os.link(src, dst)
                made.append(dst)
        except OSError as exc:
            for path in made:
                os.unlink(path)
            for path in made:  # directories this attempt created, deepest first, while empty
                parent = os.path.dirname(path)
                while parent != dest_site and os.path.isdir(parent) and not os.listdir(parent):
                    os.rmdir(parent)
                    parent = os.path.dirname(parent)
            print(f"share_dists: not sharing {os.path.basename(dist_info)}: {exc}", file=sys.stderr)
            continue
        have.add(name)
        shared.append(os.path.basename(dist_info))
    return shared


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: share_dists.py SOURCE_VENV [SOURCE_VENV ...] (run by the destination's interpreter)",
              file=sys.stderr)
        return 2
    dest_site = sysconfig.get_paths()["purelib"]
    for venv in argv:
        src_site = _site_packages(venv)
        if src_site is None or os.path.realpath(src_site) == os.path.realpath(dest_site):
            continue
        shared = share(dest_site, src_site)
        if shared:
            print(f"share_dists: linked {len(shared)} distributions from {venv}: {', '.join(shared)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
