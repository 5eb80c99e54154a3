"""`module_call`, `module_forward` and `module_instance_forward`: the frames a compiled nn.Module's call and its
`forward` (the class's, or one set on the instance) run through.

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
    # with a `forward` set on the instance, the class's: the bound method a caller took (`orig = compiled.forward`)
    # is what that instance forward wraps (accelerate's hooks: `m.forward = partial(new, m)` calling the old one);
    # looking `forward` up again found the wrapper and recursed (review revO O6). The class's entry is bound as
    # attribute access binds it, so a staticmethod or classmethod forward gets no module argument (revO O11).
    if "forward" not in module.__dict__:
        return module.forward(*args, **kwargs)
    # the class's entry found as inspect.getattr_static finds it, in code the trace follows (inlining
    # getattr_static broke 6 times in its descriptor machinery: hhuntHF6, `m.forward = compile(m).forward; m(x)`)
    for klass in type(module).__mro__:
        if "forward" in klass.__dict__:
            return klass.__dict__["forward"].__get__(module, type(module))(*args, **kwargs)
    raise AttributeError(f"{type(module).__name__!r} object has no attribute 'forward'")


def module_instance_forward(module, /, *args, **kwargs):
    """The frame compiled for `compiled_module.forward(...)` when a `forward` is set on the instance: the one eager's
    `module.forward` finds (NOTE [The forward of a compiled module] in api.py)."""
    return module.forward(*args, **kwargs)


__all__ = ["module_call", "module_forward", "module_instance_forward"]
