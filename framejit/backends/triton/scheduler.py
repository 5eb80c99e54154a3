"""Fusion scheduler: groups IR nodes into kernels over a networkx DAG, and orders the steps.

A `FusedGroup` becomes one Triton kernel. It iterates either over `numel` elements (pointwise group)
or over `xnumel` rows times `rnumel` reduced elements (reduction group, defined by its *anchor*
reduction). Inside a group, a member read by another member is never stored and reloaded: a
pointwise member is recomputed (inlined) at the index the reader needs, and a reduction member is
read from the register that holds its row result. A member is stored only when something outside the
group (another kernel, an extern, the graph output) reads it.

# NOTE [Fusion rules]
Producer -> consumer pairs are visited in graph order and their groups merged when
1. the iteration spaces agree: pointwise groups of the same numel ("pointwise chain"); a pointwise
   node whose shape is the anchor's input shape (xr space: "prologue"/"epilogue") or whose numel is
   the anchor's row count (x space: "row epilogue"); reductions with the same input shape and reduced
   dims ("sibling reduction");
2. every read of a member reduction is at the row the kernel is computing (`natural_coords`): never
   recompute a reduction, never read another program's row;
3. the merge creates no cycle between groups (no path a -> other -> b).
Extern matmul epilogues: a pointwise group that is the only reader of an mm/bmm/addmm/conv result,
reads it element for element and stores one node of the same shape and dtype writes that node in
place into the extern's buffer (no extra allocation). Every decision is logged on the `fusion` log.
"""
from __future__ import annotations

import dataclasses
import math

import networkx as nx

from framejit import logs

from . import ir
from .ir import ExternNode, InputNode, PointwiseNode, ReductionNode

MATMUL_LIKE = ("mm", "bmm", "addmm", "baddbmm", "convolution")


@dataclasses.dataclass
class FusedGroup:
    id: int
    nodes: list  # PointwiseNodes and ReductionNodes in graph order
    anchor: ReductionNode | None
    numel: int  # pointwise: elements; reduction group: rows (xnumel)
    stores: list = dataclasses.field(default_factory=list)
    inplace: dict = dataclasses.field(default_factory=dict)  # stored node -> buffer it writes into
    name: str = ""

    @property
    def xnumel(self) -> int:
        return self.anchor.xnumel if self.anchor else self.numel

    @property
    def rnumel(self) -> int:
        return self.anchor.rnumel if self.anchor else 1

    @property
    def members(self) -> dict:
        return {n.name: n for n in self.nodes}


@dataclasses.dataclass
class Schedule:
    graph: ir.Graph
    steps: list  # FusedGroup | ExternNode, in execution order
    decisions: list  # human-readable fusion decisions
    kept_apart: set = dataclasses.field(default_factory=set)  # (producer, consumer) pairs not fused


# -- kernel index space (shared with codegen) -----------------------------------------------------


def xindex(group: FusedGroup) -> ir.Var:
    return ir.Var("xindex", group.xnumel)


def rindex(group: FusedGroup) -> ir.Var:
    return ir.Var("rindex", group.rnumel)


def space_of(node, anchor: ReductionNode | None) -> str | None:
    """Where `node` lives in a reduction group of `anchor`: 'reduction', 'xr', 'x' or None."""
    if anchor is None:
        return "x"
    if isinstance(node, ReductionNode):
        same = node.input_shape == anchor.input_shape and node.reduced_dims == anchor.reduced_dims
        return "reduction" if same else None
    if tuple(node.shape) == tuple(anchor.input_shape):
        return "xr"
    return "x" if math.prod(node.shape) == anchor.xnumel else None


def anchor_coords(red: ReductionNode, x: ir.Index, r: ir.Index) -> list:
    kept = [s for d, s in enumerate(red.input_shape) if d not in red.reduced_dims]
    reduced = [red.input_shape[d] for d in red.reduced_dims]
    kc, rc = iter(ir.delinearize(x, kept)), iter(ir.delinearize(r, reduced))
    return [next(rc) if d in red.reduced_dims else next(kc) for d in range(len(red.input_shape))]


def node_env(node, group: FusedGroup) -> dict:
    """The node's loop variables expressed in the kernel's xindex / rindex."""
    space = space_of(node, group.anchor)
    if space in ("reduction", "xr"):
        coords = anchor_coords(group.anchor, xindex(group), rindex(group))
    else:
        coords = ir.delinearize(xindex(group), node.shape)
    return {f"i{k}": c for k, c in enumerate(coords)}


def natural_coords(red: ReductionNode, group: FusedGroup) -> list:
    return ir.delinearize(xindex(group), red.shape)


