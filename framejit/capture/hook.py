"""The frame hook: the only way into capture.

A `FrameHook` stands for one code object compiled with one set of compile options. On each call it runs
the guard functions of its entries (newest first); a hit calls that entry's function, a miss converts
the frame anew, unless the recompile limit is reached: then the frame runs eagerly, and one log line
names the function and the guard that kept failing.

The per-call path is deliberately small: a loop over entries, one generated guard call each, then one call of
the transformed function. CPython itself binds the arguments, because guard and transformed functions share
the frame's signature. The per-call path takes no lock; misses compile under one lock (NOTE [Threads]).

NOTE [Live defaults]: guard and transformed functions carry the frame function's `__defaults__` and
`__kwdefaults__` (so CPython binds a call as it binds the user's function). A user who assigns new
defaults after the first call must see them: the hook compares their identities on each call and, when
they changed, installs the new ones on every entry's functions, so the guards then judge the new values.

NOTE [Code replaced]: entries are compiled for one code object of the function. A user who assigns
`fn.__code__ = other` after the first call must run `other`: the hook compares the code's identity on each
call (the same check as the defaults') and, when it changed, puts the current entries aside under their
code and takes up the entries of the new code (none yet: the next call traces it). Assigning the old code
back finds its entries again. Inlined callees' codes are guards of the entries (translator.child_frame).
"""
from __future__ import annotations

import ast
import contextlib
import gc
import sys
import time
import types
import weakref
from typing import Any

from .. import config, fake_modes, logs
from ..guards.codegen import Explanations as _Explanations
from . import changing_strings, frame_cache
from .breaks import DISABLED, TracerInterop, fx_tracing
from .codegen import frame_signature
from .convert import convert_frame
from .deep_traces import out_of_stack
from .dynamic_misses import (RaisedAtSymbolicOp, failed_traces_kept, failures_of_failed_trace, older_entry_sizes,
                             other_literal)
from .entry_checks import sizes_kept
from .module_frame import module_call
from .numpy_scalars import numpy_scalar_text
from .op_warnings import rerun_without, shown_before_failure
from .raising_floats import rebuilt_float_raised
from .recompile_text import dims, int_text, module_call_names, named_dims
from .graph_errors import make_effects
from .locators import ModuleNotImported
from .requests import (COMPILE_LOCK, FRAMES, STATS, CompileRequest, Entry, FrameRow,  # NOTE [Threads]
                       mutates_in_place, rerun_state)
from .carried_loops import loop_position, retrace_with_lengths
from .resume import _ORIGIN, eager_function, layout_key, make_resume_code
from .shapes import layout_marks
from ..signal_handlers import from_signal_handler, reraise_if_from_signal_handler
from .user_tracebacks import clean as clean_traceback
from torch._C import _is_tracing as jit_tracing  # NOTE [Compiled callables under the TorchScript tracer]

_ALL_HOOKS: "weakref.WeakSet[FrameHook]" = weakref.WeakSet()


