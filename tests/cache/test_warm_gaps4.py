"""Warm starts for compiled optimizer steps that keep per-parameter state (issues 16 and 14; NOTE [Keys by their
source] in capture/sources.py): Adam and SGD with momentum read `self.state[p]`, a dict keyed by Parameters.
Its entries were read through the key object itself (a guard constant, LOAD_CONST in the transformed code),
which no locator finds in another process, so such entries were kept in memory only and every warm process
traced them again. They are now read through the key's own source (`group['params'][i]`).

The warm programs run in forked children of a program server (tests.helpers.run_program) on a copy of
framejit; the in-process tests check that the guards still follow the state and the parameter list.
"""
from __future__ import annotations

import collections
import copy
import textwrap

import pytest
import torch

import framejit
from tests.cache.warm_programs import copy_framejit, run_warm

OPTIMIZER_PROGRAM = textwrap.dedent('''
    import copy, json, sys
    import torch
    import framejit

    def make(opt_name, params):
        if opt_name == "adam":
            return torch.optim.Adam(params, lr=0.1)
        return torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=0.01)

    torch.manual_seed(0)
    m = torch.nn.Linear(4, 3)
    ref = copy.deepcopy(m)
    opt, ref_opt = make(sys.argv[2], m.parameters()), make(sys.argv[2], ref.parameters())
    sch = torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5)
    ref_sch = torch.optim.lr_scheduler.StepLR(ref_opt, 1, gamma=0.5)
    step = framejit.compile(opt.step, backend=sys.argv[1])
    for s in range(3):
        for model in (m, ref):
            x = torch.randn(2, 4, generator=torch.Generator().manual_seed(s))
            model(x).square().sum().backward()
        step()
        ref_opt.step()
        opt.zero_grad()
        ref_opt.zero_grad()
        sch.step()
        ref_sch.step()
    stats = framejit.stats()
    equal = all(torch.allclose(a, b, atol=1e-5) for a, b in zip(m.parameters(), ref.parameters()))
    print(json.dumps({"equal": equal, "traced": stats["frames_traced"], "loaded": stats["frames_loaded"],
                      "eager_frames": stats["eager_frames"]}))
''')


@pytest.fixture(scope="module")
def install(tmp_path_factory):
    """A copy of framejit shared by the module's tests (one program server for all of them)."""
    return copy_framejit(tmp_path_factory.mktemp("install"))


@pytest.mark.parametrize("opt_name", ["adam", "sgd_momentum"])
def test_an_optimizer_step_with_per_parameter_state_starts_warm(tmp_path, install, opt_name):
    cold = run_warm(tmp_path, install, OPTIMIZER_PROGRAM, opt_name, backend="eager")
    warm = run_warm(tmp_path, install, OPTIMIZER_PROGRAM, opt_name, backend="eager")
    assert cold["equal"] and warm["equal"], (cold, warm)
    assert cold["traced"] > 0 and cold["eager_frames"] == 0, cold
    assert (warm["traced"], warm["eager_frames"]) == (0, 0) and warm["loaded"] > 0, warm


def _two_layers():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))


def _backward(model, s):
    x = torch.randn(2, 4, generator=torch.Generator().manual_seed(s))
    model(x).square().sum().backward()


def _same(a, b):
    return all(torch.allclose(p, q, atol=1e-5) for p, q in zip(a.parameters(), b.parameters()))


def _swap_states(opt, model):
    """The state entries of the two weights exchanged (same shapes), the keys in the same order."""
    p0, p2 = opt.param_groups[0]["params"][0], opt.param_groups[0]["params"][2]
    opt.state[p0], opt.state[p2] = opt.state[p2], opt.state[p0]


def _step_tensor_replaced(opt, model):
    for state in opt.state.values():
        state["step"] = torch.tensor(7.0)


def _new_parameters(opt, model):
    """Every parameter replaced by a new Parameter (other values), the state moved to the new keys."""
    new = [torch.nn.Parameter(p.detach() * 0.5 + 0.1) for p in opt.param_groups[0]["params"]]
    opt.state = collections.defaultdict(dict, {q: opt.state[p] for p, q in zip(opt.param_groups[0]["params"], new)})
    opt.param_groups[0]["params"] = new
    model.params_now = new


def _new_parameters_fresh_state(opt, model):
    """New parameters whose state is empty (the old entries stay, keyed by the old parameters)."""
    new = [torch.nn.Parameter(p.detach() * 0.5 + 0.1) for p in opt.param_groups[0]["params"]]
    opt.param_groups[0]["params"] = new
    model.params_now = new


@pytest.mark.parametrize("change", [_swap_states, _step_tensor_replaced, _new_parameters, _new_parameters_fresh_state],
                         ids=["states_swapped", "step_replaced", "new_parameters", "new_parameters_fresh_state"])
def test_the_guards_follow_the_state_and_the_parameters(change):
    framejit.reset()
    model = _two_layers()
    ref = copy.deepcopy(model)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    ref_opt = torch.optim.Adam(ref.parameters(), lr=0.1)
    step = framejit.compile(opt.step, backend="eager")
    for s in range(5):
        if s == 3:
            change(opt, model)
            change(ref_opt, ref)
        for m, o in ((model, opt), (ref, ref_opt)):
            params = getattr(m, "params_now", None)
            if params is None:
                _backward(m, s)
            else:  # the new parameters get gradients of their own
                for p in params:
                    p.grad = torch.full_like(p, 0.1 * (s + 1))
        step()
        ref_opt.step()
        opt.zero_grad()
        ref_opt.zero_grad()
        got, want = opt.param_groups[0]["params"], ref_opt.param_groups[0]["params"]
        assert all(torch.allclose(p, q, atol=1e-5) for p, q in zip(got, want)), (change.__name__, s)
        assert _same(model, ref), (change.__name__, s)
    assert [float(st["step"]) for st in opt.state.values()] == [float(st["step"]) for st in ref_opt.state.values()]
