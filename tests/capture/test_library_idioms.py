"""Library idioms real model code uses, captured whole (issue 11).

Small self-contained programs in the style of transformers' decorators and torch.nn internals: function
and code objects introspected at trace time (`__code__.co_varnames`, `__wrapped__`, `__func__`),
imports inside functions, compile-aware state queries (`torch.compiler.is_compiling()`), dict-subclass
registries read through `super().get`, function identity. Each runs eagerly and compiled on fresh inputs,
several calls, with the state the code reads changed between calls, and asserts the graph count.
"""
from __future__ import annotations

import collections
import dataclasses
import functools
import inspect
import types
from collections.abc import MutableMapping, Sequence

import torch

import framejit
from tests.helpers import CountingBackend, run_differential


def _x(seed):
    return (torch.randn(3, 4),)


# ---- function and code objects are values --------------------------------------------------------------
def config_defaults(func):
    """transformers' merge_with_config_defaults, reduced: find an argument's position from the code."""
    @functools.wraps(func)
    def wrapper(x, *args, **kwargs):
        index = None
        if "scale" in func.__code__.co_varnames:
            index = func.__code__.co_varnames.index("scale") - 1
        if index is not None and len(args) > index:
            kwargs["scale"] = args[index] * 2
            args = args[:index]
        return func(x, *args, **kwargs)
    return wrapper


@config_defaults
def scaled(x, scale=1.0):
    return x * scale


def test_code_varnames_in_wrapper():
    backend = run_differential(lambda x: scaled(x, 3.0), _x)
    assert backend.graph_count == 1


def test_function_metadata_reads():
    def inner(a, b=2, *, c=3):
        return a + b + c

    def fn(x):
        code = inner.__code__
        names = (inner.__name__, inner.__qualname__.split(".")[-1], inner.__module__, code.co_name)
        return x * code.co_argcount + len(names[0]) + inner.__defaults__[0] + inner.__kwdefaults__["c"], names

    backend = run_differential(fn, _x)
    assert backend.graph_count == 1


def test_wrapped_and_bound_method_parts():
    class Model(torch.nn.Module):
        def scale(self, x):
            return x * 2

    model = Model()

    def fn(x):
        method = model.scale
        unwrapped = scaled.__wrapped__
        return method.__func__(method.__self__, x) + unwrapped(x, 5.0), method.__name__

    backend = run_differential(fn, _x)
    assert backend.graph_count == 1


def test_code_reassigned_between_calls_recompiles():
    def target(x):
        return x + 1

    def other(x):
        return x - 1

    def fn(x):
        return x * len(target.__code__.co_varnames) + (1 if target.__code__.co_name == "target" else 0)

    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend)
    x = torch.randn(3)
    try:
        torch.testing.assert_close(compiled(x), fn(x))
        target.__code__ = other.__code__
        torch.testing.assert_close(compiled(x), fn(x))
    finally:
        target.__code__ = target.__code__
    assert backend.graph_count == 2


def test_missing_function_attribute_raises_attribute_error():
    def helper(x):
        return x

    def fn(x):
        try:
            return helper.__wrapped__(x)
        except AttributeError:
            return x + 1

    backend = run_differential(fn, _x)
    helper.__wrapped__ = lambda x: x * 3
    try:
        run_differential(fn, _x, backend=backend, compiled=framejit.compile(fn, backend=backend))
    finally:
        del helper.__wrapped__


def test_function_identity():
    def wrap(f):
        @functools.wraps(f)
        def wrapped(self, x):
            outermost = type(self).forward is wrapped
            return f(self, x) + (1 if outermost else 0)
        return wrapped

    class Layer(torch.nn.Module):
        def forward(self, x):
            return x * 2

    Layer.forward = wrap(Layer.forward)
    layer = Layer()
    backend = run_differential(layer, _x)
    assert backend.graph_count == 1


# ---- imports inside functions --------------------------------------------------------------------------
def test_import_inside_function():
    def fn(x):
        import torch.nn.functional as F
        from torch.nn import functional
        import math
        from operator import add
        return add(F.relu(x), functional.gelu(x) * math.pi)

    backend = run_differential(fn, _x)
    assert backend.graph_count == 1


def test_import_not_yet_imported_breaks_and_matches():
    def fn(x):
        y = x + 1
        import framejit_no_such_module_xyz  # noqa: F401
        return y

    backend = run_differential(fn, _x, fullgraph=False)
    assert backend.graph_count == 1


