"""In-place changes of a joint's outputs made before its backward raise eager's errors (NOTE [In-place changes of joint outputs]).

`output_checks(flat_gm, args)` runs the joint's graph once with fake tensors and autograd on, as eager
would run it, and returns an `OutputChecks` (or None where no output needs one): called on a joint call's
flat outputs, it makes the outputs eager forbids to change in place forbid it again, and registers a
check on the joint's backward node for outputs whose storage eager's autograd saved.
"""
from __future__ import annotations

import weakref

import torch
import torch.utils._pytree as pytree

from ..grad_mode import grad_mode
from .. import logs
from ..tensor_watch import read_after_call

# NOTE [In-place changes of joint outputs]
# In eager, an output of the graph that is a view of an intermediate stays tied to it: an in-place change
# of the output bumps the version counter the intermediate shares with its views, so when a backward
# formula saved that intermediate (exp and tanh save their result, mm its inputs), the backward raises
# "one of the variables needed for gradient computation has been modified by an inplace operation". A
# joint's outputs are fresh tensors of the compiled forward (AOT autograd returns a view of an intermediate
# through aten._unsafe_view, which gives it a version counter of its own, or regenerates it from an
# intermediate the backward does not read), so the change went unnoticed: the backward ran on the values
# saved before it, or on the changed ones where storage was shared, without an error (stock torch.compile
# does the same). Likewise eager forbids, at the in-place call itself, changing an output of a function
# that returns several views (unbind, split, chunk: "This view is the output of a function that returns
# multiple views") and a view made in a `torch.no_grad()` region of a tensor that requires grad ("A view
# was created in no_grad mode and is being modified inplace with grad mode enabled").
# When a joint is built, the graph runs once with fake tensors and autograd on, as eager runs it. Outputs
# that alias no input (those alias inputs are regenerated as real views of them by AOT autograd and behave
# as eager already) are classified:
#   - storage saved by a node of eager's autograd graph: lean calls (joint_function.py) save such outputs
#     with the context, so autograd's own version check raises eager's error, at no cost per call in
#     Python; AOT autograd's callable (a signature's first call, joints lean calls do not serve) keeps
#     each such output's version counter (through `detach()`, which shares it) and a pre-hook on the
#     joint's backward node raises eager's RuntimeError when one moved since the forward (about 25 us
#     per call, measured loaded);
#   - an in-place change of it raises in eager (tried on the fake output): multiple views -> the compiled
#     output is returned as `unbind(0)[0]` of itself unsqueezed, a view of a function returning several;
#     a no_grad view -> a view made under no_grad of a detached alias that requires grad. Either raises
#     eager's error at the in-place call, and reads, gradients and aliasing with the joint's values are
#     unchanged.
# The compiled graph is one autograd node, where eager raises only when the backward reaches the node that
# saved the storage: NOTE [Checks where eager's backward reaches]. A graph the fake run cannot handle gets
# no checks (logged on output_code).
#
# NOTE [Checks where eager's backward reaches]
# With `(exp(h), (h * 3).sum())` returned and the first changed in place, a backward of the second alone
# trains in eager (exp's node, which saved its result, is not on that backward's path), where the joint
# raised on any backward through it. So the fake run also records, per output, from which outputs'
# backward a node saving its storage is reached (`_saved_below`). An output reached from every
# differentiable output is checked as above, on every backward through the joint. One reached from some
# only (`reached_from`) is checked by a hook on each of those outputs (`register_hook`: called with the
# gradient when the backward brings that output one, also after an in-place change of it; the joint's
# node calls the hooks of the outputs no gradient reached with None, which pass), on lean and AOT calls
# alike. Where the joint's forward saved that very tensor for its own backward (AOT autograd saves exp's
# result too), autograd's version check on the saved tensor fired on any backward through the joint, and
# without that check the backward would read the changed values (or recompute from them: NOTE
# [Recomputation for ORT programs]); so the output is then returned as a copy (lean calls: a clone inside
# the Function's forward, no extra node; AOT's callable: `clone()` after it) and the joint keeps its saved
# tensor as computed. Cost per call and such output: a hook, and a copy only where the joint saves the
# output itself. Only outputs that are neither views nor share storage with another output are handled
# so (a copy would break their aliasing); others are checked on every backward, as before. Still coarser
# than eager: torch.autograd.grad(..., inputs=...) prunes eager's backward to the nodes on paths to those
# inputs; the joint's node is one.

