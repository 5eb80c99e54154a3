"""A step run at a graph break reports the user's line, as in eager (NOTE [The break's line] and
NOTE [Caller frames at breaks in blocks]): warnings' locations and logging records' file and line.
(A user function called at a break runs through its frame hook, so `sys._getframe(1)` in it sees
framejit's hook: a known difference of a pure-Python frame hook.)"""
from __future__ import annotations

import io
import logging
import warnings

import torch

import framejit
from tests.helpers import CountingBackend


def _warns_and_logs(x):
    y = x * 2
    warnings.warn("careful")
    logging.getLogger("framejit_test_user").warning("record %s", 1)
    logging.warning("root record")
    return y + 1


def _warns_and_logs_in_no_grad(x):
    with torch.no_grad():
        y = x * 2
        warnings.warn("careful", UserWarning, 1)
        logging.getLogger("framejit_test_user").warning("record", stacklevel=1)
        return y + 1


def _where_called(fn, x):
    """(warnings' (file, line), logging records' 'file:line') of one call of fn."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(pathname)s:%(lineno)d %(funcName)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = fn(x)
    finally:
        root.removeHandler(handler)
    return out, [(w.filename, w.lineno) for w in caught], stream.getvalue().splitlines()


def test_warnings_and_logging_at_breaks_name_the_user_line():
    for fn in (_warns_and_logs, _warns_and_logs_in_no_grad):
        backend = CountingBackend()
        compiled = framejit.compile(fn, backend=backend)
        for size in (3, 5):
            x = torch.randn(size)
            want, want_warnings, want_records = _where_called(fn, x)
            got, got_warnings, got_records = _where_called(compiled, x)
            assert torch.equal(got, want)
            assert got_warnings == want_warnings and want_warnings[0][0] == __file__, fn.__name__
            assert got_records == want_records and want_records, fn.__name__
        assert backend.graph_count >= 2, fn.__name__  # the function did break there and was captured
