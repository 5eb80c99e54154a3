"""Warm starts for entries that were kept in memory only (issue 16; tools/warm_gaps.py finds them):

- a graph holding a custom autograd Function applied with grad on (NOTE [Persisted custom Function calls]
  in capture/function_regions.py): a cold process trains two steps, a warm one (the same cache folder)
  traces no frame, AOT-traces no joint and builds no ORT program, on eager, onnxrt and triton (whose
  training graphs are persisted too: NOTE [Persisted training graphs] in backends/triton/persist.py), with
  outputs and gradients equal to eager's in both;
- the same, with the user's backward changed (its body, or a global it reads): the warm process does not
  load the stale frame entry or the stale joint (whose backward half holds the old backward), it traces
  again and its gradients are the new backward's, as eager's;
- a graph whose float input is passed as a tensor (NOTE [Persisted float inputs] in
  backends/float_inputs.py): an SGD step whose learning rate changes every call, on onnxrt;
- a frame whose trace runs functions it makes (a generator expression, a comprehension, a lambda) while
  some function is marked allow_in_graph (NOTE [Functions made while tracing are never marked]).

Each program runs in a forked child of a program server (tests.helpers.run_program) on a copy of framejit
(its source digest is in every key: another session's edit of the tree between the cold and the warm
process would make every entry a miss).
"""
from __future__ import annotations

import textwrap

import pytest

from tests.cache.warm_programs import copy_framejit, run_warm

FUNCTION_PROGRAM = textwrap.dedent('''
    import copy, json, sys
    import torch
    import framejit
    from framejit.backends import joint

    SCALE = float(sys.argv[2])

    class Scaled(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, k):
            ctx.save_for_backward(x)
            ctx.k = k
            return x.sin() * k

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return BACKWARD, None

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(5, 4)

        def forward(self, x):
            return Scaled.apply(self.fc(x), 2.0).sum(-1)

    torch.manual_seed(0)
    model = Net()
    ref = copy.deepcopy(model)
    compiled = framejit.compile(model, backend=sys.argv[1])
    equal = []
    for step in range(2):
        x = torch.randn(3, 5, generator=torch.Generator().manual_seed(step))
        out, want = compiled(x), ref(x)
        out.square().sum().backward()
        want.square().sum().backward()
        equal.append(torch.allclose(out, want, atol=1e-6) and all(
            torch.allclose(a.grad, b.grad, atol=1e-5) for a, b in zip(model.parameters(), ref.parameters())))
    stats = framejit.stats()
    print(json.dumps({"equal": equal, "traced": stats["frames_traced"], "loaded": stats["frames_loaded"],
                      "compiles": stats["backend_compiles"], "joints_traced": joint.STATS["traced"],
                      "joints_loaded": joint.STATS["loaded"], "half_programs_built": joint.STATS["half_programs_built"]}))
''')

FLOAT_PROGRAM = textwrap.dedent('''
    import json, sys
    import torch
    import framejit

    def sgd(params, grads, lr):
        torch._foreach_add_(params, grads, alpha=-lr)

    compiled = framejit.compile(sgd, backend=sys.argv[1])
    gen = torch.Generator().manual_seed(0)
    params = [torch.randn(4, 3, generator=gen), torch.randn(5, generator=gen)]
    ref = [p.clone() for p in params]
    equal = []
    for lr in (0.1, 0.05, 0.025, 0.3):
        grads = [torch.randn(p.shape, generator=gen) for p in params]
        compiled(params, grads, lr)
        sgd(ref, grads, lr)
        equal.append(all(torch.allclose(a, b, rtol=1e-6, atol=1e-7) for a, b in zip(params, ref)))
    stats = framejit.stats()
    print(json.dumps({"equal": equal, "traced": stats["frames_traced"], "loaded": stats["frames_loaded"],
                      "compiles": stats["backend_compiles"]}))
''')

