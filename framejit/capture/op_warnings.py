"""Warnings of operations recorded in a graph.

NOTE [Warnings of graph ops]: an op is run on fake tensors while tracing, and a warning it raises there
(`torch.tensor(t)`'s "To copy construct from a tensor", `F.softmax` without `dim`, `torch.range`, `x.T` on
3 dimensions) went to the user at trace time, attributed to framejit's own file; the graph then ran the
real op, which warned again (the eager backend: 2 warnings on the first call, eager 1), or ran no torch
code at all (onnxrt: no warning on later calls, eager one on each call under the "always" filter).
The fake run's warnings are held back (all of them reach `warnings._showwarnmsg`, which is swapped: it is
called whatever `warnings.showwarning` or logging.captureWarnings put in place), and then judged with the
user's filters as eager's call would be, at the user's line (module): an op whose
warning eager would show or raise ("error") is a graph break, so the op runs in Python where eager runs it
and warns or raises as eager does. A warning the filters ignore costs nothing: the op stays in the graph
(the graph's own run of the op is silenced by the same filter). A "default"/"module"/"once" warning already
shown at the user's line is a break still: the graph's run of the op would show it again. With
fullgraph=True, where a break is an error, the op stays in the graph and its warnings are issued now at
the user's line with the user's filters (so "error" raises the user's exception at the op, as eager;
a shown warning may show again from the graph's own run on the eager backend, /tmp/hfixW/adv_fg.py).
TORCH_WARN_ONCE warnings are made to fire during the fake run (torch's warn-always flag) so that the fake
run detects them without spending the once that eager's own call shows. Warnings raised by the fake-tensor
machinery itself (not by the op as eager runs it) are not the op's, and are dropped. Warnings of other
threads in that window are not the op's either: they are judged with the user's filters and shown (or
raised in their thread) at once ("default" of another thread in the window may show a second time).
"""
from __future__ import annotations

import contextlib
import os
import threading
import warnings
from typing import Any, Callable, Iterator

import torch

from .breaks import BreakKind, Unsupported

# files whose warnings come from tracing machinery, never from the op as eager runs it
_MACHINERY = ("/torch/_subclasses/", "/torch/fx/", "/torch/_dispatch/", "/torch/_guards", "/torch/_library/fake")
_FRAMEJIT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


@contextlib.contextmanager
def warnings_noted(name: str, output: Any) -> Iterator[None]:
    """Around the fake run of the op `name` in the trace `output`: an op whose warning eager would show or
    raise is a graph break (NOTE [Warnings of graph ops]). Entered after the trace's own modes (autocast,
    grad mode), whose warnings are not the op's."""
    caught: list = []
    fullgraph = bool(getattr(output, "fullgraph", False))
    where = lambda: _user_site(output)  # noqa: E731
    me = threading.get_ident()
    always, filters, show = torch._C._get_warnAlways(), warnings.filters, warnings._showwarnmsg
    user_filters = list(filters)

    def hold(msg: Any) -> None:
        if threading.get_ident() == me:
            caught.append(msg)
        else:
            _forward(msg, user_filters, show)

    torch._C._set_warnAlways(True)
    # not catch_warnings(): entering it marks the filters changed, which empties every module's registry of
    # warnings shown, and a "default" warning eager shows once per line showed again after each trace
    warnings.filters, warnings._showwarnmsg = [("always", None, Warning, None, 0)], hold
    restored = False
    try:
        try:
            yield
        finally:
            ops = _ops_warnings(caught, where)
            warnings.filters, warnings._showwarnmsg = filters, show
            torch._C._set_warnAlways(always)
            restored = True
    except Unsupported:
        raise
    except Exception:
        if not fullgraph and any(_eager_shows(w, user_filters) for w in ops):
            _break(ops, name)
        raise
    finally:
        if not restored:
            warnings.filters, warnings._showwarnmsg = filters, show
            torch._C._set_warnAlways(always)
    if fullgraph:
        for w in ops:  # the op stays in the graph: eager's warnings now, with eager's filters ("error" raises)
            warnings.warn_explicit(w["message"], w["category"], w["filename"], w["lineno"], w["module"], w["registry"])
    elif any(_eager_shows(w, user_filters) for w in ops):
        _break(ops, name)


def _user_site(output: Any) -> tuple:
    """(filename, lineno, globals) of the innermost user frame of the trace: where eager's op call warns."""
    tx = output.tx_stack[-1] if output.tx_stack else None
    while tx is not None and tx.parent is not None and tx.code.co_filename.startswith(_FRAMEJIT_DIR):
        tx = tx.parent
    if tx is None:
        return "<unknown>", 0, {}
    return tx.code.co_filename, tx.frame_info().lineno, tx.f_globals


def _ops_warnings(caught: list, where: Callable[[], tuple]) -> list:
    """The op's warnings among those held back, located where eager's call would warn: a warning framejit's
    own call site raised (C++ warnings, Python ones with stacklevel=2) is eager's at the user's line."""
    ops = []
    for msg in caught:
        filename = str(msg.filename).replace("\\", "/")
        if any(m in filename for m in _MACHINERY):
            continue
        text = str(msg.message)
        category = msg.message.__class__ if isinstance(msg.message, Warning) else msg.category
        if str(msg.filename).startswith(_FRAMEJIT_DIR):
            filename, lineno, f_globals = where()
            module, registry = f_globals.get("__name__", "<string>"), f_globals.setdefault("__warningregistry__", {})
        else:
            filename, lineno, registry = msg.filename, msg.lineno, None
            module = filename[:-3] if filename.endswith(".py") else filename
        ops.append(dict(message=text, category=category, filename=filename, lineno=lineno, module=module,
                        registry=registry))
    return ops


def _action(user_filters: list, text: str, category: type, module: str, lineno: int) -> str:
    """The action of the user's filters for a warning, as warnings.warn_explicit finds it."""
    for action, msg, cat, mod, ln in user_filters:
        if ((msg is None or msg.match(text)) and issubclass(category, cat)
                and (mod is None or mod.match(module)) and (ln == 0 or lineno == ln)):
            return action
    return warnings.defaultaction


def _eager_shows(w: dict, user_filters: list) -> bool:
    """Whether the op must run as in eager for this warning: not when the user's filters ignore it. A warning
    "default"/"module"/"once" already showed is a break still: the graph's own run of the op warns again
    (from the graph's line and registry; "once" too, measured on 3.11), which eager never shows."""
    return _action(user_filters, w["message"], w["category"], w["module"], w["lineno"]) != "ignore"


def _forward(msg: Any, user_filters: list, show: Callable) -> None:
    """Another thread's warning in the held-back window: the user's filters decide, as they would have."""
    message = msg.message if isinstance(msg.message, Warning) else msg.category(str(msg.message))
    filename = str(msg.filename)
    module = filename[:-3] if filename.endswith(".py") else filename
    action = _action(user_filters, str(message), message.__class__, module, msg.lineno)
    if action == "error":
        raise message
    if action != "ignore":
        show(msg)


def _break(ops: list, name: str) -> None:
    w = ops[0]
    raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{name} warns ({w['category'].__name__}: "
                                                  f"{str(w['message'])[:100]}): it runs in Python, as in eager")
