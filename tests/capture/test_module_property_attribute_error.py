"""A property of an nn.Module subclass whose getter raises AttributeError goes on to nn.Module.__getattr__, as
CPython's slot_tp_getattr_hook does (NOTE [__getattr__ after a getter's AttributeError], hhuntG8 MED-1): the
error names the property (`'M' object has no attribute 'scale'`), not what the getter missed, and a parameter
registered under the property's name is the answer. Before, the getter's own AttributeError left the lookup.
"""
from __future__ import annotations

import torch

import framejit


class _Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.on = False

    @property
    def scale(self):
        if self.on:
            return 2.0
        return self.missing_thing

    def forward(self, x):
        return x * self.scale


def _outcome(fn, x):
    r = fn(x)
    return r if isinstance(r, str) else r.tolist()


def test_module_property_attribute_error_goes_to_module_getattr():
    m = _Scaled()

    def f(x):
        try:  # caught in the compiled frame: the trace, not Python, answers the message
            return m(x)
        except AttributeError as e:
            return str(e)

    compiled = framejit.compile(f, backend="eager")
    steps = [lambda: None, lambda: m.register_parameter("scale", torch.nn.Parameter(torch.full((2,), 5.0))),
             lambda: setattr(m, "on", True), lambda: (setattr(m, "on", False), m._parameters.pop("scale"))]
    for i, step in enumerate(steps):
        step()
        x = torch.arange(2.0) + i
        assert _outcome(compiled, x) == _outcome(f, x), i