MARKED_PROGRAM = textwrap.dedent('''
    import json, sys
    import torch
    import framejit

    def unrelated(x):
        return x

    torch.compiler.allow_in_graph(unrelated)  # some function is marked (importing transformers marks several)

    def f(xs, k):
        total = sum(x * k for x in xs)
        return total + torch.stack([x.sin() for x in xs]).sum(0) + (lambda t: t.cos())(xs[0])

    compiled = framejit.compile(f, backend=sys.argv[1])
    equal = []
    for k in (2, 3):
        xs = [torch.randn(3, generator=torch.Generator().manual_seed(i + k)) for i in range(3)]
        equal.append(torch.allclose(compiled(xs, k), f(xs, k)))
    stats = framejit.stats()
    print(json.dumps({"equal": equal, "traced": stats["frames_traced"], "loaded": stats["frames_loaded"],
                      "compiles": stats["backend_compiles"]}))
''')

OLD_BACKWARD = "g * x.cos() * ctx.k * SCALE"
NEW_BACKWARD = "g * x.cos() * (ctx.k + SCALE)"


@pytest.fixture(scope="module")
def install(tmp_path_factory):
    """A copy of framejit shared by the module's tests (one program server for all of them)."""
    return copy_framejit(tmp_path_factory.mktemp("install"))


_run = run_warm


@pytest.mark.parametrize("backend", ["eager", "onnxrt", "triton"])
def test_custom_function_training_starts_warm(tmp_path, install, backend):
    program = FUNCTION_PROGRAM.replace("BACKWARD", OLD_BACKWARD)
    cold = _run(tmp_path, install, program, "3", backend=backend)
    warm = _run(tmp_path, install, program, "3", backend=backend)
    assert all(cold["equal"]) and all(warm["equal"]), (cold, warm)
    assert cold["traced"] == 1 and cold["compiles"] == 1, cold
    assert (warm["traced"], warm["loaded"], warm["compiles"]) == (0, 1, 0), warm
    if backend != "eager":  # the joint's halves were loaded, not traced or built
        assert (cold["joints_traced"], warm["joints_traced"], warm["joints_loaded"]) == (1, 0, 1), (cold, warm)
        assert warm["half_programs_built"] == 0, warm


def test_a_changed_backward_is_not_loaded_from_the_stale_entries(tmp_path, install):
    old = FUNCTION_PROGRAM.replace("BACKWARD", OLD_BACKWARD)
    cold = _run(tmp_path, install, old, "3", backend="onnxrt")
    warm = _run(tmp_path, install, old, "3", backend="onnxrt")
    assert (warm["traced"], warm["joints_traced"], warm["joints_loaded"]) == (0, 0, 1), warm  # entries persisted
    # the backward's body changed: the frame entry (its callee hash) and the joint (its key) are stale
    changed_body = _run(tmp_path, install, FUNCTION_PROGRAM.replace("BACKWARD", NEW_BACKWARD), "3", backend="onnxrt")
    # a global the backward reads changed: the frame entry's probe guard fails, the joint's key differs
    changed_fact = _run(tmp_path, install, old, "5", backend="onnxrt")
    for run in (cold, warm, changed_body, changed_fact):
        assert all(run["equal"]), (cold, warm, changed_body, changed_fact)
    for run in (changed_body, changed_fact):
        assert run["traced"] == 1 and run["joints_traced"] == 1 and run["joints_loaded"] == 0, run


@pytest.mark.parametrize("backend", ["onnxrt"])
def test_float_inputs_as_tensors_start_warm(tmp_path, install, backend):
    cold = _run(tmp_path, install, FLOAT_PROGRAM, backend=backend)
    warm = _run(tmp_path, install, FLOAT_PROGRAM, backend=backend)
    assert all(cold["equal"]) and all(warm["equal"]), (cold, warm)
    assert cold["traced"] == 2, cold  # the first lr is a constant; the second a float input
    assert (warm["traced"], warm["loaded"], warm["compiles"]) == (0, 2, 0), warm


def test_functions_made_while_tracing_keep_the_entry_persisted_while_some_are_marked(tmp_path, install):
    """NOTE [Functions made while tracing are never marked] (allowed_calls.py): a generator expression, a
    comprehension and a lambda the frame makes are inlined with no guard on the set of marked ids."""
    cold = _run(tmp_path, install, MARKED_PROGRAM, backend="eager")
    warm = _run(tmp_path, install, MARKED_PROGRAM, backend="eager")
    assert all(cold["equal"]) and all(warm["equal"]), (cold, warm)
    assert cold["traced"] == 2, cold  # k=2, then k=3
    assert (warm["traced"], warm["loaded"], warm["compiles"]) == (0, 2, 0), warm