# ---- compile-aware library paths -----------------------------------------------------------------------
def is_torchdynamo_compiling():
    try:
        import torch
        return torch.compiler.is_compiling()
    except Exception:
        return False


def test_is_compiling_takes_the_compiled_path():
    def fn(x):
        if is_torchdynamo_compiling() and torch.compiler.is_dynamo_compiling() and not torch.compiler.is_exporting():
            return x + 1
        return x - 1

    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend, fullgraph=True)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), x + 1)
    assert fn(x).equal(x - 1)
    assert backend.graph_count == 1


def test_state_queries_are_guarded():
    import torch.fx._symbolic_trace
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    def fn(x):
        if torch.jit.is_scripting() or torch.jit.is_tracing() or torch.fx._symbolic_trace.is_fx_tracing():
            return x - 1
        if torch.backends.mha.get_fastpath_enabled():
            x = x * 2
        return x + len(_get_current_dispatch_mode_stack())

    backend = run_differential(fn, _x)
    assert backend.graph_count == 1
    compiled = framejit.compile(fn, backend=backend)
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        run_differential(fn, _x, backend=backend, compiled=compiled)
    finally:
        torch.backends.mha.set_fastpath_enabled(True)
    assert backend.graph_count == 2


# ---- dict subclasses -------------------------------------------------------------------------------------
class Registry(dict):
    def __setitem__(self, key, value):
        super().__setitem__(key.lower(), value)

    def get(self, key):
        return super().get(key.lower()) or {}


REGISTRY = Registry()
REGISTRY["Linear"] = {"scale": 2}


def test_dict_subclass_read_through_super():
    def fn(x):
        entry = REGISTRY.get("LINEAR")
        return x * entry.get("scale", 1) + len(REGISTRY.get("missing"))

    backend = run_differential(fn, _x)
    REGISTRY["Linear"] = {"scale": 5}
    run_differential(fn, _x, backend=backend, compiled=framejit.compile(fn, backend=backend))
    REGISTRY["Linear"] = {"scale": 2}
    assert backend.graph_count == 2


# ---- dict-subclass outputs made while tracing (ModelOutput) ------------------------------------------------
@dataclasses.dataclass
class Output(collections.OrderedDict):
    """A reduced transformers ModelOutput: fields kept in step with the dict's items."""
    hidden: torch.Tensor | None = None
    extra: torch.Tensor | None = None
    count: int | None = None

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value is not None:
                self[field.name] = value

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        super().__setattr__(key, value)

    def __setattr__(self, name, value):
        if name in self.keys() and value is not None:
            super().__setitem__(name, value)
        super().__setattr__(name, value)

    def __getitem__(self, k):
        if isinstance(k, str):
            return dict(self.items())[k]
        return self.to_tuple()[k]

    def to_tuple(self):
        return tuple(self[k] for k in self.keys())


def test_ordered_dict_dataclass_output_built_and_returned():
    def fn(x):
        out = Output(hidden=x * 2, count=3)
        out.extra = x + 1  # not a key yet: an attribute only
        out.hidden = out.hidden - 1  # a key: item and attribute
        first = out[0] + out["hidden"] + out.hidden
        return out, first, len(out), list(out.keys()), "extra" in out, out.to_tuple()[1:]

    backend = run_differential(fn, _x)
    assert backend.graph_count == 1
    compiled = framejit.compile(fn, backend=CountingBackend())
    out = compiled(torch.ones(2))[0]
    assert type(out) is Output and list(out.items())[0][0] == "hidden" and out.extra.equal(torch.ones(2) + 1)


def test_transformers_model_output():
    from transformers.modeling_outputs import BaseModelOutputWithPooling

    def fn(x):
        out = BaseModelOutputWithPooling(last_hidden_state=x.relu(), pooler_output=x.sum(0))
        return out, out[0] * 2, out.to_tuple(), out.get("pooler_output"), "hidden_states" in out

    backend = run_differential(fn, _x)
    assert backend.graph_count == 1


def test_model_output_with_lone_non_tensor_field_breaks_and_matches():
    from transformers.modeling_outputs import BaseModelOutput

    def fn(x):
        y = x + 1
        out = BaseModelOutput(last_hidden_state=[("last_hidden_state", y)])
        return out, y

    backend = run_differential(fn, _x, fullgraph=False)
    assert backend.graph_count == 1


