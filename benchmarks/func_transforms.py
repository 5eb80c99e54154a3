"""Graphs and graph breaks of the torch.func transform programs (tests/capture/func_programs.py):
framejit vs stock torch.compile, each with a counting backend over 3 calls (seeds 0, 1, 2), and whether
the compiled values match eager. Run: python benchmarks/func_transforms.py
"""
from __future__ import annotations

import sys

import torch

sys.path.insert(0, ".")
import framejit  # noqa: E402
from tests.capture.func_programs import PROGRAMS  # noqa: E402


class Counter:
    def __init__(self) -> None:
        self.graphs = 0

    def __call__(self, gm, example_inputs):
        self.graphs += 1
        return gm.forward


def _same(a, b) -> bool:
    flat_a, flat_b = torch.utils._pytree.tree_leaves(a), torch.utils._pytree.tree_leaves(b)
    return len(flat_a) == len(flat_b) and all(torch.allclose(x, y, atol=1e-5) if isinstance(x, torch.Tensor)
                                              else x == y for x, y in zip(flat_a, flat_b))


def _run(compiled, fn, make_args) -> bool:
    ok = True
    for seed in range(3):
        torch.manual_seed(seed)
        args = make_args(seed)
        ok &= _same(compiled(*args), fn(*args))
    return ok


def framejit_counts(fn, make_args):
    framejit.reset()
    counter = Counter()
    ok = _run(framejit.compile(fn, backend=counter), fn, make_args)
    framejit.reset()
    report = framejit.explain(fn)(*make_args(0))
    return counter.graphs, report.graph_break_count, len(report.eager_frames), ok


def stock_counts(fn, make_args):
    import torch._dynamo
    torch._dynamo.reset()
    counter = Counter()
    ok = _run(torch.compile(fn, backend=counter), fn, make_args)
    torch._dynamo.reset()
    report = torch._dynamo.explain(fn)(*make_args(0))
    return counter.graphs, report.graph_break_count, ok


def main() -> None:
    print(f"{'program':22} {'framejit graphs/breaks/eager/ok':34} {'stock graphs/breaks/ok'}")
    for fn, make_args in PROGRAMS:
        try:
            fj = framejit_counts(fn, make_args)
        except Exception as e:  # noqa: BLE001
            fj = f"error {type(e).__name__}: {str(e)[:60]}"
        try:
            st = stock_counts(fn, make_args)
        except Exception as e:  # noqa: BLE001
            st = f"error {type(e).__name__}: {str(e)[:60]}"
        print(f"{fn.__name__:22} {str(fj):34} {st}")


if __name__ == "__main__":
    main()
