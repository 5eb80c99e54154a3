"""NOTE [Stats rows handed out, not copied] (capture/requests.py): `framejit.stats()["frames"]` gives the rows
themselves, read-only, so reading stats() costs no copy of every row compiled since the process started."""
import copy
import json
import pickle

import pytest
import torch

import framejit


def _compiled_rows(n):
    for k in range(n):
        framejit.compile(lambda x, k=k: x + k, backend="eager")(torch.ones(2))
    return framejit.stats()["frames"]


def test_rows_are_shared_between_calls_and_read_only():
    rows = _compiled_rows(3)
    again = framejit.stats()["frames"]
    assert rows is not again and len(rows) == len(again)
    assert all(a is b for a, b in zip(rows, again))  # the same rows: nothing copied per call
    row = rows[-1]
    assert row["graphs"] == 1 and row["cache"] == "miss" and row["backend"] == "eager"
    for change in (lambda: row.__setitem__("graphs", 9), lambda: row.update(graphs=9), lambda: row.pop("graphs"),
                   lambda: row.clear(), lambda: row.setdefault("new", 1), lambda: row.__delitem__("cache")):
        with pytest.raises(TypeError, match="read-only"):
            change()
    assert framejit.stats()["frames"][-1]["graphs"] == 1
    rows.append("mine")  # the list is the caller's own
    assert len(framejit.stats()["frames"]) == len(rows) - 1


def test_copies_of_a_row_are_plain_dicts():
    row = _compiled_rows(1)[-1]
    for made in (dict(row), copy.copy(row), copy.deepcopy(row), pickle.loads(pickle.dumps(row))):
        assert type(made) is dict and made == row
        made["graphs"] = 5  # a copy can change
    assert json.loads(json.dumps(row)) == dict(row)
    assert row["graphs"] == 1


def test_reset_forgets_entries_of_compiled_functions_and_leaves_the_rows():
    cf = framejit.compile(lambda x: x * 2, backend="eager")
    idle = framejit.compile(lambda x: x * 3, backend="eager")  # never called: a clean hook, left alone by reset
    traced = framejit.stats()["frames_traced"]
    assert torch.equal(cf(torch.ones(2)), torch.ones(2) * 2)
    assert torch.equal(cf(torch.ones(2)), torch.ones(2) * 2)
    assert framejit.stats()["frames_traced"] == traced + 1  # the second call hit
    rows = len(framejit.stats()["frames"])
    framejit.reset()
    assert torch.equal(cf(torch.ones(3)), torch.ones(3) * 2)
    assert framejit.stats()["frames_traced"] == traced + 2  # traced again after reset
    assert len(framejit.stats()["frames"]) == rows + 1
    assert torch.equal(idle(torch.ones(2)), torch.ones(2) * 3)