# ---- inspect, __getattribute__, Mapping -------------------------------------------------------------------
def chunked(fn, x):
    """transformers' apply_chunking_to_forward, reduced: the arity of the callback decides the call."""
    if len(inspect.signature(fn).parameters) == 2:
        return fn(x, x)
    return fn(x)


def test_inspect_signature_parameters():
    class Layer(torch.nn.Module):
        def one(self, a):
            return a * 2

        def two(self, a, b=3):
            return a + b

        def forward(self, x):
            params = inspect.signature(self.two).parameters
            default = params["b"].default
            kinds = [p.kind.name for p in params.values()]
            return chunked(self.one, x) + chunked(self.two, x) * default, kinds, list(params)

    backend = run_differential(Layer(), _x)
    assert backend.graph_count == 1


class AliasedConfig:
    attribute_map = {"hidden_size": "n_embd"}

    def __init__(self):
        self.n_embd = 4

    def __getattribute__(self, key):
        if key != "attribute_map" and key in super().__getattribute__("attribute_map"):
            key = super().__getattribute__("attribute_map")[key]
        return super().__getattribute__(key)


def test_custom_getattribute_is_inlined_and_guarded():
    config = AliasedConfig()

    def fn(x):
        return x * config.hidden_size + getattr(config, "missing", 1)

    backend = run_differential(fn, _x)
    config.n_embd = 7
    run_differential(fn, _x, backend=backend, compiled=framejit.compile(fn, backend=backend))
    assert backend.graph_count == 2


class Interface(MutableMapping):
    _global_mapping = {"sdpa": torch.nn.functional.relu}

    def __init__(self):
        self._local_mapping = {}

    def __getitem__(self, key):
        if key in self._local_mapping:
            return self._local_mapping[key]
        return self._global_mapping[key]

    def __setitem__(self, key, value):
        self._local_mapping.update({key: value})

    def __delitem__(self, key):
        del self._local_mapping[key]

    def __iter__(self):
        return iter({**self._global_mapping, **self._local_mapping})

    def __len__(self):
        return len(self._global_mapping.keys() | self._local_mapping.keys())


INTERFACE = Interface()


def test_mapping_contains_through_getitem():
    def fn(x):
        if "sdpa" in INTERFACE:
            return INTERFACE["sdpa"](x)
        return x

    backend = run_differential(fn, _x)
    assert backend.graph_count == 1


class LayerView(Sequence):
    """transformers' _PerLayerConfigView, reduced: an ABC-derived sequence made inside the forward."""

    def __init__(self, sizes):
        self._sizes = sizes

    def __len__(self):
        return len(self._sizes)

    def __getitem__(self, index):
        if index >= len(self):
            raise IndexError("layer index out of range")
        return self._sizes[index]


SIZES = [1, 2, 3]


def test_abc_sequence_made_and_iterated():
    def fn(x):
        view = LayerView(SIZES)
        total = x
        for size in view:
            total = total * size
        return total, len(view), list(view)

    backend = run_differential(fn, _x)
    SIZES.append(4)
    try:
        run_differential(fn, _x, backend=backend, compiled=framejit.compile(fn, backend=backend))
    finally:
        SIZES.pop()
    assert backend.graph_count == 2


# ---- environment variables and cached helpers ---------------------------------------------------------------
def test_environ_reads_are_guarded_per_key(monkeypatch):
    import os

    def fn(x):
        if os.environ.get("FRAMEJIT_TEST_FLAG", "0") == "1" or "FRAMEJIT_TEST_OTHER" in os.environ:
            return x + 1
        return x * (2 if os.getenv("FRAMEJIT_TEST_MISSING") is None else 3)

    monkeypatch.delenv("FRAMEJIT_TEST_FLAG", raising=False)
    monkeypatch.delenv("FRAMEJIT_TEST_OTHER", raising=False)
    monkeypatch.delenv("FRAMEJIT_TEST_MISSING", raising=False)
    backend = run_differential(fn, _x)
    compiled = framejit.compile(fn, backend=backend)
    monkeypatch.setenv("FRAMEJIT_TEST_FLAG", "1")
    run_differential(fn, _x, backend=backend, compiled=compiled)
    monkeypatch.setenv("FRAMEJIT_TEST_FLAG", "0")
    monkeypatch.setenv("FRAMEJIT_TEST_OTHER", "")
    run_differential(fn, _x, backend=backend, compiled=compiled)
    assert backend.graph_count == 3


