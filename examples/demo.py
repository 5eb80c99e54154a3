"""framejit demo: compile a small model, show its graph and guards, and compare with eager."""
from __future__ import annotations

import tempfile
import time

import torch

import framejit


class TinyNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 4)
        self.scale = 0.5

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        if x.shape[0] > 1:
            h = h - h.mean(0, keepdim=True)
        return self.fc2(h) * self.scale, {"norm": h.norm()}


def main() -> None:
    # a fresh persistent cache, so every run of the demo shows a cold compile (see `framejit warm`)
    framejit.config.cache_dir = tempfile.mkdtemp(prefix="framejit-demo-")
    torch.manual_seed(0)
    model = TinyNet().eval()
    compiled = framejit.compile(model, backend="eager")
    x = torch.randn(4, 8)
    start = time.perf_counter()
    out, extra = compiled(x)
    first = time.perf_counter() - start
    ref, ref_extra = model(x)
    report = framejit.explain(model)(x)
    print("== captured graph ==")
    print(report.graphs[0].code.strip())
    print("\n== guards ==")
    print(type(compiled)._framejit_hook.entries[0].guard.source)
    print("== eager vs compiled ==")
    print(f"max |difference| of outputs: {(out - ref).abs().max().item():.3g}, of norms: "
          f"{(extra['norm'] - ref_extra['norm']).abs().item():.3g}")
    print(f"graphs: {report.graph_count}, graph breaks: {report.graph_break_count}, first call {first * 1e3:.1f} ms")
    x2 = torch.randn(1, 8)  # a new batch size: the shape guard fails and framejit recompiles
    out2, _ = compiled(x2)
    stats = framejit.stats()
    counters = {k: stats[k] for k in ("frames_traced", "graphs", "backend_compiles", "frames_loaded")}
    print(f"new shape {tuple(x2.shape)}: matches eager: {torch.allclose(out2, model(x2)[0])}, stats: {counters}")


if __name__ == "__main__":
    main()