def resolved_loads(group: FusedGroup, visit) -> str | None:
    """Walk every memory read and member read of the group as codegen will, inlining pointwise
    members; `visit(load, index)` is called for reads of non-members. Returns why the group is
    illegal (a reduction member read at another row), or None."""
    members = group.members
    seen: set = set()

    def walk(value, env):
        for load in ir.loads_of(value):
            index = [ir.substitute(e, env) for e in load.index]
            member = members.get(load.buffer)
            if isinstance(member, ReductionNode):
                if [ir.render(i) for i in index] != [ir.render(c) for c in natural_coords(member, group)]:
                    return f"{load.buffer} would be read at another row"
            elif member is not None:
                key = (load.buffer, tuple(ir.render(i) for i in index))
                if key not in seen:
                    seen.add(key)
                    why = walk(member.body, {f"i{k}": c for k, c in enumerate(index)})
                    if why:
                        return why
            else:
                visit(load, index)
        return None

    for node in group.nodes:
        why = walk(node.body, node_env(node, group))
        if why:
            return why
    return None


# -- the scheduler ----------------------------------------------------------------------------------


# NOTE [Fusions kept apart at every probe]: fusion decides on concrete sizes: `x.split([n // 2, n - n // 2], 1)`
# then both halves summed fuses the two sums as siblings where n is even (equal rows) and keeps them apart
# where n is odd, so a size-generic module's probes (dynamic.py) got kernels of different structure and the
# graph compiled per width (6 modules over 6 widths; stock torch.compile 1). dynamic.py generates the probes
# again with every (producer, consumer) pair that some probe kept apart in `KEEP_APART`, which keeps them
# apart at every size: a fusion left out is valid at every size (one kernel more), a fusion taken where
# sizes happen to agree is not.
KEEP_APART: set = set()