@functools.lru_cache
def available() -> bool:
    return True


@functools.cache
def scales(n):
    return [float(i) for i in range(n)]


def test_lru_cache_functions():
    def fn(x):
        if available():
            x = x + 1
        return x * scales(3)[2]

    backend = run_differential(fn, _x)
    assert backend.graph_count == 1


def test_lru_cache_with_tensor_argument_breaks_and_matches():
    @functools.lru_cache
    def double(t):
        return t * 2

    def fn(x):
        return double(x) + 1

    backend = run_differential(fn, _x, fullgraph=False)
    assert backend.graph_count == 1


# ---- tensor identity -----------------------------------------------------------------------------------------
def test_tensor_identity_of_inputs_is_guarded():
    def fn(q, k):
        if q is k:
            return q * 2
        return q + k

    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend, fullgraph=True)
    q, k = torch.randn(3), torch.randn(3)
    torch.testing.assert_close(compiled(q, k), q + k)
    torch.testing.assert_close(compiled(q, q), q * 2)  # eager: q * 2; the DISTINCT guard recompiles
    torch.testing.assert_close(compiled(k, q), k + q)
    assert backend.graph_count == 2


def test_tensor_identity_of_intermediates_follows_eager():
    def fn(x):
        y = torch.nn.functional.dropout(x, p=0.5, training=False)  # returns x itself
        z = x.relu()
        return (y is x), (z is x), (z is not y), x.contiguous() is x

    backend = run_differential(fn, _x)
    assert backend.graph_count <= 1


def test_multihead_attention_self_and_cross():
    mha = torch.nn.MultiheadAttention(8, 2, batch_first=True).eval()

    def fn(q, k):
        return mha(q, k, k)[0] + mha(q, q, q)[0]

    backend = run_differential(fn, lambda s: (torch.randn(2, 3, 8), torch.randn(2, 3, 8)), atol=1e-5, rtol=1e-5)
    assert backend.graph_count == 1


# ---- objects crossing a graph break ------------------------------------------------------------------------
def test_code_and_signature_cross_a_graph_break():
    def helper(a, b):
        return a + b

    def fn(x):
        code = helper.__code__
        sig = inspect.signature(helper)
        y = x + 1
        print("break")
        return y * len(code.co_varnames) + len(sig.parameters), code.co_name

    backend = run_differential(fn, _x, fullgraph=False)
    assert backend.graph_count == 2
    assert framejit.stats()["eager_frame_reasons"] == [] or all(
        e["function"] != fn.__code__.co_qualname for e in framejit.stats()["eager_frame_reasons"])


def test_mapping_get_and_contains_with_missing_keys():
    def fn(x):
        relu = INTERFACE.get("sdpa", None)
        missing = INTERFACE.get("eager", torch.tanh)
        return missing(relu(x)), "eager" in INTERFACE, INTERFACE.get("flash") is None

    backend = run_differential(fn, _x)
    assert backend.graph_count == 1


# ---- copies of plain objects ---------------------------------------------------------------------------------
class Config:
    def __init__(self):
        self.decoder_layers = 2
        self.hidden = 4
        self.names = ["a", "b"]
        self.sub = SubConfig()


class SubConfig:
    def __init__(self):
        self.scale = 3.0


CONFIG = Config()


def test_deepcopy_and_copy_of_plain_config():
    import copy

    def fn(x):
        cfg = copy.deepcopy(CONFIG)
        for key in list(cfg.__dict__):
            if key.startswith("decoder_"):
                value = getattr(cfg, key)
                delattr(cfg, key)
                setattr(cfg, "num_" + key[len("decoder_"):], value)
        cfg.names.append("c")
        cfg.sub.scale = 5.0
        shallow = copy.copy(CONFIG)
        return x * cfg.num_layers * cfg.sub.scale + shallow.hidden, cfg.names, CONFIG.names, CONFIG.sub.scale, \
            hasattr(cfg, "decoder_layers"), cfg.__class__ is Config

    backend = run_differential(fn, _x)
    CONFIG.hidden = 6
    try:
        run_differential(fn, _x, backend=backend, compiled=framejit.compile(fn, backend=backend))
    finally:
        CONFIG.hidden = 4
    assert backend.graph_count == 2 and CONFIG.names == ["a", "b"] and CONFIG.sub.scale == 3.0