_VERSION_ERROR = ("one of the variables needed for gradient computation has been modified by an inplace "
                  "operation: [{kind} {shape}], which is {what} {index} of the compiled graph, is at version "
                  "{now}; expected version {then} instead. Hint: an output of the compiled graph (or an input it "
                  "writes) that eager would save for the backward (or a view of it) was changed in place before "
                  "the backward (NOTE [In-place changes of joint outputs])")
_JOINT_NODES = ("CompiledFunctionBackward", "LeanJointBackward")


class OutputChecks:
    """What a joint call does to its flat outputs (NOTE [In-place changes of joint outputs])."""

    __slots__ = ("saved", "multiple_views", "no_grad_views", "views", "logged", "reached_from", "checked_from",
                 "described", "inputs", "unreached")

    def __init__(self, saved: tuple, multiple_views: tuple, no_grad_views: tuple, reached_from: tuple = (),
                 described: dict | None = None, inputs: tuple = (), unreached=None):
        self.unreached = unreached  # NOTE [Inputs no backward reaches] (joint_unreached.py)
        self.saved, self.multiple_views, self.no_grad_views = saved, multiple_views, no_grad_views
        self.inputs = inputs  # NOTE [Inputs the graph writes, saved by eager]: ((input, sources, described), ...)
        self.described = described or {}  # NOTE [Eager's words for a changed saved output]
        # NOTE [Checks where eager's backward reaches]: ((k, (j, ...)), ...): output k's storage is saved by
        # a node that only the backward of outputs j reaches
        self.reached_from = reached_from
        by_source: dict = {}
        for k, sources in reached_from:
            for j in sources:
                by_source.setdefault(j, []).append(k)
        self.checked_from = tuple((j, tuple(ks)) for j, ks in sorted(by_source.items()))
        self.views = bool(multiple_views or no_grad_views or reached_from or inputs or unreached)  # lean calls too
        self.logged = False

    def __call__(self, outs, versions: bool = True, args=()):
        """`outs` with the view kinds remade and the hooks of NOTE [Checks where eager's backward reaches];
        with `versions` (AOT autograd's callable), a check of the saved outputs' versions on the joint's
        backward node (lean calls save those outputs with the context instead) and the copies of that NOTE."""
        outs = list(outs)
        if self.unreached is not None:  # NOTE [Inputs no backward reaches] (joint_unreached.py)
            self.unreached.register(outs, args)
        for k in self.multiple_views:
            out = outs[k]
            if isinstance(out, torch.Tensor):
                outs[k] = out.unsqueeze(0).unbind(0)[0]
        for k in self.no_grad_views:
            out = outs[k]
            if isinstance(out, torch.Tensor) and out.is_floating_point():
                base = out.detach().requires_grad_()
                with grad_mode(False):
                    outs[k] = base.view(base.shape)
        # NOTE [Checks where eager's backward reaches]: copies where AOT's joint saved the output itself (lean
        # calls copied in their forward), then the hooks
        joint_saved = _saved_by_the_joint(outs) if versions and self.reached_from else ()
        for k, _ in self.reached_from:
            if isinstance(outs[k], torch.Tensor) and any(_same_storage(t, outs[k]) for t in joint_saved):
                outs[k] = outs[k].clone()
        if self.reached_from:
            watched = {k: (k, outs[k].detach(), outs[k]._version, *self._words(k, outs[k]))
                       for k, _ in self.reached_from
                       if isinstance(outs[k], torch.Tensor)}
            for j, ks in self.checked_from:  # one hook per output whose backward reads such outputs
                if isinstance(outs[j], torch.Tensor) and outs[j].requires_grad:
                    outs[j].register_hook(_when_reached(_version_check([watched[k] for k in ks if k in watched])))
        if versions and self.saved:
            watched = [(k, outs[k].detach(), outs[k]._version, *self._words(k, outs[k])) for k in self.saved
                       if isinstance(outs[k], torch.Tensor)]
            node = _joint_node(outs)
            if node is not None:
                node.register_prehook(_version_check(watched))
            elif not self.logged:
                self.logged = True
                logs.log("output_code", "joint: no backward node found for the version checks of outputs %s",
                         list(self.saved))
        if self.inputs:
            self._check_inputs(outs, args)
        if self.unreached is not None:  # NOTE [Hooks of outputs no backward reaches] (joint_unreached.py)
            self.unreached.gate(outs)
        return outs

    def add_inputs(self, entries: tuple) -> None:
        """More inputs checked as those of NOTE [Inputs the graph writes, saved by eager] (NOTE [Inputs eager
        saves, checked where the joint does not])."""
        self.inputs = (*self.inputs, *entries)
        self.views = self.views or bool(entries)

    def _check_inputs(self, outs, args) -> None:
        """NOTE [Inputs the graph writes, saved by eager]: the written inputs' versions after the call (and AOT
        autograd's write-back) are checked on the joint's node, or where eager's backward reaches their node."""
        everywhere, by_output = [], {}
        for source, sources, described in self.inputs:
            value = args[source] if isinstance(source, int) else source
            if not isinstance(value, torch.Tensor):
                continue
            ref = weakref.ref(value) if value.grad_fn is not None and described is not None and \
                described[1] is None else None  # NOTE [Inputs eager saves, checked where the joint does not]
            watched = [source if isinstance(source, int) else -1, value.detach(), value._version, described, ref]
            read_after_call(watched)  # NOTE [Versions recorded inside a call, read after it]
            if sources is None:
                everywhere.append(watched)
            for j in sources or ():
                by_output.setdefault(j, []).append(watched)
        for j, watched in by_output.items():
            if j < len(outs) and isinstance(outs[j], torch.Tensor) and outs[j].requires_grad:
                outs[j].register_hook(_when_reached(_version_check(watched, "input")))
        node = _joint_node(outs) if everywhere else None
        if node is not None:
            node.register_prehook(_version_check(everywhere, "input"))

    def _words(self, k: int, out) -> tuple:
        """(eager's description of output k, a weak reference to it where eager names its node at the backward)."""
        described = self.described.get(k)
        return described, weakref.ref(out) if described is not None and not described[3] else None


