"""Backend registry: name -> BackendEntry (lazy import, requirements, version key for cache keys).

A backend follows the torch.compile contract: `backend(gm: torch.fx.GraphModule, example_inputs: list)`
returns a callable that takes the graph's inputs (a flat list of tensors, in placeholder order) and
returns what `gm` returns. Built-in backends are imported only when first looked up, so that importing
framejit never imports onnxruntime or triton.

Invariants: names are unique; `lookup_backend` either returns a callable or raises ValueError naming the
accepted names; a backend whose required modules are missing raises ImportError with an install hint.

Persistence: a built-in backend module may define `save(compiled) -> bytes | None` and
`load(data, gm, example_inputs) -> callable` (contract and format: backends/artifact.py). They are
found lazily as `BackendEntry.save_artifact` / `BackendEntry.load_artifact` (None when the module has
none, and always None for user callables), or through `artifact_functions(backend)` for a backend
given by name or as the callable `resolve` returned. A module may also define `check_options(options)`,
which `check_options(name, options)` calls so that `framejit.compile` rejects bad options at once.
"""
from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import importlib.util
import sys
import types
from typing import Callable, Sequence

BackendFn = Callable[..., Callable]
SaveFn = Callable[[Callable], "bytes | None"]
LoadFn = Callable[..., Callable]  # (data: bytes, gm: torch.fx.GraphModule, example_inputs) -> callable


@dataclasses.dataclass
class BackendEntry:
    name: str
    target: str | None  # "module:attribute" for lazy built-ins, None for registered callables
    fn: BackendFn | None
    requires: tuple[str, ...] = ()
    description: str = ""
    version_key_fn: Callable[[], str] | None = None

    def missing_requirements(self) -> list[str]:
        return [m for m in self.requires if importlib.util.find_spec(m) is None]

    def load(self) -> BackendFn:
        if self.fn is None:
            missing = self.missing_requirements()
            if missing:
                raise ImportError(
                    f"backend {self.name!r} needs {', '.join(missing)}; install with "
                    f"`pip install {' '.join(missing)}`"
                )
            module_name, attr = self.target.split(":")
            self.fn = getattr(importlib.import_module(module_name), attr)
        return self.fn

    @property
    def save_artifact(self) -> SaveFn | None:
        """The backend module's `save(compiled) -> bytes | None`; None if it has none (see artifact.py)."""
        return self._module_function("save")

    @property
    def load_artifact(self) -> LoadFn | None:
        """The backend module's `load(data, gm, example_inputs) -> callable`; None if it has none."""
        return self._module_function("load")

    def _module_function(self, attr: str) -> Callable | None:
        if self.target is None:  # a user callable: framejit cannot know how to persist its results
            return None
        self.load()  # imports the module, or raises ImportError naming what is missing
        module = importlib.import_module(self.target.split(":")[0])
        fn = getattr(module, attr, None)
        return fn if callable(fn) else None

    def version_key(self) -> str:
        """A string that changes whenever the backend's output for the same graph may change."""
        if self.version_key_fn is not None:
            return self.version_key_fn()
        # installed distribution versions, read from package metadata: importing onnxscript only to
        # read its __version__ would cost a warm start ~0.3 s
        versions = []
        for mod in self.requires:
            try:
                versions.append(f"{mod}={importlib.metadata.version(mod)}")
            except Exception:  # not installed as a distribution: still identified by name
                versions.append(mod)
        return f"{self.name}[{','.join(versions)}]"


_REGISTRY: dict[str, BackendEntry] = {}


def _register_builtin(name: str, target: str, requires: Sequence[str], description: str) -> None:
    _REGISTRY[name] = BackendEntry(name, target, None, tuple(requires), description)


_register_builtin("eager", "framejit.backends.eager:eager", (), "run the captured FX graph as Python")
_register_builtin(
    "onnxrt", "framejit.backends.onnxrt:onnxrt", ("onnx", "onnxruntime", "onnxscript"),
    "translate to ONNX and run in ONNX Runtime; unsupported ops fall back to torch",
)
_register_builtin(
    "triton", "framejit.backends.triton:triton", ("triton",),
    "framejit's optimizing compiler: lowering, fusion and generated Triton kernels",
)