def test_torch_state_query_answers_are_guarded():
    def fn(x):
        threads = torch.get_num_threads()
        if torch.is_warn_always_enabled():
            x = x + 1
        return x * (2 if torch.get_autocast_dtype("cpu") is torch.bfloat16 else 3), threads

    backend = run_differential(fn, _x)
    compiled = framejit.compile(fn, backend=backend)
    threads = torch.get_num_threads()
    try:
        torch.set_warn_always(True)
        run_differential(fn, _x, backend=backend, compiled=compiled)
        torch.set_autocast_dtype("cpu", torch.float16)
        run_differential(fn, _x, backend=backend, compiled=compiled)
        torch.set_num_threads(max(1, threads - 1) if threads > 1 else 2)
        run_differential(fn, _x, backend=backend, compiled=compiled)
    finally:
        torch.set_warn_always(False)
        torch.set_autocast_dtype("cpu", torch.bfloat16)
        torch.set_num_threads(threads)
    assert backend.graph_count == 4


# ---- custom autograd functions without grad ---------------------------------------------------------------
class ScaledGelu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.nn.functional.gelu(x) * 2

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 3


def test_autograd_function_apply_under_no_grad():
    def fn(x):
        with torch.no_grad():
            y = ScaledGelu.apply(x) + 1
        return y

    backend = run_differential(fn, _x)
    assert backend.graph_count == 1


def test_autograd_function_apply_with_grad_is_captured_and_keeps_the_custom_backward():
    """NOTE [Custom autograd functions in the graph]: the apply is in the one graph (it was a break) and the
    gradient is ScaledGelu's own backward (3 * 2 everywhere), not gelu's derivative."""
    def fn(x):
        return ScaledGelu.apply(x * 2).sum()

    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend)
    for seed in (1, 2):
        x1 = torch.randn(3, requires_grad=True, generator=torch.Generator().manual_seed(seed))
        x2 = x1.detach().clone().requires_grad_(True)
        want, got = fn(x1), compiled(x2)
        torch.testing.assert_close(got, want)
        want.backward()
        got.backward()
        torch.testing.assert_close(x2.grad, x1.grad)
        torch.testing.assert_close(x2.grad, torch.full((3,), 6.0))
    assert backend.graph_count == 1
    explained = framejit.explain(fn)(torch.randn(3, requires_grad=True))
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), str(explained)


# ---- strict dataclass configs (huggingface_hub) ----------------------------------------------------------------
def _strict_config():
    from huggingface_hub.dataclasses import strict

    @strict
    @dataclasses.dataclass
    class StrictConfig:
        hidden: int = 4
        scale: float | None = None

    return StrictConfig()


STRICT = _strict_config()


def test_strict_dataclass_copy_validated_on_assignment():
    import copy

    def fn(x):
        cfg = copy.deepcopy(STRICT)
        cfg.hidden = STRICT.hidden * 2
        cfg.scale = 0.5
        return x * cfg.hidden * cfg.scale

    backend = run_differential(fn, _x)
    assert backend.graph_count == 1


def test_strict_dataclass_rejects_wrong_type_like_eager():
    import copy

    def fn(x):
        cfg = copy.deepcopy(STRICT)
        cfg.hidden = "wide"
        return x * 2

    run_differential(fn, _x, fullgraph=False)


# ---- mappingproxy (NOTE [Mappingproxies] in capture/mappings.py) ---------------------------------------------------
_PROXIED = {"a": 1.5, "b": 2, "c": -1}
_PROXY = types.MappingProxyType(_PROXIED)


def _read_proxy(x, arg):
    for key in ("a", "b"):  # a global mappingproxy read in a loop sent the frame to eager (0 graphs)
        x = x * _PROXY[key]
    for _, v in _PROXY.items():
        x = x + v
    if "c" in _PROXY and len(_PROXY) >= 3:
        x = x - _PROXY.get("c", 0) + _PROXY.get("missing", 4)
    x = x + sum(arg.values()) + len(dict(arg))
    return x, list(_PROXY), _PROXY | {"d": 5}, _PROXY.copy(), arg, _PROXY, _PROXY == _PROXIED


def _write_proxy(x):
    try:
        _PROXY["a"] = 3
    except TypeError:
        x = x + 1
    return x


