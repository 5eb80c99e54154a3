"""Public entry points (placeholder while capture is being built)."""
class FramejitError(Exception):
    pass
class Unsupported(FramejitError):
    pass
def compile(model=None, **kw): raise NotImplementedError
def disable(fn): return fn
def explain(fn): raise NotImplementedError
def mark_dynamic(t, d): raise NotImplementedError
def reset(): pass
def stats(): return {}