class Scheduler:
    def __init__(self, graph: ir.Graph):
        self.graph = graph
        self.buffers = graph.buffers()
        self.externs = {n.name: n for n in graph.nodes if isinstance(n, ExternNode)}
        self.order = {n.name: k for k, n in enumerate(graph.nodes)}
        self.owner: dict = {}  # buffer name -> DAG key (group id or extern name)
        self.groups: dict = {}
        self.dag = nx.DiGraph()
        self.decisions: list = []
        self.kept_apart: set = set()  # (producer, consumer) pairs not fused
        self.consumers: dict = {}

    def run(self) -> Schedule:
        self._build()
        self._fuse()
        self._plan_stores()
        self._matmul_epilogues()
        steps = [self.groups[key] if key in self.groups else self.externs[key] for key in self._order()]
        for k, step in enumerate(s for s in steps if isinstance(s, FusedGroup)):
            step.name = f"triton_{'red' if step.anchor else 'poi'}_{k}"
        for line in self.decisions:
            logs.log("fusion", "%s", line)
        return Schedule(self.graph, steps, self.decisions, self.kept_apart)

    def _build(self) -> None:
        for node in self.graph.nodes:
            if isinstance(node, InputNode):
                continue
            key = node.name
            if isinstance(node, ExternNode):
                for out in node.outputs:
                    self.owner[out.name] = key
            else:
                key = len(self.groups)
                anchor = node if isinstance(node, ReductionNode) else None
                numel = anchor.xnumel if anchor else math.prod(node.shape)
                self.groups[key] = FusedGroup(key, [node], anchor, numel)
            self.owner[node.name] = key
            self.dag.add_node(key, first=self.order[node.name])
            for buf in ir.reads(node):
                self.consumers.setdefault(buf, []).append(node.name)
                if buf in self.owner:
                    self.dag.add_edge(self.owner[buf], key)
            if isinstance(node, ExternNode):  # in-place writes run after every earlier reader
                for buf in node.mutates:
                    for reader in self.consumers.get(buf, []):
                        if self.owner.get(reader) not in (None, key):
                            self.dag.add_edge(self.owner[reader], key)

    def _fuse(self) -> None:
        for node in self.graph.nodes:
            if not isinstance(node, (PointwiseNode, ReductionNode)):
                continue
            for producer in ir.reads(node):
                a, b = self.owner.get(producer), self.owner[node.name]
                if a is None or a == b or a not in self.groups:
                    continue
                ok, why = self._can_merge(self.groups[a], self.groups[b])
                if ok and (producer, node.name) in KEEP_APART:  # NOTE [Fusions kept apart at every probe]
                    ok, why = False, "kept apart at other sizes of a size-generic module"
                verdict = "fuse" if ok else "keep apart"
                self.decisions.append(f"{verdict} {producer} -> {node.name}: {why}")
                if not ok:
                    self.kept_apart.add((producer, node.name))
                if ok:
                    self._merge(a, b)

    def _can_merge(self, ga: FusedGroup, gb: FusedGroup) -> tuple[bool, str]:
        anchors = [g.anchor for g in (ga, gb) if g.anchor is not None]
        if not anchors and ga.numel != gb.numel:
            return False, f"different sizes ({ga.numel} vs {gb.numel})"
        anchor = anchors[0] if anchors else None
        nodes = sorted(ga.nodes + gb.nodes, key=lambda n: self.order[n.name])
        spaces = {n.name: space_of(n, anchor) for n in nodes}
        misfit = [name for name, s in spaces.items() if s is None]
        if misfit:
            return False, f"{misfit[0]} does not fit the rows of {anchor.name} ({anchor.xnumel}x{anchor.rnumel})"
        if self._creates_cycle(ga.id, gb.id) or self._creates_cycle(gb.id, ga.id):
            return False, "would create a cycle through another kernel"
        trial = FusedGroup(ga.id, nodes, anchor, anchor.xnumel if anchor else ga.numel)
        why = resolved_loads(trial, lambda load, index: None)
        if why:
            return False, why
        return True, self._kind(ga, gb, spaces)

    @staticmethod
    def _kind(ga: FusedGroup, gb: FusedGroup, spaces: dict) -> str:
        if ga.anchor and gb.anchor:
            return "sibling reductions over the same rows"
        if ga.anchor:
            return "reduction epilogue over the same rows"
        if gb.anchor:
            return "reduction prologue (inlined into the reduction loop)"
        return f"pointwise chain of {ga.numel} elements"

    def _creates_cycle(self, a, b) -> bool:
        return any(s != b and nx.has_path(self.dag, s, b) for s in self.dag.successors(a))

    def _merge(self, a, b) -> None:
        ga, gb = self.groups[a], self.groups.pop(b)
        ga.nodes = sorted(ga.nodes + gb.nodes, key=lambda n: self.order[n.name])
        ga.anchor = ga.anchor or gb.anchor
        ga.numel = ga.anchor.xnumel if ga.anchor else ga.numel
        for n in gb.nodes:
            self.owner[n.name] = a
        for p in list(self.dag.predecessors(b)):
            if p != a:
                self.dag.add_edge(p, a)
        for s in list(self.dag.successors(b)):
            if s != a:
                self.dag.add_edge(a, s)
        self.dag.nodes[a]["first"] = min(self.dag.nodes[a]["first"], self.dag.nodes[b]["first"])
        self.dag.remove_node(b)

    def _output_buffers(self) -> set:
        return {ref.buffer for ref in self.graph.output_refs if hasattr(ref, "buffer")}

    def _plan_stores(self) -> None:
        outputs = self._output_buffers()
        for group in self.groups.values():
            for node in group.nodes:
                outside = [c for c in self.consumers.get(node.name, []) if self.owner[c] != group.id]
                if node.name in outputs or outside:
                    group.stores.append(node.name)

    def _matmul_epilogues(self) -> None:
        outputs = self._output_buffers()
        for group in self.groups.values():
            if group.anchor is not None or len(group.stores) != 1:
                continue
            stored = group.members[group.stores[0]]
            for buf in dict.fromkeys(b for n in group.nodes for b in ir.reads(n)):
                extern = self.externs.get(self.owner.get(buf))
                if not isinstance(extern, ExternNode) or buf in outputs:
                    continue
                if self._reuses(group, stored, extern, buf):
                    group.inplace[stored.name] = buf
                    self.decisions.append(f"matmul epilogue: {stored.name} is computed in place into {buf} "
                                          f"({extern.op} result read once, element for element)")
                    break

    def _reuses(self, group: FusedGroup, stored, extern: ExternNode, buf: str) -> bool:
        name = getattr(getattr(extern.op, "overloadpacket", None), "__name__", "")
        out = self.buffers[buf]
        if name not in MATMUL_LIKE or len(extern.outputs) != 1:
            return False
        if any(self.owner[c] != group.id for c in self.consumers.get(buf, [])):
            return False
        if out.shape != tuple(stored.shape) or out.dtype != stored.dtype or out.strides != ir.contiguous_strides(out.shape):
            return False
        offsets = []
        resolved_loads(group, lambda load, index: offsets.append(
            ir.render(ir.linearize(index, out.shape))) if load.buffer == buf else None)
        return bool(offsets) and all(o == "xindex" for o in offsets)

    def _order(self) -> list:
        return list(nx.lexicographical_topological_sort(self.dag, key=lambda k: self.dag.nodes[k]["first"]))


def schedule(graph: ir.Graph) -> Schedule:
    return Scheduler(graph).run()


def describe(sched: Schedule) -> str:
    """A readable summary of the steps, for the output_code log and dumps."""
    lines = []
    for step in sched.steps:
        if isinstance(step, FusedGroup):
            what = ", ".join(f"{n.name}={n.origin}" for n in step.nodes)
            lines.append(f"{step.name}: {len(step.nodes)} nodes [{what}] stores {step.stores}"
                         + (f" in place {step.inplace}" if step.inplace else ""))
        else:
            lines.append(f"extern {step.name}: {step.op} ({step.reason})")
    return "\n".join(lines)