def test_mappingproxy_global_read_in_a_loop(monkeypatch):
    monkeypatch.setitem(_PROXIED, "b", 2)
    backend = CountingBackend()
    compiled = framejit.compile(_read_proxy, backend=backend)
    writes = framejit.compile(_write_proxy, backend=CountingBackend())
    eager, graphs = framejit.stats()["eager_frames"], framejit.stats()["graphs"]
    arg = types.MappingProxyType(collections.OrderedDict(p=1, q=2))
    for step in range(4):
        x = torch.randn(3)
        got, want = compiled(x, arg), _read_proxy(x, arg)
        torch.testing.assert_close(got[0], want[0])
        assert got[1:4] == want[1:4] and got[6] == want[6] and type(got[3]) is dict
        assert got[4] is arg and got[5] is _PROXY  # the proxies themselves, not copies
        torch.testing.assert_close(writes(x), _write_proxy(x))
        if step == 1:
            monkeypatch.setitem(_PROXIED, "b", 3)  # a change made through the proxied dict fails a guard
        if step == 2:
            monkeypatch.setitem(_PROXIED, "z", 0.5)
            arg = types.MappingProxyType({"p": 3})
    assert framejit.stats()["eager_frames"] == eager
    assert backend.graph_count == 3 and framejit.stats()["graphs"] - graphs >= 3
    assert _PROXIED == {"a": 1.5, "b": 3, "c": -1, "z": 0.5}  # nothing written through the proxy


# ---- torch.set_default_device (NOTE [Default device mode] in capture/default_device.py) -------------------------
def _factories(x):
    a = torch.zeros(x.shape[0], 2)
    b = torch.arange(2, dtype=torch.float32, device=None)
    c = torch.tensor([1.0, 2.0])
    return (a + b + c) * x.shape[1], torch.get_default_device(), torch.empty(2).device


def _at_default_device(device, fn, *args):
    torch.set_default_device(device)
    try:
        return fn(*args)
    finally:
        torch.set_default_device(None)


def test_default_device_mode_is_traced_through():
    """Frames called under torch.set_default_device(d) ran eagerly (1 eager frame per call site); now their
    factories get `device=d` in the graph, guarded on the mode, and the result matches eager's."""
    backend = CountingBackend()
    compiled = framejit.compile(_factories, backend=backend)
    eager = framejit.stats()["eager_frames"]
    for device in ("cpu", None, "meta", "cpu", "meta", None):
        x = torch.randn(3, len(device or "") + 1)
        got = _at_default_device(device, compiled, x)
        want = _at_default_device(device, _factories, x)
        assert got[1:] == want[1:] and got[0].device == want[0].device and got[0].shape == want[0].shape
        if want[0].device.type == "cpu":
            torch.testing.assert_close(got[0], want[0])
    assert framejit.stats()["eager_frames"] == eager
    assert backend.graph_count == 3  # one entry per mode state, each reused when it comes back
    factories = (torch.zeros, torch.arange, torch.tensor)
    devices = [{str(n.kwargs.get("device")) for n in gm.graph.nodes if n.target in factories} for gm in backend.graphs]
    assert devices == [{"cpu"}, {"None"}, {"meta"}]  # the device each mode gives, written into its graph
    with torch.device("meta"):  # the context-manager form is the same mode
        got, want = compiled(torch.randn(3, 2)), _factories(torch.randn(3, 2))
    assert got[0].device == want[0].device and got[1:] == want[1:]