class FrameHook(TracerInterop):
    def __init__(self, fn: types.FunctionType, request: CompileRequest) -> None:
        self.fn = fn
        self.eager = fn  # what runs when the frame runs eagerly (NOTE [Unbound hidden from eager runs])
        self.request = request
        if request.hooks is None:
            request.hooks = Hooks(request)
        self.entries: list[Entry] = []
        self.limit_logged = False
        self.loaded_owners: set = set()  # owners whose persisted entries were looked up (frame cache)
        self.loaded: dict[int, Entry] = {}  # id -> entry loaded from the frame cache (kept: ids stay unique)
        self.waiting: list[tuple] = []  # (owner, module, persisted): NOTE [Entries waiting for an import]
        self.dynamic_floats: frozenset[str] = frozenset()  # NOTE [Dynamic floats] in values/scalars.py
        self.dynamic_dims: dict[str, frozenset[int]] = {}  # NOTE [Automatic dynamic]
        self.dynamic_ints: frozenset[str] = frozenset()  # NOTE [Dynamic ints]
        self.loop_positions: dict[str, frozenset] = {}  # NOTE [Loops carried across breaks] in carried_loops.py
        self.defaults = (fn.__defaults__, fn.__kwdefaults__)  # NOTE [Live defaults]
        self.code = fn.__code__  # NOTE [Code replaced]
        self.other_codes: dict[types.CodeType, tuple] = {}
        _ALL_HOOKS.add(self)
        for kept in _KEEP:
            kept.append(self)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            if config.disable or jit_tracing():  # NOTE [Compiled callables under the TorchScript tracer] in breaks.py
                return self.run_uncompiled(args, kwargs)
            fn = self.fn
            if fn.__code__ is not self.code:
                self._switch_code()
            if fn.__defaults__ is not self.defaults[0] or fn.__kwdefaults__ is not self.defaults[1]:
                self._install_defaults()
            for entry in self.entries:
                try:
                    hit = entry.guard.check(*args, **kwargs)
                except Exception as e:
                    reraise_if_from_signal_handler(e)  # NOTE [Signal handlers while a compiled frame runs]
                    hit = False
                if hit:
                    try:
                        return entry.fn(*args, **kwargs)
                    except Exception as e:
                        if (shown := self._reruns(entry, e, args, kwargs)) is None:
                            raise
                    return rerun_without(shown, self.eager, args, kwargs)
            return self.miss(args, kwargs)
        except BaseException as e:  # KeyboardInterrupt too (review revN N1)
            clean_traceback(e)  # NOTE [Tracebacks past the hook]: a bare raise adds no entry
            raise

    def _switch_code(self) -> None:
        """`fn.__code__` was reassigned: the entries of the new code (NOTE [Code replaced])."""
        with COMPILE_LOCK:
            code = self.fn.__code__
            if code is self.code:
                return
            self.other_codes[self.code] = (self.entries, self.loaded_owners, self.limit_logged)
            self.entries, self.loaded_owners, self.limit_logged = self.other_codes.pop(code, ([], set(), False))
            self.code = code
            self._install_defaults()  # the entries taken up bind calls with the defaults of now

    def _install_defaults(self) -> None:
        """The function's defaults were reassigned: every entry binds calls with the new ones."""
        self.defaults = defaults, kwdefaults = self.fn.__defaults__, self.fn.__kwdefaults__
        for entry in self.entries:
            for function in (entry.guard.check, getattr(entry.guard, "_bind", None), entry.fn):
                if isinstance(function, types.FunctionType) and function.__code__.co_argcount == \
                        self.fn.__code__.co_argcount:
                    function.__defaults__, function.__kwdefaults__ = defaults, kwdefaults

    def _reruns(self, entry: Entry, exc: Exception, args: tuple, kwargs: dict) -> list | None:
        """`exc` raised by the entry's graph: the call reruns eagerly, global state restored (NOTE [Graph failures rerun
        eagerly]); returns the warnings the graph showed, for the rerun to drop (NOTE [Warnings of a graph that raised]).
        Else None: the effects before the graph's ops are made (NOTE [Effects before a failing graph]), as for a signal's.
        None too where this bookkeeping runs out of stack: `exc` propagates unchanged (NOTE [Bookkeeping at the
        recursion limit] in deep_traces.py)."""
        try:
            return self._graph_reruns(entry, exc, args, kwargs)
        except RecursionError:
            return None

    def _graph_reruns(self, entry: Entry, exc: Exception, args: tuple, kwargs: dict) -> list | None:
        if rebuilt_float_raised(exc, entry.fn.__code__, self._name()):  # NOTE [Rebuilt floats that raise]
            return []
        if entry.rerun is None or from_signal_handler(exc) or not entry.rerun.raised_in_graph(exc, entry.fn.__code__):
            if entry.on_graph_error is not None:
                make_effects(entry, exc, args, kwargs)
            return None
        entry.rerun.restore_after(exc, self, entry)  # NOTE [A failed truth of sizes recompiles]
        logs.log("eager_fallback", "a graph of %s raised at run time (%s: %.300s); this call reruns eagerly, so the "
                 "exception is raised (and handled) by the function's own code", self._name(), type(exc).__name__, exc)
        return shown_before_failure(exc)

    def __get__(self, obj: Any, objtype: type | None = None) -> Any:
        """A compiled function used as a method binds like the function it wraps."""
        return self if obj is None else types.MethodType(self, obj)

    def miss(self, args: tuple, kwargs: dict) -> Any:
        if self.fn.__code__ in DISABLED or fx_tracing():  # NOTE [Disable after compiling], NOTE [Compiled
            return self.eager(*args, **kwargs)  # callables under FX tracing] in breaks.py
        entry = self._find_or_compile(args, kwargs)
        if entry is None:
            return self._limit_eager()(*args, **kwargs) if self.limit_logged else self.eager(*args, **kwargs)
        try:
            return entry.fn(*args, **kwargs)
        except Exception as e:
            if (shown := self._reruns(entry, e, args, kwargs)) is None:
                raise
        return rerun_without(shown, self.eager, args, kwargs)

    def _limit_eager(self):
        """What runs a call past the recompile limit: the frame's code with its callees routed through their
        hooks (NOTE [Callees of frames run eagerly] in routed_eager.py)."""
        if not self.entries:  # a limit of 0: nothing is compiled, below this frame either
            return self.eager
        routed = getattr(self, "_routed", None)
        if routed is None or routed[0] is not self.eager or routed[1] is not self.fn.__code__:
            from .routed_eager import routed_eager
            routed = self._routed = (self.eager, self.fn.__code__, routed_eager(self.eager, self.request.hooks))
        return routed[2]

    # NOTE [Threads]: tracing, backend compilation and the installation of entries happen under one
    # process-wide lock (COMPILE_LOCK); the call itself runs outside it. Under the lock a miss first looks
    # again for an entry that accepts the call (another thread may have installed one while this one
    # waited), so concurrent first calls compile once. Entries are published copy-on-write
    # (`self.entries = [new, *old]`): the hit path reads `self.entries` once and iterates a list that no
    # thread changes, without taking any lock. Side effects are replayed as the method calls the code
    # made (NOTE [Mutation log] in side_effects.py), each as atomic as in eager, so a concurrent call's
    # append is never overwritten by a replay of a stale final state.
    def _find_or_compile(self, args: tuple, kwargs: dict) -> Entry | None:
        """The entry to run this call with, compiled if needed; None: run the function eagerly (also, this once,
        where framejit's own bookkeeping ran out of stack: NOTE [Bookkeeping at the recursion limit])."""
        try:
            with COMPILE_LOCK:
                saved = self.__dict__.copy()
                try:
                    return self._entry_for(args, kwargs)
                except RecursionError:  # whatever the miss marked or installed is put back
                    self.__dict__.clear()
                    self.__dict__.update(saved)
                    raise
        except RecursionError:
            return out_of_stack(self._name)

    def _entry_for(self, args: tuple, kwargs: dict) -> Entry | None:
        for entry in self.entries:
            if _accepts(entry, args, kwargs):
                entry.served = True
                return entry
        # NOTE [Resume functions take the same locals on every pass]: a loop body's serves two functions' calls
        if self._traced_entries() >= config.recompile_limit * getattr(self, "entry_budget", 1):
            # entries waiting for an import are still loaded here (NOTE [Loaded entries and the limit])
            loaded = self._load_persisted(args, kwargs) if _binds(self.fn, args, kwargs) else None
            if loaded is not None:
                loaded.served = True
                return loaded
            self._log_limit(args, kwargs)
            return None
        if not _binds(self.fn, args, kwargs):
            return None  # eager raises CPython's own TypeError for the bad call
        if self.entries:
            self._log_recompile(args, kwargs, explain := _Explanations(args, kwargs))  # NOTE [One explanation per miss]
            self._mark_dynamic_float(args, kwargs, explain)
            self._mark_automatic_dynamic(args, kwargs, explain)
            self._mark_carried_values(args, kwargs, explain)
        elif "failed_trace" in self.__dict__:  # NOTE [A failed trace records its sizes] in dynamic_misses.py
            self._mark_automatic_dynamic(args, kwargs, _Explanations(args, kwargs))
        loaded = self._load_persisted(args, kwargs)
        if loaded is not None:
            loaded.served = True
            return loaded
        start = time.perf_counter()
        # tracing allocates many short-lived objects too (NOTE [No GC while restoring]); NOTE [Traces leave
        # no weak references] in fake_modes.py
        try:
            with _no_gc(), fake_modes.tracing(), sizes_kept(self), failed_traces_kept(self):  # NOTE [A failed
                # truth of sizes recompiles], NOTE [A failed trace records its sizes] in dynamic_misses.py
                entry = convert_frame(self.fn, args, kwargs, self.request, self.dynamic_floats, self.dynamic_dims,
                                      self.dynamic_ints)
                entry = retrace_with_lengths(self, entry, args, kwargs, convert_frame) or entry  # NOTE [Opaque ...
        except RaisedAtSymbolicOp:
            return None  # NOTE [Calls that raise at a symbolic op] in dynamic_misses.py: eagerly, this once
        if entry.routes_callees:  # NOTE [Callees of frames run eagerly] in routed_eager.py
            from .routed_eager import routed_eager
            entry.fn = routed_eager(entry.fn, self.request.hooks)
        self._record(len(entry.graphs), time.perf_counter() - start, "miss")
        if config.dump_dir:
            self._dump(entry)
        self.entries = [entry, *self.entries]
        entry.served = True
        if entry.persisted is not None:
            frame_cache.save(self.fn, args, entry.persisted, self.request)
        return entry

    # NOTE [Loaded entries and the limit]: the recompile limit bounds the traces a frame makes. Entries
    # loaded from the frame cache were traced elsewhere (another process, another function object of the
    # same code, or this hook before framejit.reset()), and all of a code's persisted entries are loaded,
    # also those whose guards hold only for other closures or defaults. Counted, they filled the limit: a
    # function made by a factory (one code, one closure per call of the factory) ran eagerly from its first
    # call once the cache held 8 entries of the other closures. Only the entries traced by this hook count;
    # the loaded ones are bounded by what the cache holds, each looked up once per owner. The cache holds at
    # most 2x the limit per code and owner (NOTE [Persisted entries per code] in frame_cache.py), so a frame
    # that keeps recompiling holds at most 3x the limit in every process, however many processes share the
    # cache (before that bound each warm process added the limit's worth: 0, 8, 16, 24 entries loaded over
    # four processes, and every call past the limit checked all their guards). A frame at its limit still
    # loads the entries that waited for an import since (NOTE [Entries waiting for an import]): it returned
    # before looking, so once a frame had hit its limit they were never used.
    def _traced_entries(self) -> int:
        return sum(1 for entry in self.entries if id(entry) not in self.loaded)

    def _load_persisted(self, args: tuple, kwargs: dict) -> Entry | None:
        """Install the entries other processes persisted for this frame (once per frame and owner);
        the one that accepts this call, if any, so it runs with no tracing at all."""
        if self.request.artifacts is None or not config.cache_enabled:
            return None
        owner = type(args[0]) if self.fn is module_call and args else None
        if owner in self.loaded_owners:
            persisted = self._imported_since(owner)
            if not persisted:
                return None
        else:
            self.loaded_owners.add(owner)
            persisted = frame_cache.load(self.fn, args, kwargs, self.request)
        loaded = []
        with _no_gc():  # NOTE [No GC while restoring]
            self._restore_into(loaded, persisted, owner, args, kwargs)
        STATS["frames_loaded"] += len(loaded)
        self.loaded.update((id(entry), entry) for entry in loaded)
        for entry in loaded:
            self._record(len(entry.graphs), 0.0, "hit")
        self.entries = [*loaded, *self.entries]
        return next((e for e in loaded if _accepts(e, args, kwargs)), None)

    # NOTE [Entries waiting for an import]: a persisted entry whose locators name a user module this process has
    # not imported is not loaded (NOTE [Locators import no user module] in locators.py). A module the compiled
    # function imports itself (`def f(x): import mymod; return mymod.g(x)`) is imported only by the first call,
    # after the entries were looked up: the cold process's later entries (traced once the module was imported:
    # a new shape, a new value) were dropped and traced again in every warm process. Such an entry now waits,
    # with the module it needs; a later miss loads the waiting entries whose module was imported since, before tracing.
    def _imported_since(self, owner) -> list:
        ready = [w for w in self.waiting if w[0] is owner and w[1] in sys.modules]
        self.waiting = [w for w in self.waiting if not any(w is r for r in ready)]
        return [persisted for _, _, persisted in ready]

    def _restore_into(self, loaded: list, entries: list, owner, args: tuple, kwargs: dict) -> None:
        for persisted in entries:
            try:
                guard, fn, graphs = frame_cache.restore(self.fn, persisted, self.request, args, kwargs)
                graph_break = frame_cache.restored_graph_break(self.fn, persisted)
            except ModuleNotImported as e:
                logs.log("cache", "persisted entry of %s waits for an import of %s", self._name(), e.module)
                self.waiting.append((owner, e.module, persisted))
                continue
            except Exception as e:  # a stale or unloadable entry is a miss, never an error
                logs.log("cache", "persisted entry of %s not used: %s: %s", self._name(), type(e).__name__, e)
                continue
            gm = graphs[0] if graphs else None
            loaded.append(Entry(guard, fn, graphs, graph_break=graph_break, persisted=persisted,
                                rerun=rerun_state(gm, gm is not None and mutates_in_place(gm),
                                                  bool(getattr(persisted, "restore", ())))))
            # NOTE [Clean entries of a warm process] (kept_joints.py); an entry saved before the flag reads False
            loaded[-1].passes_arguments_only_to_graphs = bool(getattr(persisted, "clean", False))

    def reset(self) -> None:  # a clean hook is left alone: reset_all runs over every live hook (2,000+ in a test run)
        if self.entries or self.other_codes or self.limit_logged or self.loaded_owners or self.loaded or self.waiting:
            self.entries, self.limit_logged, self.waiting = [], False, []
            self.other_codes.clear()
            self.loaded_owners.clear()
            self.loaded.clear()

    def _record(self, graphs: int, seconds: float, cache: str) -> None:
        """One row of `framejit.stats()["frames"]` (the `framejit warm` table)."""
        code = self.fn.__code__
        FRAMES.append(FrameRow(function=code.co_qualname, location=f"{code.co_filename}:{code.co_firstlineno}",
                               backend=self.request.version_key.split("[")[0], graphs=graphs,
                               compile_time_s=seconds, cache=cache))

    def _dump(self, entry: Entry) -> None:
        from ..dump import dump_entry
        code = self.fn.__code__
        dump_entry(code.co_qualname, code.co_filename, code.co_firstlineno, len(self.entries), entry.guard.source,
                   entry.fn.__code__, entry.graphs, entry.backend_outputs, code)

    def _name(self) -> str:
        code = self.fn.__code__
        return f"{code.co_qualname} ({code.co_filename}:{code.co_firstlineno})"

    def _mark_dynamic_float(self, args: tuple, kwargs: dict, explain: _Explanations) -> None:
        """A recompile because a float changed value (an argument, an attribute, a closure's variable)
        makes that float a graph input from now on (NOTE [Dynamic floats] in values/scalars.py)."""
        if not config.dynamic_floats:
            return
        # every float that changed, not only the first failing guard's (as for ints, NOTE [Automatic
        # dynamic]): an optimizer's first step creates its state and the scheduler has changed `lr` by the
        # second, so the state's guard fails first; `lr` still becomes an input then, not one call later
        from .float_parts import relation_missed
        relation_missed(self, explain(self.entries[0]))  # NOTE [Outcomes of float comparisons that keep changing]
        for failure in explain(self.entries[0]):
            if failure.guard.kind != "CONSTANT_MATCH":
                continue
            try:
                expected = ast.literal_eval(failure.guard.expected)
            except (ValueError, SyntaxError):
                continue
            if type(expected) is str:  # NOTE [Strings that change between calls] in changing_strings.py
                changing_strings.string_changed(self, failure.guard.source)
            elif type(expected) is float and failure.guard.source not in self.dynamic_floats:
                self.dynamic_floats = self.dynamic_floats | {failure.guard.source}
                logs.log("recompiles", "%s: the float %s changed value; it is a graph input from now on",
                         self._name(), failure.guard.source)

    # NOTE [Automatic dynamic]: with compile(dynamic=None) a frame is first compiled with static shapes.
    # When a later call misses because a tensor dimension has another size (the newest entry's first
    # failing guard is that tensor's shape check), that dimension is made symbolic for every later trace
    # of the frame (NOTE [Symbolic shapes] in shapes.py): the new entry serves all sizes its relations
    # allow, so a function called with 6 batch sizes compiles twice, plus once more if size 1 comes (1 is
    # specialised: broadcasting differs). The same for an int argument or attribute that changed value
    # (NOTE [Dynamic ints]): it becomes a symbol like a size. The `recompiles` log names the dimension.
    def _mark_automatic_dynamic(self, args: tuple, kwargs: dict, explain: _Explanations) -> None:
        if self.request.dynamic is False or not config.automatic_dynamic:
            return  # dynamic=True: every size is symbolic already; an int attribute that changed becomes one
        # NOTE [Dynamic layouts], [Changing offsets of rows], [Changing strides of arguments] (in shapes.py)
        layout = ("TENSOR_STRIDE", "TENSOR_STORAGE_OFFSET")

        def changed_value(failure) -> bool:  # a size, an int or a float (made an input above) that changed
            return failure.guard.kind in ("TENSOR_SHAPE", *layout) or (
                failure.guard.kind == "CONSTANT_MATCH" and (int_text(failure.guard.expected, sizes=True)
                                                            or failure.guard.source in self.dynamic_floats
                                                            or numpy_scalar_text(failure.guard.expected)))
        failure = self.entries[0].guard.miss_failure(args, kwargs) if self.entries else None
        failures = explain(self.entries[0]) if failure is not None else []  # whichever failed first
        if not any(f.guard.kind in ("TENSOR_SHAPE", *layout) for f in failures):
            failures = failures + older_entry_sizes(self.entries, explain, changed_value)  # NOTE [Automatic
        failures = failures + failures_of_failed_trace(self, explain)  # dynamic across entries], [A failed trace
        # records its sizes] (a new list: `explain` keeps the one it returned)
        # every int and every size of the frame's state that changed, not only the first (as Dynamo compares
        # the whole frame state): `sizes = t.tolist()` at a break gives the resume function a list of ints
        # that change together (JetMoE's expert sizes: one recompile, not one per item); a batch size and
        # a step counter that change together recompile once
        for failure in failures:
            source = failure.guard.source
            if failure.guard.kind == "CONSTANT_MATCH" and source not in self.dynamic_ints and (
                    int_text(failure.guard.expected, sizes=True) or numpy_scalar_text(failure.guard.expected)) \
                    and not other_literal(failure.actual) and not loop_position(source):  # NOTE [Loop positions
                # are no symbols] in carried_loops.py
                self.dynamic_ints = self.dynamic_ints | {source}  # NOTE [Dynamic NumPy scalars]
                logs.log("recompiles", "%s: the %s %s changed value; it is symbolic from now on", self._name(),
                         "int" if int_text(failure.guard.expected) else "torch.Size" if int_text(
                             failure.guard.expected, sizes=True) else "NumPy scalar", source)
            # under dynamic=True only a static offset fails: a 0-dim tensor's (NOTE [Changing offsets of scalar views])
            if self.request.dynamic is True and failure.guard.kind != "TENSOR_STORAGE_OFFSET":
                continue  # sizes and layouts: all symbolic already (a size 1, a mark_static dim stay static)
            marks = failure.guard.kind in layout and layout_marks(failure.guard.kind, failure.guard.expected,
                                                                  failure.actual, self.fn.__code__ in _ORIGIN)
            if marks and not marks <= self.dynamic_dims.get(source, frozenset()):
                self.dynamic_dims = {**self.dynamic_dims, source: self.dynamic_dims.get(source, frozenset()) | marks}
                logs.log("recompiles", "%s: the layout of %s changed (%s -> %s); symbolic from now on (NOTE "
                         "[Dynamic layouts])", self._name(), source, failure.guard.expected, failure.actual)
            if failure.guard.kind != "TENSOR_SHAPE":
                continue
            expected, actual = dims(failure.guard.expected), dims(failure.actual)
            if len(expected) != len(actual):
                continue  # another rank: a new static entry
            changed = {d for d, (a, b) in enumerate(zip(expected, actual)) if a.isdigit() and a != b}
            new = changed - self.dynamic_dims.get(source, frozenset())
            if new:
                self.dynamic_dims = {**self.dynamic_dims, source: self.dynamic_dims.get(source, frozenset()) | new}
                logs.log("recompiles", "%s: size of dim %s of %s changed (%s -> %s); symbolic from now on",
                         self._name(), ", ".join(map(str, sorted(new))), source, failure.guard.expected, failure.actual)

    def _mark_carried_values(self, args: tuple, kwargs: dict, explain: _Explanations) -> None:
        """A resume function that recompiles on guards of the for loop carried into it breaks at that loop's
        steps from now on, and a str argument that changed is opaque from now on (NOTE [Loops carried
        across breaks], [Strings carried across breaks] in carried_loops.py)."""
        code = self.fn.__code__
        if kwargs or code not in _ORIGIN:  # resume functions take positional arguments
            return
        from .carried_loops import changed_lengths, changed_strings, dynamic_loops
        failures = list(explain(self.entries[0]))
        loops = dynamic_loops(code, args, failures, self.loop_positions) - self.dynamic_ints
        strings = changed_strings(code, args, failures) - self.dynamic_ints  # NOTE [Strings carried across breaks]
        # NOTE [Sequences of changing length carried across breaks] in carried_loops.py
        lengths = changed_lengths(code, args, failures) - self.dynamic_ints - self.__dict__.get("never_opaque", set())
        self.dynamic_ints = self.dynamic_ints | loops | strings | lengths
        if any(s.startswith("L[") for s in lengths):  # not only a marker (NOTE [Lengths that change between calls])
            logs.log("recompiles", "%s: the length of %s changed; opaque from now on", self._name(),
                     ", ".join(sorted(s for s in lengths if s.startswith("L["))))
        if loops:
            logs.log("recompiles", "%s: the for loop at %s came back at another position; its steps run as "
                     "Python from now on", self._name(), ", ".join(sorted(loops)))
        if strings:
            logs.log("recompiles", "%s: the string %s changed; it is opaque from now on", self._name(),
                     ", ".join(sorted(strings)))

    def _log_recompile(self, args: tuple, kwargs: dict, explain: _Explanations) -> None:
        if logs.enabled("recompiles"):
            # every entry's first failure (newest first), as a dynamic entry older than a size-1 one may be the
            # one whose relation failed; a changed shape names its dimensions (issue 13)
            failures = [entry.guard.miss_failure(args, kwargs) for entry in self.entries]
            first = named_dims(failures[0]) if failures and failures[0] else "no guard failed"
            others = "".join(f"; entry {i} (older): {named_dims(f)}" for i, f in enumerate(failures[1:], 1)
                             if f is not None)
            name, text = self._name(), first + others
            if self.fn.__code__ is module_call.__code__ and args:
                name, text = module_call_names(args[0], args[1:], kwargs, text)
            logs.log("recompiles", "recompiling %s: %s", name, text)
        if logs.enabled("recompiles_verbose"):
            for i, entry in enumerate(self.entries):
                for failure in explain(entry):
                    logs.log("recompiles_verbose", "recompiling %s: entry %d: %s", self._name(), i, failure)

    def _log_limit(self, args: tuple, kwargs: dict) -> None:
        if self.limit_logged:
            return
        self.limit_logged = True
        from .eager_frames import record  # NOTE [Eager frames]
        record(self.fn.__code__, f"the recompile limit ({config.recompile_limit}) is reached")
        if not self.entries:  # a limit of 0: never compile
            message = f"{self._name()} runs eagerly: the recompile limit is {config.recompile_limit}"
        else:
            name, failure = self._name(), str(self.entries[0].guard.miss_failure(args, kwargs))
            if self.fn.__code__ is module_call.__code__ and args:  # NOTE [Recompiles of compiled modules]
                name, failure = module_call_names(args[0], args[1:], kwargs, failure)
            message = (f"{name} hit the recompile limit ({config.recompile_limit}); it now runs "
                       f"eagerly. Last failing guard: {failure}")
        logs.log("recompiles", "%s", message)
        logs.getLogger("recompiles").warning("%s", message) if not logs.enabled("recompiles") else None


