"""Shared pieces of the model zoo: the `Case` record, sizes, seeding and output flattening.

Role: every zoo module builds its models through these helpers so that all cases behave alike:
weights are seeded (the global RNG is left untouched), normalisation layers get non-trivial
statistics, models are float32 on the CPU in eval mode, and inputs come from a private
`torch.Generator` seeded by the caller.

Invariants:
- `Case.make_inputs(seed)` returns a fresh tuple of tensors each call; equal seeds give equal values,
  different seeds give different values, and the shapes never depend on the seed.
- Building a case never changes `torch`'s global random state.

Main types: `Case` (what `zoo.get` returns), `SIZES` (the accepted size names).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import torch
from torch import nn

SIZES = ("small", "bench")

# NOTE [Zoo weight seed]
# One fixed seed for every model's weights: a case is a pure function of (name, size), so a test
# that fails can be reproduced by calling `zoo.get(name, size)` again, in any process.
WEIGHT_SEED = 1234


@dataclasses.dataclass
class Case:
    """One model of the zoo at one size, ready to run.

    `tolerance` holds the `atol`/`rtol` recommended for comparing float32 results of this model
    against eager (they allow for a backend that reorders reductions or fuses ops); pass it as
    `torch.testing.assert_close(actual, expected, **case.tolerance)`.
    `fx_traceable` says whether `torch.fx.symbolic_trace(case.model)` gives a module that runs on
    `make_inputs` and matches eager. `dynamo_fullgraph` says whether stock
    `torch.compile(fullgraph=True)` (torch 2.13/2.14, default config) captures the model as one graph.
    Both flags are measured facts, checked by tests/models/test_zoo.py.
    """

    name: str
    size: str
    model: nn.Module
    make_inputs: Callable[[int], tuple]
    fx_traceable: bool
    dynamo_fullgraph: bool
    tolerance: dict[str, float]
    description: str = ""

    @property
    def param_count(self) -> int:
        """Number of distinct parameter elements (tied weights counted once)."""
        return sum(p.numel() for p in self.model.parameters())

    def input_shapes(self) -> list[tuple[tuple[int, ...], str]]:
        """(shape, dtype name) of each input, as `make_inputs` produces them."""
        return [(tuple(t.shape), str(t.dtype).replace("torch.", "")) for t in self.make_inputs(0)]


# NOTE [Zoo tolerances]
# Measured against float64 runs of the same models (same weights and inputs): the float32 outputs
# differ by at most 8e-7 (small) and 3e-6 (bench) in absolute terms. A second float32 implementation
# (reordered reductions, fused ops) can differ from eager by about twice that; the recommended
# tolerances leave a margin of more than ten on top.
_TOLERANCES = {
    "small": {"atol": 2e-5, "rtol": 1e-4},
    "bench": {"atol": 1e-4, "rtol": 1e-4},
}


def default_tolerance(size: str) -> dict[str, float]:
    """The recommended `assert_close` tolerances for float32 outputs of a model of this size."""
    return dict(_TOLERANCES[size])


def check_size(size: str) -> None:
    if size not in SIZES:
        raise ValueError(f"size must be one of {SIZES!r}, got {size!r}")


def build_seeded(factory: Callable[[], nn.Module]) -> nn.Module:
    """Run `factory` under the fixed weight seed without touching the global RNG; return it in eval mode."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(WEIGHT_SEED)
        model = factory()
        randomize_norm_layers(model)
    return model.float().eval()


def randomize_norm_layers(model: nn.Module) -> None:
    """Give BatchNorm/LayerNorm layers non-trivial affine weights and running statistics.

    Freshly built norms are the identity map in eval mode (mean 0, var 1, weight 1, bias 0), which
    would hide a compiler that drops or mis-orders them.
    """
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.modules.batchnorm._BatchNorm):
                module.running_mean.uniform_(-0.5, 0.5)
                module.running_var.uniform_(0.5, 1.5)
            if isinstance(module, (nn.modules.batchnorm._BatchNorm, nn.LayerNorm)):
                if module.weight is not None:
                    module.weight.uniform_(0.75, 1.25)
                if module.bias is not None:
                    module.bias.uniform_(-0.25, 0.25)


def generator(seed: int) -> torch.Generator:
    if not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    return torch.Generator().manual_seed(seed)


def randn(gen: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=torch.float32)


def randint(gen: torch.Generator, high: int, *shape: int) -> torch.Tensor:
    return torch.randint(0, high, shape, generator=gen, dtype=torch.long)


def output_tensors(out: Any) -> list[torch.Tensor]:
    """Flatten a model's return value (tensors, tuples, lists, dicts, dataclasses, None) to tensors.

    Order is deterministic: sequences in order, dicts in insertion order, dataclasses in field order.
    """
    if isinstance(out, torch.Tensor):
        return [out]
    if out is None or isinstance(out, (int, float, bool, str)):
        return []
    if isinstance(out, (tuple, list)):
        return [t for item in out for t in output_tensors(item)]
    if isinstance(out, dict):
        return [t for item in out.values() for t in output_tensors(item)]
    if dataclasses.is_dataclass(out) and not isinstance(out, type):
        fields = dataclasses.fields(out)
        return [t for f in fields for t in output_tensors(getattr(out, f.name))]
    raise TypeError(f"cannot flatten model output of type {type(out).__name__}")