def _when_reached(check):
    """A tensor hook running `check` when the backward brings the tensor a gradient: the joint's node calls
    the hooks of all its outputs when it runs, those no gradient reached with None."""
    def hook(grad):
        return None if grad is None else check(grad)
    return hook


def _version_check(watched: list, what: str = "output"):
    def check(grad_outputs):
        for k, alias, then, described, ref in watched:
            now = alias._version
            if now != then:
                if described is None:
                    raise RuntimeError(_VERSION_ERROR.format(kind=alias.type(), shape=list(alias.shape), index=k,
                                                             now=now, then=then, what=what))
                raise RuntimeError(_eager_message(alias.type(), described, ref, now, then))
        return None
    return check


# NOTE [Eager's words for a changed saved output]: eager's error names the saved tensor autograd unpacked, as
# "[type sizes], which is output <output_nr> of <forward op>" (SavedVariable::unpack: the node's
# forward_op_name, its class name without "Backward<n>"), then versions and a hint that depends on anomaly
# mode. The fake run that classifies the outputs (output_checks) sees eager's autograd graph, so it records
# for each storage the saved tensor over it that eager's backward unpacks first (the node latest in the forward:
# the engine runs the highest sequence number first): its sizes, its node's forward name and output number,
# and whether it was saved as that node's own output. The check raises eager's message with them; a tensor
# saved as another node's input (mm's, mul's) is named by eager with its node at the backward, the node of the
# in-place change (`Add`, `CopySlices`), read then from the output (a weak reference kept per call for such
# outputs only; where the program no longer holds that output at the backward, as with `out = sum(out)`
# rebinding the only name, the reference is dead and the node that made it is named, `Relu` where eager says
# `Add`: holding it strongly would tie the joint's node to its own output, a cycle through C++ autograd that
# Python's collector cannot free). A change under no_grad (`with torch.no_grad(): y.mul_(2)`) leaves the output's
# node as it was, which is then the joint's own (CompiledFunction): eager names the node that made it (`Tanh`),
# the name the fake run recorded (review revN N4). The hint is taken from eager itself (a one-time change of a saved result of exp on a
# 1-element tensor, in the current anomaly mode, warnings silenced). Where two nodes are not ordered so (other
# devices, reentrant backward) eager may name another saved tensor (the type and the versions are the same).
# Under anomaly mode eager also warns with the forward traceback of the failing node; the joint's node has none.
_EAGER_VERSION_ERROR = ("one of the variables needed for gradient computation has been modified by an inplace "
                        "operation: [{kind} {shape}], which is output {index} of {name}, is at version {now}; "
                        "expected version {then} instead. {hint}")
