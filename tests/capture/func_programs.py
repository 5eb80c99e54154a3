"""Programs using the torch.func transforms, shared by tests/capture/test_func_transforms.py and the
measurement in benchmarks/func_transforms.py (graphs and breaks, framejit vs stock torch.compile).

Each entry of PROGRAMS is (fn, make_args): make_args(seed) gives fresh inputs whose values (and, for
most, sizes) change with the seed.
"""
from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch.func import functional_call, grad, grad_and_value, hessian, jacfwd, jacrev, jvp, stack_module_state, vjp, vmap

W = torch.randn(3)


def grad_of_sum(x):
    return grad(lambda a: a.sin().sum())(x) + 1


def grad_argnums_aux(x, y):
    def loss(a, b):
        z = (a * b).cos()
        return z.sum(), z * 2
    (ga, gb), aux = grad(loss, argnums=(0, 1), has_aux=True)(x, y)
    return ga - gb, aux


def grad_closure(x):
    w = W * 2
    return grad(lambda a: (a * w).tanh().sum())(x) * 3


def grad_and_value_of(x, y):
    g, v = grad_and_value(lambda a, b: (a.exp() * b).sum(), argnums=1)(x, y)
    return g + v


def jacrev_of(x):
    return jacrev(lambda a: a.sin() * W)(x).sum(0)


def jacfwd_of(x):
    return jacfwd(lambda a: a.sin() * W)(x) + 1


def hessian_of(x):
    return hessian(lambda a: a.pow(3).sum())(x)


def vjp_of(x, v):
    out, vjp_fn = vjp(lambda a: a.sin() * 2, x)
    (g,) = vjp_fn(v)
    return out + g


def jvp_of(x, t):
    out, tangent = jvp(lambda a: a.sin() * 2, (x,), (t,))
    return out * tangent


def vmap_of_grad(x):
    return vmap(grad(lambda a: (a * a).sum()))(x)


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(3, 4)
        self.fc2 = torch.nn.Linear(4, 2)

    def forward(self, x):
        return self.fc2(self.fc1(x).relu())


NET = Net()


def functional_call_of(x):
    params = {k: v * 2 for k, v in NET.named_parameters()}
    return functional_call(NET, params, (x,))


def per_sample_grads(x, t):
    # the per-sample-gradients tutorial
    params = {k: v.detach() for k, v in NET.named_parameters()}

    def loss(p, sample, target):
        out = functional_call(NET, p, (sample.unsqueeze(0),))
        return F.cross_entropy(out, target.unsqueeze(0))
    return vmap(grad(loss), in_dims=(None, 0, 0))(params, x, t)


def jacrev_of_module(x):
    params = dict(NET.named_parameters())
    return jacrev(lambda p, a: functional_call(NET, p, (a,)))(params, x)


NETS = [Net() for _ in range(3)]
ENSEMBLE_PARAMS, ENSEMBLE_BUFFERS = stack_module_state(NETS)
BASE = copy.deepcopy(NETS[0]).to("meta")


def ensemble(x):
    # the model-ensembling tutorial
    def one(params, buffers, a):
        return functional_call(BASE, (params, buffers), (a,))
    return vmap(one, in_dims=(0, 0, None))(ENSEMBLE_PARAMS, ENSEMBLE_BUFFERS, x)


def _rows(s):
    return 4 + s


PROGRAMS = [
    (grad_of_sum, lambda s: (torch.randn(_rows(s), 3),)),
    (grad_argnums_aux, lambda s: (torch.randn(_rows(s)), torch.randn(_rows(s)))),
    (grad_closure, lambda s: (torch.randn(_rows(s), 3),)),
    (grad_and_value_of, lambda s: (torch.randn(_rows(s)), torch.randn(_rows(s)))),
    (jacrev_of, lambda s: (torch.randn(3),)),
    (jacfwd_of, lambda s: (torch.randn(3),)),
    (hessian_of, lambda s: (torch.randn(_rows(s)),)),
    (vjp_of, lambda s: (torch.randn(_rows(s)), torch.randn(_rows(s)))),
    (jvp_of, lambda s: (torch.randn(_rows(s)), torch.randn(_rows(s)))),
    (vmap_of_grad, lambda s: (torch.randn(_rows(s), 3),)),
    (functional_call_of, lambda s: (torch.randn(_rows(s), 3),)),
    (per_sample_grads, lambda s: (torch.randn(_rows(s), 3), torch.randint(0, 2, (_rows(s),)))),
    (jacrev_of_module, lambda s: (torch.randn(_rows(s), 3),)),
    (ensemble, lambda s: (torch.randn(_rows(s), 3),)),
]