def _runs_alike(first: types.FunctionType, other: types.FunctionType) -> bool:
    """Whether `other` runs exactly as `first` (NOTE [Functions made per call without free variables])."""
    kw_first, kw_other = first.__kwdefaults__ or {}, other.__kwdefaults__ or {}
    return first.__code__ is other.__code__ and first.__globals__ is other.__globals__ \
        and first.__closure__ is None and other.__closure__ is None and _same_items(first.__defaults__, other.__defaults__) \
        and kw_first.keys() == kw_other.keys() and all(kw_first[k] is kw_other[k] for k in kw_first)


def _same_items(first: tuple | None, other: tuple | None) -> bool:
    if first is None or other is None:
        return first is other
    return len(first) == len(other) and all(a is b for a, b in zip(first, other))


class Hooks:
    """The FrameHooks a compiled function creates at graph breaks (callees and resume functions), one per
    target, shared by all entries of the request so that recompiles reuse them."""

    def __init__(self, request: CompileRequest) -> None:
        self.request = request
        self.by_key: dict[Any, Any] = {}
        self.objects_per_code: dict[types.CodeType, int] = {}  # NOTE [Closures called at breaks]
        self.per_call_codes: set[types.CodeType] = set()  # NOTE [Comprehensions made per call]

    def _hook(self, key: Any, fn: types.FunctionType):
        hook = self.by_key.get(key)
        if hook is None:
            hook = self.by_key[key] = FrameHook(fn, self.request)
        return hook

    def function(self, fn: types.FunctionType):
        if fn.__code__ in DISABLED or getattr(fn, "_torchdynamo_disable", False):
            return fn  # framejit.disable (or torch.compiler.disable): called as plain Python, never hooked
        return self._hook(("function", fn), fn)

    def module_call(self):
        return self._hook(("function", module_call), module_call)

    def module_forward(self, forward: types.FunctionType):
        """What a break calls in place of `module(...)`: the module class's `forward` through its hook, in a
        ModuleCall (NOTE [Module calls past the hook] in caller_frames.py)."""
        key = ("module_forward", forward)
        call = self.by_key.get(key)
        if call is None:
            from .caller_frames import ModuleCall
            call = self.by_key[key] = ModuleCall(self.function(forward))
        return call

    # NOTE [Closures called at breaks]: a callee at a break that is a closure from outside guarded by its
    # code (NOTE [Closures guarded by code]: typically a decorator's wrapper, `deprecate_kwarg` around a
    # model's forward) may be another function object on a later call, so no hook can be fixed in the
    # residual code. It calls `call_through_hook(target, ...)` instead, which finds the hook of the function
    # object it is given (one per object, at most OBJECTS_PER_CODE per code object; past that the object
    # runs as plain Python and the `recompiles` log says so), so the callee is still captured.
    OBJECTS_PER_CODE = 8

    # NOTE [Comprehensions made per call]: a comprehension or generator expression with free variables is
    # a new function object with new cells on every call of the function around it (its cells are that
    # frame's own, MAKE_FUNCTION runs right before the call), and it is called once. Reaching a break
    # (3.11's comprehensions; a generator expression on every version), one hook per object was traced on
    # every call and never hit again: `[c * w for c in batches(x)]` traced 5 frames per call until
    # OBJECTS_PER_CODE objects, then ran as Python. Objects of one code with the same cells, globals and no
    # defaults run exactly alike, so they share one hook; once an object of that code comes with other
    # cells, its objects are known to be made per call, and each later one runs as plain Python at once
    # (a hook could serve it only this once), as 3.12+ run an inlined comprehension stepped at a break.
    COMPREHENSIONS = frozenset({"<listcomp>", "<dictcomp>", "<setcomp>", "<genexpr>"})

    def _comprehension_hook(self, fn: types.FunctionType):
        """The hook for a comprehension object with free variables, or `fn` itself to run it as Python
        (NOTE [Comprehensions made per call])."""
        code = fn.__code__
        key = ("comprehension", code, tuple(id(cell) for cell in fn.__closure__), id(fn.__globals__))
        hook = self.by_key.get(key)
        if hook is not None:
            return hook
        if code in self.per_call_codes:
            return fn
        if any(k[0] == "comprehension" and k[1] is code for k in self.by_key):
            self.per_call_codes.add(code)
            logs.log("recompiles", "%s is made anew with new cells on each call of its function; it runs as "
                     "plain Python from now on (NOTE [Comprehensions made per call])", code.co_qualname)
            return fn
        return self._hook(key, fn)

    # NOTE [Functions made per call without free variables]: a nested function without free variables
    # (`def f(a, scale=1.0)` inside the compiled function, called in an inlined comprehension stepped at a
    # break on 3.12+) is a new object on every call of its maker: one hook per object traced it again on
    # every call (6 graphs over 3 calls where 3.11 and stock make 2). Two objects of one code with the same
    # globals and the same defaults (the same objects, in tuples that may differ) run exactly alike, so they
    # share one hook, found by that code, globals and defaults; the hook's own function is checked to have
    # them still (its defaults or code may be reassigned), otherwise the object gets a hook of its own.
    def _same_code_hook(self, fn: types.FunctionType):  # for_object has answered disabled functions
        defaults = None if fn.__defaults__ is None else tuple(map(id, fn.__defaults__))
        kwdefaults = tuple((k, id(v)) for k, v in (fn.__kwdefaults__ or {}).items())
        key = ("same code", fn.__code__, id(fn.__globals__), defaults, kwdefaults)
        hook = self.by_key.get(key)
        if hook is not None and _runs_alike(hook.fn, fn):
            return hook
        from .closure_hooks import objects_exceeded  # NOTE [Functions made per call with their own defaults]
        if objects_exceeded(self, fn):
            return fn
        if hook is None:  # also the hook of this very object (Hooks.function finds it)
            hook = self.by_key[("function", fn)] = self._hook(key, fn)
            return hook
        return self.function(fn)

    def for_object(self, fn: types.FunctionType):
        if ("function", fn) in self.by_key:
            return self.by_key[("function", fn)]
        if fn.__code__ in DISABLED or getattr(fn, "_torchdynamo_disable", False):
            return fn  # framejit.disable / torch.compiler.disable: plain Python, never hooked
        if fn.__code__.co_name in self.COMPREHENSIONS and fn.__closure__ and fn.__defaults__ is None \
                and fn.__kwdefaults__ is None:
            return self._comprehension_hook(fn)
        if not fn.__code__.co_freevars and fn.__closure__ is None:
            return self._same_code_hook(fn)
        from .closure_hooks import closure_hook, objects_exceeded  # NOTE [Closures made per call share a hook
        shared = closure_hook(self, fn)  # through their cells]
        if shared is not None:
            return shared
        # a code whose shared trace broke: one hook per object (NOTE [Closures called at breaks])
        return fn if objects_exceeded(self, fn) else self.function(fn)

    def call_through_hook(self, target, *args, **kwargs):
        """`target(*args, **kwargs)` for a function or bound method, through the hook of its function."""
        try:
            if isinstance(target, types.MethodType) and isinstance(target.__func__, types.FunctionType):
                return self.for_object(target.__func__)(target.__self__, *args, **kwargs)
            if isinstance(target, types.FunctionType):
                return self.for_object(target)(*args, **kwargs)
            return target(*args, **kwargs)
        except BaseException as e:
            clean_traceback(e)  # NOTE [Tracebacks past the hook]
            raise

    # NOTE [Reentrant checkpoint at a break]: `torch.utils.checkpoint.checkpoint(fn, ...)` other than the
    # traced forms (NOTE [Activation checkpointing], NOTE [Reentrant checkpoint in the graph]: a missing
    # `use_reentrant`, a `context_fn`, `debug=True`, or a reentrant `fn` whose Python effects or reads of
    # grad mode a traced region would not repeat as eager's recomputation does) is a graph break, and
    # torch's own checkpoint runs, exactly as in eager:
    # the reentrant autograd.Function runs `fn` under no_grad, saves the RNG state, and in backward reruns
    # `fn` under enable_grad on detached inputs (RNG restored) and back-propagates through it. Only `fn`
    # itself is handed over through its frame hook (a module through `module_call`'s, a function or bound
    # method through `call_through_hook`), so its body is captured and counted: one entry traced under
    # no_grad for the forward, one under grad for the recomputation (grad mode is guarded). torch's code
    # around it is unchanged, so values, gradients, RNG replay, warnings and hooks are eager's.
    def checkpoint_through_hook(self, function, *args, **kwargs):
        """`torch.utils.checkpoint.checkpoint(function, *args, **kwargs)` with `function` called through
        its frame hook (NOTE [Reentrant checkpoint at a break])."""
        from .higher_order import checkpoint_at_break  # NOTE [Non-reentrant recomputation runs eagerly]
        from .lookup import module_call_default  # an nn.Module called as torch calls it (NOTE [Library defaults patched])
        if module_call_default(type(function)):
            hook = self.module_call()

            def run(*inner_args, **inner_kwargs):
                return hook(function, *inner_args, **inner_kwargs)
        elif isinstance(function, (types.FunctionType, types.MethodType)):
            def run(*inner_args, **inner_kwargs):
                return self.call_through_hook(function, *inner_args, **inner_kwargs)
        else:
            run = function
        return checkpoint_at_break(run, function, args, kwargs)

    def apply_through_hook(self, apply, *args, **kwargs):
        """`apply(*args, **kwargs)` of a custom autograd Function with its forward through its frame hook
        (NOTE [Custom Function forwards at breaks] in apply_at_break.py)."""
        from .apply_at_break import apply_hooked
        return apply_hooked(self, apply, args, kwargs)

    def call_hooked(self):
        """The call helper of loops run as Python (NOTE [Loops run as Python] in python_loops.py)."""
        if getattr(self, "_call_hooked", None) is None:
            from .python_loops import make_call_hooked
            self._call_hooked = make_call_hooked(self)
        return self._call_hooked

    def resume(self, code: types.CodeType, index: int, layout: tuple[str, ...], names: tuple[str, ...], fn,
               hooked: bool = True, successors: tuple = (), python_loop: tuple | None = None, cells: tuple = ()):
        """The resume function for (code, index, stack layout, live locals): a FrameHook, or with
        `hooked=False` the plain function, whose `successors` trampoline into hooked resume functions
        (NOTE [Breaks inside try blocks]); the live locals named in `cells` are passed as the frame's cells
        themselves (NOTE [Cells passed to resume functions] in resume.py)."""
        # NOTE [Resume functions of closures]: a resume function is made with the closure of the function
        # whose frame broke, so it reads that function's free variables. Two function objects of one code
        # (a decorator's wrapper made anew per call, each hooked on its own: NOTE [Closures called at
        # breaks]) have different cells, so the cells are part of the key (by identity; the function
        # made here keeps them alive): keyed by code alone, the second object's break resumed in the
        # first object's closure, read its stale variables and replayed side effects on its objects.
        # Its globals too (review revI HIGH-2): code objects compare equal without their file, so `same` of
        # two modules of one source (each reading its own global K) resumed in the first module's function.
        shared_cells, cells = cells, tuple(id(cell) for cell in fn.__closure__ or ())
        key = ("resume" if hooked else "tail", code, index, layout_key(layout), names, cells, python_loop,
               id(fn.__globals__)) + \
            ((("cells",) + shared_cells) if shared_cells else ())
        if key not in self.by_key:
            if python_loop:  # NOTE [Loops run as Python]: (FOR_ITER index, hook after the loop, its layout)
                python_loop = (python_loop[0], self.call_hooked(), *python_loop[1:])
            route = None if hooked or python_loop else self.call_hooked()  # NOTE [Caller-naming calls in tail functions]
            resume_code = make_resume_code(code, index, layout, names, successors, python_loop, shared_cells, route)
            resume_fn = types.FunctionType(resume_code, fn.__globals__, resume_code.co_name, None, fn.__closure__)
            if hooked:
                self._hook(key, resume_fn).eager = eager_function(resume_fn)
            else:
                self.by_key[key] = resume_fn
        return self.by_key[key]

    def all(self) -> list:
        return [h for h in self.by_key.values() if isinstance(h, FrameHook)]