def register_backend(
    name: str | Callable | None = None,
    *,
    requires: Sequence[str] = (),
    description: str = "",
    version_key: Callable[[], str] | None = None,
):
    """Register a backend. Use as `@register_backend`, `@register_backend("name")` or
    `register_backend("name")(fn)`. The function's `__name__` is the default name."""
    if callable(name) and not isinstance(name, str):
        return register_backend(None)(name)
    if name is not None and not isinstance(name, str):
        raise TypeError(f"register_backend(name) must be a str or None, got {type(name).__name__}")

    def decorator(fn: BackendFn) -> BackendFn:
        if not callable(fn):
            raise TypeError(f"register_backend: the backend must be callable, got {type(fn).__name__}")
        key = name or getattr(fn, "__name__", None)
        if not key:
            raise ValueError("register_backend: name is required for callables without __name__")
        existing = _REGISTRY.get(key)
        if existing is not None and existing.fn is not fn:
            raise ValueError(f"register_backend: a backend named {key!r} is already registered")
        _REGISTRY[key] = BackendEntry(key, None, fn, tuple(requires), description or (fn.__doc__ or "").strip().split("\n")[0], version_key)
        return fn

    return decorator


def list_backends() -> list[str]:
    return sorted(_REGISTRY)


def entry_for(name: str) -> BackendEntry:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(
            f"unknown backend {name!r} for argument 'backend'; accepted: {', '.join(list_backends())}, "
            f"or a callable (gm, example_inputs) -> callable"
        ) from None


def lookup_backend(name: str) -> BackendFn:
    """The (gm, example_inputs) -> callable registered under `name`."""
    if not isinstance(name, str):
        raise TypeError(f"lookup_backend(name) must be a str, got {type(name).__name__}")
    return entry_for(name).load()


def resolve(backend: str | BackendFn) -> tuple[BackendFn, str]:
    """The backend callable and its cache version key, for a name or a user callable."""
    if isinstance(backend, str):
        entry = entry_for(backend)
        return entry.load(), entry.version_key()
    if callable(backend):
        name = getattr(backend, "__qualname__", None) or type(backend).__qualname__
        return backend, f"user:{getattr(backend, '__module__', '?')}.{name}"
    raise TypeError(
        f"argument 'backend' must be a backend name ({', '.join(list_backends())}) or a callable "
        f"(gm, example_inputs) -> callable, got {type(backend).__name__}"
    )


def check_options(name: str, options: dict) -> None:
    """Validate `options` for the built-in backend `name` with its module's `check_options(options)`
    (onnxrt, triton); raises TypeError/ValueError naming the backend and the accepted keys."""
    entry = entry_for(name)
    check = entry._module_function("check_options")
    if check is not None:
        check(options)


def artifact_functions(backend: str | BackendFn) -> tuple[SaveFn, LoadFn] | None:
    """(save, load) of a built-in backend given by name, by its function or by its callable module;
    None for backends that cannot persist what they compile (user callables)."""
    if isinstance(backend, str):
        entry = entry_for(backend)
    else:
        entry = next((e for e in _REGISTRY.values() if e.target is not None and (
            e.fn is backend or sys.modules.get(e.target.split(":")[0]) is backend)), None)
        if entry is None:
            return None
    save, load = entry.save_artifact, entry.load_artifact
    return (save, load) if save is not None and load is not None else None


class _CallableModule(types.ModuleType):
    """A backend module that can itself be passed as a backend: `torch.compile(m, backend=framejit.backends.onnxrt)`."""

    def __call__(self, gm, example_inputs, **kwargs):
        return getattr(self, self.__framejit_backend_fn__)(gm, example_inputs, **kwargs)


def make_module_callable(module_name: str, fn_name: str) -> None:
    """Let the module `module_name` be called as its backend function `fn_name`."""
    module = sys.modules[module_name]
    module.__framejit_backend_fn__ = fn_name
    module.__class__ = _CallableModule
