"""Backend artifacts across processes: the models of test_persist.py, and the fresh process that loads.

`build(backend)` makes the same seeded FX graph in every process. Run as
`python -m tests.backends.persist_worker DIR`, it loads every `DIR/<backend>.bin` written by the test
with that backend's `load`, while the lowering entry points of onnxrt and triton are replaced by
functions that count the call and raise. It then compares the loaded callable with eager `gm` on two
fresh input sets, checks that a *new* input signature does reach the patched lowering (so a zero count
means something), and prints one JSON line per backend.
"""
from __future__ import annotations

import json
import os
import sys

import torch

F32 = dict(rtol=1e-4, atol=1e-5)
LOWERED: dict[str, int] = {}


class Net(torch.nn.Module):
    """Linear (extern/ORT), softmax (a reduction), a trace-time constant, and a nested return value."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)
        self.register_buffer("shift", torch.linspace(-1.0, 1.0, 8))

    def forward(self, x, scale):
        y = torch.softmax(self.linear(x).relu() * scale + self.shift, dim=-1)
        return y, [y * 2.0, {"sin": torch.sin(x)}]


class TensorNet(Net):
    def forward(self, x):  # triton compiles tensor inputs only
        return super().forward(x, 1.5)


def build(backend: str):
    """(gm, make_inputs(seed, rows), options) for `backend`; identical in every process."""
    torch.manual_seed(0)
    model = (TensorNet() if backend == "triton" else Net()).requires_grad_(False)
    gm = torch.fx.symbolic_trace(model)

    def make_inputs(seed: int, rows: int = 3):
        x = torch.randn(rows, 8, generator=torch.Generator().manual_seed(seed))
        return [x] if backend == "triton" else [x, 0.5]

    options = {"fallback_ops": ["aten::sin"]} if backend == "onnxrt" else None  # an eager part too
    return gm, make_inputs, options


def compile_with(backend: str, gm, example_inputs, options):
    from framejit.backends import lookup_backend

    fn = lookup_backend(backend)
    return fn(gm, example_inputs) if options is None else fn(gm, example_inputs, options)


def _counting(name: str):
    def lowering_was_called(*args, **kwargs):
        LOWERED[name] = LOWERED.get(name, 0) + 1
        raise RuntimeError(f"{name} must not run when loading an artifact")
    return lowering_was_called


def patch_lowering() -> None:
    import framejit.backends.onnxrt.lowering as onnx_lowering
    import framejit.backends.onnxrt.partition as onnx_partition
    import framejit.backends.onnxrt.translate as onnx_translate
    import framejit.backends.triton as triton_pkg
    import framejit.backends.triton.lowering as triton_lowering

    onnx_lowering.lower = _counting("onnxrt.lower")
    onnx_partition.partition = _counting("onnxrt.partition")
    onnx_translate.to_onnx_bytes = _counting("onnxrt.to_onnx_bytes")
    triton_pkg.compile_graph = _counting("triton.compile_graph")
    triton_lowering.to_aten = _counting("triton.to_aten")


def check(backend: str, data: bytes) -> dict:
    from framejit.backends import registry

    LOWERED.clear()
    gm, make_inputs, _ = build(backend)
    loaded = registry.entry_for(backend).load_artifact(data, gm, make_inputs(0))
    for seed in (0, 1):
        inputs = make_inputs(seed)
        torch.testing.assert_close(loaded(*inputs), gm(*inputs), **F32)
    before = sum(LOWERED.values())
    result = {"backend": backend, "type": type(loaded).__name__, "lowered_when_loading": before}
    # A new signature must reach the (patched) lowering: proof that the patches are live.
    inputs = make_inputs(2, rows=5)
    if backend == "onnxrt":
        torch.testing.assert_close(loaded(*inputs), gm(*inputs), **F32)  # its lowering fails: runs eagerly
    elif backend == "triton":
        compile_with("triton", gm, inputs, None)
    result["lowered_for_new_signature"] = sum(LOWERED.values()) - before
    return result


def main(directory: str) -> int:
    os.environ.setdefault("TRITON_INTERPRET", "1")
    patch_lowering()
    with torch.no_grad():
        for backend in ("eager", "onnxrt", "triton"):
            with open(os.path.join(directory, f"{backend}.bin"), "rb") as f:
                print(json.dumps(check(backend, f.read())), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
