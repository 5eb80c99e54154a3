"""`module_call` and `module_forward`: the frames a compiled nn.Module's call and its `forward` run through.

`framejit.compile(module)` compiles this function (its first argument is the original module), and code
at graph breaks calls a module through its hook. The frame cache names it in its keys (with the module's
class) and locators, so it lives in a module of its own that hook.py, convert.py and frame_cache.py can
all import.
"""
from __future__ import annotations


def module_call(module, /, *args, **kwargs):
    """The frame compiled for `compiled_module(...)` (and for module calls after a graph break)."""
    return module(*args, **kwargs)


def module_forward(module, /, *args, **kwargs):
    """The frame compiled for `compiled_module.forward(...)`: the module's forward without its hooks, as eager
    (NOTE [The forward of a compiled module] in api.py)."""
    # the class's forward, not `module.forward`: the bound method a caller took (`orig = compiled.forward`) is
    # what a `forward` later set on the instance wraps (accelerate's hooks: `m.forward = partial(new, m)` calling
    # the old one); looking `forward` up again found that wrapper and recursed (review revO O6)
    return type(module).forward(module, *args, **kwargs)


__all__ = ["module_call", "module_forward"]