_EAGER_LEAF_ERROR = ("one of the variables needed for gradient computation has been modified by an inplace "
                     "operation: [{kind} {shape}] is at version {now}; expected version {then} instead. {hint}")
_HINTS: dict = {}


def _eager_message(kind: str, described: tuple, ref, now, then) -> str:
    shape, name, output_nr, _ = described
    out = ref() if ref is not None else None
    if name is None and (out is None or out.grad_fn is None):  # NOTE [A saved view of a written input]: a leaf
        return _EAGER_LEAF_ERROR.format(kind=kind, shape=shape, now=now, then=then, hint=_eager_hint())
    # saved as another node's input: its node now, unless still the joint's own (changed under no_grad)
    if out is not None and out.grad_fn is not None and out.grad_fn.name() not in _JOINT_NODES:
        name, output_nr = _forward_name(out.grad_fn), out.output_nr
    return _EAGER_VERSION_ERROR.format(kind=kind, shape=shape, index=output_nr, name=name, now=now, then=then,
                                       hint=_eager_hint())


def _eager_hint() -> str:
    import warnings
    anomaly = torch.is_anomaly_enabled()
    if anomaly not in _HINTS:
        _HINTS[anomaly] = "Hint: enable anomaly detection"
        with warnings.catch_warnings(), grad_mode(True), torch.autograd.set_detect_anomaly(anomaly):
            warnings.simplefilter("ignore")
            y = torch.ones(1, requires_grad=True).exp()
            y.add_(1)
            try:
                y.backward()
            except RuntimeError as e:
                text = str(e)
                _HINTS[anomaly] = text[text.index("Hint:"):] if "Hint:" in text else ""
    return _HINTS[anomaly]


def eager_words(exc: RuntimeError, described: dict, refs: dict) -> RuntimeError | None:
    """Autograd's version error on a lean joint's saved output (`described`, `refs`: by the Function's return
    index), in eager's words (NOTE [Eager's words for a changed saved output]), or None where it names none."""
    import re
    found = re.search(r"\], which is output (\d+) of \w+, is at version (\d+); expected version (\d+) instead",
                      str(exc))
    if found is None or int(found.group(1)) not in described:
        return None
    index = int(found.group(1))
    kind = str(exc).split("[", 1)[1].split(" ", 1)[0]
    return RuntimeError(_eager_message(kind, described[index], refs.get(index), found.group(2), found.group(3)))


def _forward_name(node) -> str:
    import re
    return re.sub(r"Backward\d*$", "", node.name())


def _same_storage(a, b) -> bool:
    """`a` and `b` share memory (an unpacked saved output is another tensor object over the same storage)."""
    return isinstance(a, torch.Tensor) and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr() \
        and a.untyped_storage().nbytes() > 0


def _saved_by_the_joint(outs) -> tuple:
    """The tensors AOT autograd's joint node saved for its backward (read before any change: no error)."""
    node = _joint_node(outs)
    try:
        return tuple(node.saved_tensors) if node is not None else ()
    except RuntimeError:  # already freed or not unpackable: nothing to compare
        return ()


