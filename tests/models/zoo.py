"""The model zoo: small realistic PyTorch models written the way model code is usually written.

Role: one registry of capture targets for tests and benchmarks. Every model is our own code in the
style of a common architecture (MLP, ResNet-style CNN, GPT decoder, BERT encoder, ViT, LSTM, GRU-cell
loop, mixture of experts) and uses the Python idioms a bytecode-capturing compiler meets in practice:
helper functions, config dataclasses, `nn.ModuleList`/`nn.Sequential`/`nn.ModuleDict` loops,
`self.training` checks, `F.*` calls, view/transpose/reshape, masked_fill, softmax, and tuple, dict,
dataclass and namedtuple return values.

Usage:
    from tests.models import zoo
    for name in zoo.names():
        case = zoo.get(name, size="small")        # or size="bench"
        out = case.model(*case.make_inputs(0))
        tensors = zoo.output_tensors(out)         # flatten any model output for comparisons

Invariants: `get` builds a fresh model every call (tests may mutate it); the model is float32 on the
CPU, in eval mode, with weights fixed by a seed; "small" keeps every tensor to a few thousand elements
(fit for a slow interpreter), "bench" is realistic but runs in milliseconds on a CPU.
Main types: `Case` (see tests/models/_case.py).
"""

from __future__ import annotations

from typing import Callable

from tests.models import bert, gpt, moe, recurrent, vision_basic, vit
from tests.models._case import SIZES, Case, check_size, output_tensors

__all__ = ["Case", "SIZES", "get", "names", "output_tensors"]

_BUILDERS: dict[str, Callable[[str], Case]] = {
    "mlp": vision_basic.build_mlp,
    "cnn": vision_basic.build_cnn,
    "gpt": gpt.build_gpt,
    "gpt_loss": gpt.build_gpt_loss,
    "bert": bert.build_bert,
    "vit": vit.build_vit,
    "lstm": recurrent.build_lstm,
    "gru_cell": recurrent.build_gru_cell,
    "moe": moe.build_moe,
}


def names() -> list[str]:
    """All model names, in a stable order."""
    return list(_BUILDERS)


def get(name: str, size: str = "small") -> Case:
    """A freshly built case for model `name` at `size` ("small" or "bench")."""
    if name not in _BUILDERS:
        raise ValueError(f"unknown model {name!r}; accepted names: {', '.join(_BUILDERS)}")
    check_size(size)
    return _BUILDERS[name](size)
