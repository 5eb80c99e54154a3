"""Test setup for tests/backends.

Triton kernels run on CPU tensors through Triton's interpreter here (no GPU in CI): TRITON_INTERPRET
must be set before any kernel module is imported, which is why it is set at conftest import time.
The offline sm_90 compile test (test_triton_sm90.py) compiles every kernel the other triton tests
generated, so it is moved to the end of the run.
"""
import collections
import os

os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # silences a triton 3.9 deprecation warning

import pytest  # noqa: E402


def pytest_collection_modifyitems(session, config, items):
    last = [item for item in items if "test_triton_sm90" in item.nodeid]
    items[:] = [item for item in items if item not in last] + last


@pytest.fixture
def triton_modules(monkeypatch):
    """Counts the generated modules the triton backend loads (static, per shape, size-generic)."""
    from framejit.backends import triton as triton_backend
    from framejit.backends.triton import dynamic

    loaded = collections.Counter()
    for module in (triton_backend, dynamic):
        def counting(source, _load=module.load_module, _name=module.__name__):
            loaded[_name] += 1
            return _load(source)
        monkeypatch.setattr(module, "load_module", counting)
    return loaded


@pytest.fixture
def sessions(monkeypatch):
    """Counts ORT sessions made, each as the sorted names of its frozen weights."""
    from framejit.backends.onnxrt import runtime
    made = []
    original = runtime.make_session

    def counting(data, opts, device, sub=None, frozen=None, frozen_model=None):
        made.append(sorted(frozen or ()))
        return original(data, opts, device, sub, frozen, frozen_model)

    monkeypatch.setattr(runtime, "make_session", counting)
    return made


@pytest.fixture
def optimized(monkeypatch, tmp_path):
    """(test_onnxrt_attention_projections, test_onnxrt_eval_batch_norm) A function giving the op types of the optimized models of the sessions made since its last call."""
    import onnx

    from framejit.backends.onnxrt import runtime
    paths = []
    original = runtime.session_options

    def saving(opts):
        so = original(opts)
        so.optimized_model_filepath = str(tmp_path / f"session{len(paths)}.onnx")
        paths.append(so.optimized_model_filepath)
        return so

    monkeypatch.setattr(runtime, "session_options", saving)

    def counts():
        ops = collections.Counter(n.op_type for p in paths if os.path.exists(p)
                                  for n in onnx.load(p, load_external_data=False).graph.node)
        paths.clear()
        return ops
    return counts

