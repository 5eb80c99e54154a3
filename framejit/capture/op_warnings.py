"""Warnings of operations recorded in a graph.

NOTE [Warnings of graph ops]: an op is run on fake tensors while tracing, and a warning it raises there
(`torch.tensor(t)`'s "To copy construct from a tensor", `F.softmax` without `dim`, `torch.range`, `x.T` on
3 dimensions) went to the user at trace time, attributed to framejit's own file; the graph then ran the
real op, which warned again (the eager backend: 2 warnings on the first call, eager 1), or ran no torch
code at all (onnxrt: no warning on later calls, eager one on each call under the "always" filter). An op
whose fake run warns is not recorded: the warning is held back, and the call is a graph break, so the op
runs in Python where eager runs it and warns as eager warns (location, filters, once-registries).
TORCH_WARN_ONCE warnings are made to fire during the fake run (torch's warn-always flag) so that the fake
run detects them without spending the once that eager's own call shows. Warnings raised by the fake-tensor
machinery itself (not by the op as eager runs it) are not the op's, and are dropped.
"""
from __future__ import annotations

import contextlib
import warnings
from typing import Iterator

import torch

from .breaks import BreakKind, Unsupported

# files whose warnings come from tracing machinery, never from the op as eager runs it
_MACHINERY = ("/torch/_subclasses/", "/torch/fx/", "/torch/_dispatch/", "/torch/_guards", "/torch/_library/fake")


@contextlib.contextmanager
def warnings_noted(name: str) -> Iterator[None]:
    """Around the fake run of the op `name`: an op that warned is a graph break (NOTE [Warnings of graph
    ops]). Entered after the trace's own modes (autocast, grad mode), whose warnings are not the op's."""
    caught: list = []
    always, filters, show = torch._C._get_warnAlways(), warnings.filters, warnings._showwarnmsg_impl
    torch._C._set_warnAlways(True)
    # not catch_warnings(): entering it marks the filters changed, which empties every module's registry of
    # warnings shown, and a "default" warning eager shows once per line showed again after each trace
    warnings.filters, warnings._showwarnmsg_impl = [("always", None, Warning, None, 0)], caught.append
    try:
        yield
    except Unsupported:
        raise
    except Exception:
        _break_if_warned(caught, name)
        raise
    finally:
        warnings.filters, warnings._showwarnmsg_impl = filters, show
        torch._C._set_warnAlways(always)
    _break_if_warned(caught, name)


def _break_if_warned(caught: list, name: str) -> None:
    ops = [w for w in caught if not any(m in str(w.filename).replace("\\", "/") for m in _MACHINERY)]
    if ops:
        w = ops[0]
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{name} warns ({w.category.__name__}: "
                                                      f"{str(w.message)[:100]}): it runs in Python, as in eager")
