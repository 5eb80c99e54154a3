"""Run the soundness fuzzer (tests/soundness) for longer than CI does.

    .venv/bin/python tools/soundness_fuzz.py --seeds 500 --backend eager
    .venv/bin/python tools/soundness_fuzz.py --seeds 50 --backend onnxrt --start 1000 --all-families
    .venv/bin/python tools/soundness_fuzz.py --seeds 200 --backend eager --only class_attr_shadow,hasattr

Prints the programs run and the differences found (one line each, grouped by the families of the shrunk
program) and, for each distinct group, a minimal standalone reproducer (run it with .venv/bin/python).
Excluded families (tests/soundness/excluded.py) are skipped unless --all-families.
"""
from __future__ import annotations

import argparse
import collections
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")

from tests.soundness import fuzz  # noqa: E402
from tests.soundness.excluded import EXCLUDED  # noqa: E402
from tests.soundness.runner import reproducer, shrink  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=100, help="number of programs")
    parser.add_argument("--start", type=int, default=0, help="first seed")
    parser.add_argument("--backend", default="eager", choices=["eager", "onnxrt", "triton"])
    parser.add_argument("--all-families", action="store_true", help="also run excluded families")
    parser.add_argument("--only", default=None, help="comma list of families to run")
    parser.add_argument("--warm", action="store_true",
                        help="run each program against a persistent cache filled by a first copy of it")
    parser.add_argument("--max-blocks", type=int, default=None, help="blocks per program (default 4, triton 2)")
    parser.add_argument("--no-shrink", action="store_true", help="print reproducers of unshrunk programs")
    parser.add_argument("--max-reproducers", type=int, default=20)
    args = parser.parse_args(argv)
    import framejit
    framejit.config.cache_enabled = False
    only = set(args.only.split(",")) if args.only else None
    started = time.time()
    result = fuzz.campaign(args.backend, range(args.start, args.start + args.seeds),
                           all_families=args.all_families, only=only, warm=args.warm,
                           max_blocks=args.max_blocks)
    elapsed = time.time() - started
    if not args.all_families and EXCLUDED:
        print(f"excluded families: {', '.join(sorted(EXCLUDED))}")
    print(f"backend {args.backend}: {result.programs} programs run in {elapsed:.1f} s, "
          f"{len(result.differences)} with a difference")
    print(f"framejit: {result.counters}")
    groups = collections.OrderedDict()
    for found in result.differences:
        with fuzz.persistent_cache(args.warm):
            small = found if args.no_shrink else shrink(found)
        key = (small.program.families, small.what)
        print(f"  {found.headline()[:240]}\n    shrunk: {','.join(small.program.families)} {small.what}")
        groups.setdefault(key, small)
    print(f"{len(groups)} distinct (families, kind) groups")
    for k, (key, small) in enumerate(groups.items()):
        if k >= args.max_reproducers:
            break
        print(f"\n# ======== {','.join(key[0])}: {key[1]}\n{reproducer(small)}")
    return 1 if result.differences else 0


if __name__ == "__main__":
    sys.exit(main())
