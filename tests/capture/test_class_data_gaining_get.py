"""A class attribute that is an object of a user class with no `__get__` (a `__set__`-only descriptor, a
plain config object) reads as itself; a `__get__` added to its type between calls is then called, on an
instance read and a class read, as in eager (NOTE [A descriptor's kind is guarded])."""
import torch

import framejit


class SetOnly:
    def __set__(self, obj, v):
        obj.__dict__["w"] = v


class Config:
    scale = 2


class B:
    w = SetOnly()
    cfg = Config()


def _read(x, o):
    r, c = o.w, type(o).cfg
    return (x + r) if isinstance(r, int) else x, type(r).__name__, c if isinstance(c, int) else type(c).__name__


def test_get_added_to_the_type_of_class_data_between_calls():
    compiled = framejit.compile(_read, backend="eager")
    for step in range(4):
        if step == 2:
            SetOnly.__get__ = lambda self, obj, typ=None: 3
            Config.__get__ = lambda self, obj, typ=None: 7
        x = torch.randn(2)
        got, want = compiled(x, B()), _read(x, B())
        assert torch.equal(got[0], want[0]) and got[1:] == want[1:]
        assert got[1:] == (("int", 7) if step >= 2 else ("SetOnly", "Config"))
    del SetOnly.__get__, Config.__get__
    x = torch.randn(2)
    assert compiled(x, B())[1:] == _read(x, B())[1:] == ("SetOnly", "Config")