def _joint_node(outs):
    """The joint's autograd node: the grad_fn of an output requiring grad or a few steps above it (an
    output regenerated as a view of an intermediate)."""
    frontier = [o.grad_fn for o in outs if isinstance(o, torch.Tensor) and o.grad_fn is not None]
    for _ in range(4):
        following = []
        for node in frontier:
            if type(node).__name__ in _JOINT_NODES:
                return node
            following.extend(n for n, _ in node.next_functions if n is not None)
        frontier = following
    return None


def output_checks(flat_gm: torch.fx.GraphModule, args: list) -> OutputChecks | None:
    """Run `flat_gm` on fake copies of `args` and its weights with autograd on and classify its outputs."""
    return examine(flat_gm, args)[0]


def examine(flat_gm: torch.fx.GraphModule, args: list) -> tuple:
    """(output_checks' result, the positions of the inputs whose storage eager's autograd saves, in AOT
    autograd's order: weights, then `args`; NOTE [Inputs eager does not save stay unsaved] in joint.py)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.multiprocessing.reductions import StorageWeakRef

    from .joint_unreached import gradient_edges, partial_reach
    from .torch_methods import original_api_functions, original_tensor_methods

    mode = FakeTensorMode(allow_non_fake_inputs=True)  # tensor constants of the graph
    state = {**dict(flat_gm.named_parameters(remove_duplicate=False)),
             **dict(flat_gm.named_buffers(remove_duplicate=False))}
    with mode:
        fake_state = {name: mode.from_tensor(t) for name, t in state.items()}
        fake_args = [mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args]
    with mode, grad_mode(True), original_tensor_methods(), original_api_functions(flat_gm):
        # NOTE [Graph modules called through forward] (onnxrt/lowering.py): functional_call calls the module,
        # which ran the user's global module hooks (register_module_forward_pre_hook) on framejit's GraphModule
        from torch.nn.utils.stateless import _reparametrize_module
        fake_inputs = [*fake_args, *fake_state.values()]
        before = [t._version if isinstance(t, torch.Tensor) else None for t in fake_inputs]
        edges = gradient_edges([*fake_state.values(), *fake_args])  # NOTE [Inputs no backward reaches]
        with _reparametrize_module(flat_gm, fake_state, tie_weights=True):
            outs = flat_gm.forward(*fake_args)
        outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
        written = [(t, source) for t, then, source in zip(fake_inputs, before, [*range(len(args)), *state.values()])
                   if isinstance(t, torch.Tensor) and t._version != then]

        def storage(t):
            return StorageWeakRef(t.untyped_storage())
        inputs = {storage(t) for t in [*fake_state.values(), *fake_args] if isinstance(t, torch.Tensor)}
        saved_by: dict = {}  # node -> storages it saved
        differentiable = [j for j, o in enumerate(outs) if isinstance(o, torch.Tensor) and o.grad_fn is not None]
        described: dict = {}  # storage -> (sizes, forward name, output number): NOTE [Eager's words for a ...]
        reach = {j: _saved_below(outs[j].grad_fn, saved_by, storage, described) for j in differentiable}
        saved = set().union(*reach.values())
        kept, reached_from = [], []
        for k, out in enumerate(outs):
            if not isinstance(out, torch.Tensor) or storage(out) in inputs:
                continue
            if storage(out) in saved:  # NOTE [Checks where eager's backward reaches]
                sources = tuple(j for j in differentiable if storage(out) in reach[j])
                alone = not out._is_view() and sum(1 for o in outs if isinstance(o, torch.Tensor)
                                                   and storage(o) == storage(out)) == 1
                if len(sources) == len(differentiable) or not alone:
                    kept.append(k)
                else:
                    reached_from.append((k, sources))
        unreached = partial_reach(edges, outs, [(len(state) + k, t) for t, k in written if isinstance(k, int)],
                                  len(state), saved_by)
        multiple_views, no_grad_views = _view_kinds(outs, inputs, storage)  # after the walks (rebases history)
        written_saved = _written_and_saved(written, differentiable, reach, storage, described)
        eager_saved = _eager_saved_inputs([*fake_state.values(), *fake_args], [*state.values(), *range(len(args))],
                                          {id(fake) for fake, _ in written}, differentiable, reach, storage, described)
    if not (kept or multiple_views or no_grad_views or reached_from or written_saved or unreached):
        return None, eager_saved
    checked = [*kept, *(k for k, _ in reached_from)]
    return OutputChecks(tuple(kept), tuple(multiple_views), tuple(no_grad_views), tuple(reached_from),
                        {k: described[storage(outs[k])][1:5] for k in checked if storage(outs[k]) in described},
                        written_saved, unreached), eager_saved


def _view_kinds(outs: list, inputs: set, storage) -> tuple:
    """(outputs eager forbids to change as outputs of a function returning several views, as views made under
    no_grad): a change of each view output is tried (it rebases the output's history)."""
    multiple_views, no_grad_views = [], []
    for k, out in enumerate(outs):
        if not isinstance(out, torch.Tensor) or storage(out) in inputs or not out._is_view():
            continue
        try:
            out.copy_(out.detach().clone())
        except RuntimeError as exc:
            if "returns multiple views" in str(exc):
                multiple_views.append(k)
            elif "no_grad mode" in str(exc):
                no_grad_views.append(k)
            else:
                logs.log("output_code", "joint: output %d cannot change in place in eager (%s); not "
                         "reproduced", k, str(exc).split(".")[0])
    return multiple_views, no_grad_views


# NOTE [Inputs the graph writes, saved by eager]
# An input the graph writes in place (`h.mul_(w)` on an activation passed in, or a weight under no_grad)
# and that eager's autograd saves after the write (`h.sin()` saves h) ties eager's backward to h's version
# counter: a change of h by the user between the forward and the backward raises "one of the variables
# needed for gradient computation has been modified by an inplace operation". The joint's forward computes
# the new value as a fresh tensor and saves that one (AOT autograd then writes it into h with `copy_`, or the
# graph does under no_grad), so nothing watched h and the backward ran on the value from before the user's
# change. The fake run records the inputs (arguments by index, weights as themselves) whose version moved
# and whose storage a node of eager's graph saved, with the outputs from whose backward that node is reached
# (None: all of them); each call then keeps their versions after the call and a check raises eager's error
# where eager's backward would (on the joint's node, or through hooks on the outputs as in NOTE [Checks where
# eager's backward reaches]). Cost per call: only joints with such an input pay, a detach and a hook each.
# NOTE [A saved view of a written input]: where eager saved a view of the input as another node's input (`lin(x)`
# saves `weight.t()` for x's gradient), the view's node at the backward is not the one that made it: the input's
# version moved since the view was made, so autograd remakes the view's node, AsStridedBackward0, and eager's
# error names "output 0 of AsStrided" (review revO HIGH-1's program with a user write before the backward).
# A leaf saved itself (`x * W`) has no node: eager's error then names none ("[torch.FloatTensor [4]] is at
# version 4; ..."), so does the check's (no name recorded).
def _written_and_saved(written: list, differentiable: list, reach: dict, storage, described: dict) -> tuple:
    found = []
    for fake, source in written:
        entry = _input_entry(fake, source, differentiable, reach, storage, described, True)
        if entry is not None:
            found.append(entry)
    return tuple(found)


def _input_entry(fake, source, differentiable: list, reach: dict, storage, described: dict, written: bool):
    """(source, the outputs whose backward reaches a node saving `fake`'s storage or None for all, eager's words
    for it) or None where no node saves it (NOTE [Inputs the graph writes, saved by eager])."""
    reached = tuple(j for j in differentiable if storage(fake) in reach[j])
    if not reached:
        return None
    words = described.get(storage(fake))
    if words is not None and words[5] and not words[4]:  # NOTE [A saved view of a written input]
        words = words[:2] + ("AsStrided", 0)
    elif (words is None and fake.requires_grad and fake.grad_fn is None) or not written:  # the input itself
        words = (None, list(fake.shape), None, None)  # (a node of an input not written: its node at the backward)
    return (source, None if len(reached) == len(differentiable) else reached,
            words[1:4] + (True,) if words is not None else None)


# NOTE [Inputs eager saves, checked where the joint does not]
# Eager's autograd saves some inputs that a joint's backward never reads: convolution's node saves its weight
# (and input) whatever needs a gradient, native_batch_norm's saves the running statistics in train mode, while
# the joint computes the weight's gradient without the weight and decomposes batch norm (NOTE [Batch norm in
# training graphs]). A write of such an input between the forward and the backward (`with torch.no_grad():
# conv.weight.mul_(0.9)`, `bn.running_mean.zero_()`) raised "one of the variables needed for gradient
# computation has been modified by an inplace operation" in eager, where the joint trained silently on
# (review revR MED-1/2). The fake run records every input whose storage eager's autograd saves
# (`_eager_saved_inputs`: position in AOT autograd's order -> the entry of NOTE [Inputs the graph writes,
# saved by eager], None for the inputs the graph writes, which that NOTE checks already); once the joint is
# partitioned, the inputs its forward saves itself (or a view of) are dropped (autograd checks those), and the
# others are checked on each call as written inputs are: their version after the call, compared where eager's
# backward reaches the saving node (with_saved_input_checks). Eager's words: a leaf or a tensor
# without a node is named by none ("[torch.FloatTensor [4]] is at version 1; expected version 0 instead"); an
# activation passed in is named by its node at the backward (a weak reference kept per call).



def with_saved_input_checks(checks, eager_saved: dict | None, record: dict, inputs: int):
    """`checks` (made where None) also checking the inputs eager saves and the joint's forward does not (all of
    them where the partition was not seen: a loaded joint, inputs deduplicated by AOT autograd): NOTE [Inputs
    eager saves, checked where the joint does not]. `record`: what joint._partition saw."""
    if not eager_saved:
        return checks
    joint_saved = record.get("saved_inputs", ()) if record.get("primals") == inputs else ()
    entries = tuple(entry for k, entry in eager_saved.items() if entry is not None and k not in joint_saved)
    if not entries:
        return checks
    checks = checks if checks is not None else OutputChecks((), (), ())
    checks.add_inputs(entries)
    return checks


def _eager_saved_inputs(fakes: list, sources: list, written: set, differentiable: list, reach: dict, storage,
                        described: dict) -> dict:
    found = {}
    for k, (fake, source) in enumerate(zip(fakes, sources)):
        if isinstance(fake, torch.Tensor):
            entry = _input_entry(fake, source, differentiable, reach, storage, described, id(fake) in written)
            if entry is not None:
                found[k] = None if id(fake) in written else entry
    return found


def _saved_below(root, saved_by: dict, storage, described: dict) -> set:
    """The storages saved by `root` and every autograd node below it (`saved_by` memoises per node)."""
    found, seen, stack = set(), set(), [root]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if node not in saved_by:
            values = []
            for name in dir(node):
                if name.startswith("_saved_"):
                    try:
                        values.append(getattr(node, name))
                    except Exception:  # a value autograd cannot unpack here
                        continue
            try:
                values.append(getattr(node, "saved_tensors", ()))
            except Exception:
                pass
            tensors = [v for v in pytree.tree_leaves(values) if isinstance(v, torch.Tensor)]
            saved_by[node] = {storage(v) for v in tensors}
            order = node._sequence_nr()  # eager's backward runs the latest node first
            for v in tensors:
                if v.grad_fn is not None and described.get(storage(v), (-1,))[0] < order:
                    as_output = v.grad_fn._sequence_nr() == order and v.grad_fn.name() == node.name()
                    described[storage(v)] = (order, list(v.shape), _forward_name(v.grad_fn), v.output_nr, as_output,
                                             v._is_view())
        found |= saved_by[node]
        stack.extend(n for n, _ in node.next_functions if n is not None)
    return found

