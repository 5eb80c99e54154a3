"""NOTE [Hook ids as other keys] (capture/hook_handles.py): an int dict key looked up in a frame that registers and
removes a module hook, which is none of the hook ids the trace took, no longer pins RemovableHandle.next_id (a
retrace on every call); a later call whose hook id is that key still gets eager's answer."""
import torch
from torch.utils.hooks import RemovableHandle

import framejit


def _hook(module, args, output):
    return output + 1


def _traced():
    return framejit.stats()["frames_traced"]


def test_an_unrelated_int_key_does_not_retrace_every_call():
    lin = torch.nn.Linear(3, 3)
    table = {10 ** 6: 5.0, 7: 2.0}

    def f(x):
        h = lin.register_forward_hook(_hook)
        y = lin(x)
        h.remove()
        return y * table.get(10 ** 6, 1.0) + table.get(10 ** 6 + 1, 0.5)

    cf = framejit.compile(f, backend="eager")
    start = _traced()
    for n in (2, 2, 3, 2, 4):
        x = torch.randn(n, 3)
        torch.testing.assert_close(cf(x), f(x), rtol=0, atol=0)
    assert _traced() - start == 2, _traced() - start  # static, then dynamic at the 2nd size (5 before)
    assert not lin._forward_hooks


def test_a_key_that_a_later_call_hands_out_as_a_hook_id_answers_as_eager():
    lin = torch.nn.Linear(3, 3)
    box = {}

    def f(x):
        h = lin.register_forward_hook(_hook)
        present = box["key"] in lin._forward_hooks  # True on the call whose handle gets that id
        y = lin(x)
        h.remove()
        return y * (2.0 if present else 1.0)

    def run(fn):
        box["key"] = RemovableHandle.next_id + 2  # the id the 3rd call's handle gets
        out = [fn(torch.ones(2, 3)) for _ in range(4)]
        return out, [bool(o[0, 0] != out[0][0, 0]) for o in out]

    expected, eager_flags = run(f)
    assert eager_flags == [False, False, True, False]  # the program does what the test means
    got, _ = run(framejit.compile(f, backend="eager"))
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