class _SinIsCos(torch.overrides.TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return (torch.cos if func is torch.sin else func)(*args, **(kwargs or {}))


def test_default_device_under_another_mode_still_runs_eagerly():
    compiled = framejit.compile(lambda x: torch.sin(x) + torch.ones(3), backend=CountingBackend())
    eager = framejit.stats()["eager_frames"]
    x = torch.randn(3)
    torch.set_default_device("cpu")
    try:
        with _SinIsCos():
            got = compiled(x)
    finally:
        torch.set_default_device(None)
    torch.testing.assert_close(got, torch.cos(x) + 1)
    assert framejit.stats()["eager_frames"] == eager + 1


# ---- checks that raise on tensor data (NOTE [Speculated checks]) -------------------------------------------
def _log_likelihood(h, y, scale):
    import torch.distributions as D
    d = D.Normal(h, scale, validate_args=True)
    c = D.Categorical(logits=h, validate_args=True)
    ind = D.Independent(D.Normal(h, torch.ones_like(h), validate_args=True), 1)
    td = D.TransformedDistribution(D.Normal(h, 1.0), [D.transforms.TanhTransform(cache_size=1)], validate_args=True)
    return d.log_prob(y).sum() + c.log_prob(torch.tensor([0, 1, 2])).sum() + ind.log_prob(y).sum() \
        + td.log_prob(y.tanh() * 0.5).sum() + c.entropy().sum(), d.mean


def _outcome(fn, *args):
    try:
        return fn(*args)
    except ValueError as e:
        return str(e)


def test_distribution_validation_is_one_graph(monkeypatch):
    """Argument and support validation (on by default in eager) broke at every check: 11 graphs for a
    Normal + Categorical + Independent log-likelihood (stock torch.compile, which turns validation off: 3);
    now the checks are speculated in one graph, and a failing one reruns the call eagerly, which raises the
    same ValueError."""
    monkeypatch.setattr(torch.distributions.Distribution, "_validate_args", True)
    backend = CountingBackend()
    compiled = framejit.compile(_log_likelihood, backend=backend)
    eager, graphs = framejit.stats()["eager_frames"], framejit.stats()["graphs"]
    for seed, scale, y in ((0, 1.0, 0.5), (1, 2.0, -0.3), (2, -1.0, 0.5), (3, 1.0, float("nan")), (4, 0.5, 0.1)):
        g = torch.Generator().manual_seed(seed)
        h, ys, scales = torch.randn(3, 4, generator=g), torch.full((3, 4), y), torch.full((3, 4), scale)
        want, got = _outcome(_log_likelihood, h, ys, scales), _outcome(compiled, h, ys, scales)
        if isinstance(want, str):
            assert got == want and "Expected" in want  # the eager rerun raised it, with its message
        else:
            torch.testing.assert_close(got, want)
    assert backend.graph_count == 1 and framejit.stats()["graphs"] - graphs == 1
    assert framejit.stats()["eager_frames"] == eager
    gm = backend.graphs[0]
    assert len(gm.graph.find_nodes(op="call_function", target=torch._assert_async)) >= 5


def _checked_then_random(x, w):
    if (x < 0).any():
        raise ValueError("negative input")
    y = x * 2
    w.add_(1)  # an input written after a speculated check: a break before it (a rerun must be exact)
    return y + torch.rand(3) + w


def test_speculated_check_before_random_ops_and_input_writes():
    backend = CountingBackend()
    compiled = framejit.compile(_checked_then_random, backend=backend)
    for seed, sign in ((0, 1), (1, -1), (2, 1)):
        x = torch.rand(3, generator=torch.Generator().manual_seed(seed)) * sign
        w_eager, w_compiled = torch.zeros(3), torch.zeros(3)
        torch.manual_seed(seed)
        want = _outcome(_checked_then_random, x, w_eager)
        torch.manual_seed(seed)
        got = _outcome(compiled, x, w_compiled)
        after = torch.rand(1)
        torch.manual_seed(seed)
        _outcome(_checked_then_random, x, torch.zeros(3))
        assert torch.equal(after, torch.rand(1))  # the same random numbers drawn as eagerly
        assert torch.equal(w_compiled, w_eager)
        if isinstance(want, str):
            assert got == want
        else:
            torch.testing.assert_close(got, want)
    assert any(gm.graph.find_nodes(op="call_function", target=torch._assert_async) for gm in backend.graphs)


def _checked_then_dropout(x, training):
    if not torch._is_all_true(x > -10):
        raise ValueError("out of range")
    return torch.nn.functional.dropout(x * 2, 0.5, training) + 1


def test_speculated_check_then_eval_dropout_is_one_graph():
    """A dropout given training=False draws nothing: no break after a speculated check (wav2vec2's CTC
    head was 5 graphs > stock's 4 for it); in training it is one."""
    backend = CountingBackend()
    compiled = framejit.compile(_checked_then_dropout, backend=backend)
    for seed in (0, 1):
        x = torch.randn(4, generator=torch.Generator().manual_seed(seed))
        torch.testing.assert_close(compiled(x, False), _checked_then_dropout(x, False))
        assert _outcome(compiled, x - 20, False) == "out of range"
    assert backend.graph_count == 1
    torch.manual_seed(0)
    got = compiled(torch.ones(4), True)
    torch.manual_seed(0)
    torch.testing.assert_close(got, _checked_then_dropout(torch.ones(4), True))
    assert backend.graph_count == 3  # training: the check's graph, a break, the dropout's graph