# NOTE [No GC while restoring]: restoring entries (and tracing) allocates thousands of small objects; in a
# process that has just imported torch, that triggers full collections of a very large heap (measured:
# ~80 ms of a 130 ms warm start). They are short-lived, so collection waits until the end.
@contextlib.contextmanager
def _no_gc():
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _accepts(entry: Entry, args: tuple, kwargs: dict) -> bool:
    try:
        return bool(entry.guard.check(*args, **kwargs))
    except Exception:
        return False


def _binds(fn: types.FunctionType, args: tuple, kwargs: dict) -> bool:
    try:
        frame_signature(fn).bind(*args, **kwargs)
        return True
    except TypeError:
        return False


_KEEP: list[list] = []


@contextlib.contextmanager
def keep_hooks():
    """Keep every FrameHook created inside the block alive and list them (`framejit explain SCRIPT`)."""
    kept: list = []
    _KEEP.append(kept)
    try:
        yield kept
    finally:
        _KEEP.remove(kept)


# NOTE [Disable after compiling]: `framejit.disable(fn)` adds fn's code to DISABLED, which tracing reads:
# fn is never inlined, and the hook that a graph break put around a call of fn (a resume path) would
# trace it. A disable that comes after entries were compiled drops the entries that relied on fn not being
# disabled: fn's own (its hook then runs fn as plain Python on every miss) and every entry that inlined fn
# (GuardFunction.inlined_codes; a restored entry, which does not know, is dropped too). They recompile on
# their next call, without fn. The hit path is unchanged: no guard line pays for this.
def forget_disabled(code: types.CodeType) -> None:
    with COMPILE_LOCK:
        for hook in list(_ALL_HOOKS):
            if hook.fn.__code__ is code:
                hook.entries = []
                continue
            kept = [e for e in hook.entries if code not in getattr(e.guard, "inlined_codes", (code,))]
            if len(kept) != len(hook.entries):
                hook.entries = kept


def reset_all() -> None:
    for hook in list(_ALL_HOOKS):
        hook.reset()
