"""Partitioning a graph for a composite target (DESIGN §4).

:func:`partition_graph` takes a typed graph (in the model's NCHW layout) and
the target's backends in priority order, and returns the host graph in which
every offloaded region is a ``call`` node (``compiler=<backend>``) whose body
is the region, in the backend's layout, with fused patterns as nested
``call`` nodes (``composite=<backend>.<pattern>``). Steps:

1. **Views.** For every layout a backend declares, the graph converted to that
   layout (:func:`accel.passes.layout.layout_view`): patterns and checks see
   the nodes exactly as that backend will receive them.
2. **Assignment.** Backends in priority order; for each, its pattern table is
   tried at every unclaimed node, from the outputs back (so the longest
   pattern rooted at a node wins), composites claimed whole; then its per-op
   checks claim single nodes. Every refusal is kept as a reason.
3. **Regions.** A Kahn traversal of the units (composites and single nodes)
   that keeps taking ready units of the current backend and only switches
   when none is left: each region is a contiguous run of one topological
   order, so no region can reach itself through the outside (no cycle), in
   O(n log n).
4. **Profitability.** A region that only moves data, or whose boundary copies
   outweigh its work (per backend, overridable in the target), goes back:
   its nodes are offered to the next backends, then the host.
5. **Layout.** Region inputs and outputs get host transposes from and to the
   model's layout; a transpose back followed by its inverse cancels, so two
   adjacent NHWC regions exchange NHWC tensors directly. A region of
   elementwise ops only whose inputs arrive in the model's layout is built in
   that layout (:meth:`_Partitioner._region_layout`).
6. **Report** (:mod:`accel.report`): where each node runs, and why each
   backend before it declined.

Requires a typed graph in topological order; the input graph is not modified.
"""

from __future__ import annotations

import bisect
import heapq
import re
import time
from collections import defaultdict
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from functools import cache, partial
from types import MappingProxyType
from typing import TypeVar, cast

from accel.backend import Backend, PatternEntry, RegionInfo, count_work
from accel.errors import AccelError, PartitionError
from accel.ir import CALL_OP, Graph, Node, TensorType, Value, collector_paused, freeze_attrs
from accel.ops.registry import Layout, get_op
from accel.passes._rewrite import identity_perm, permuted_type
from accel.passes.dce import remove_dead_nodes
from accel.passes.layout import contiguous_constants, layout_view
from accel.pattern import LABELS_ATTR, Match, MatchFailure, PatternMatcher, composite_labels
from accel.report import HOST, NodeReport, PartitionReport, Report

Perm = tuple[int, ...]
_VALUE_NAME = re.compile(r"%([^\s,()']+)")  # a value named in a pattern's failure reason
Progress = Callable[[str], None]
#: The reason given for a node a backend was forbidden (``partition_graph(..., forbid=...)``).
FORBIDDEN = "placed elsewhere by tuning (accel compile --tune)"


@dataclass
class PartitionResult:
    """The host graph (offloaded regions as ``call`` nodes) and the report."""

    graph: Graph
    report: Report

    @property
    def regions(self) -> list[Node]:
        return [n for n in self.graph.nodes if n.op == CALL_OP and "compiler" in n.attrs]


def partition_graph(
    graph: Graph,
    backends: Sequence[Backend],
    *,
    layout: str = "NCHW",
    materialize: bool = True,
    forbid: Mapping[str, Collection[str]] | None = None,
) -> PartitionResult:
    """Partition ``graph`` for ``backends`` (priority order). See the module docstring.

    ``layout`` is the layout of the graph's 4-D tensors. With ``materialize``
    off, re-laid-out weights in region bodies stay transposed views (call
    :func:`accel.passes.layout.contiguous_constants` before serializing).
    ``forbid`` maps a backend's name to names of nodes it may not take (they
    go to the next backends, then the host, with the reason "placed elsewhere
    by tuning"): how :mod:`accel.tune` expresses a placement.
    """
    t0 = time.perf_counter()
    host, report = _partition(graph, backends, layout, graphs=True, forbid=forbid)
    assert host is not None
    result = PartitionResult(host, report)
    if materialize:
        for region in result.regions:
            assert region.body is not None
            contiguous_constants(region.body)
    report.timings["partition"] = time.perf_counter() - t0
    return result


def partition_report(
    graph: Graph,
    backends: Sequence[Backend],
    *,
    layout: str = "NCHW",
    forbid: Mapping[str, Collection[str]] | None = None,
) -> Report:
    """The report :func:`partition_graph` gives, without building the partitioned graph.

    The same decisions, regions and boundary transposes (what ``accel inspect``
    shows), but no region body, ``call`` node or host copy is made: the
    report equals ``partition_graph(graph, backends, layout=layout).report``
    but for its timings.
    """
    t0 = time.perf_counter()
    _, report = _partition(graph, backends, layout, graphs=False, forbid=forbid)
    report.timings["partition"] = time.perf_counter() - t0
    return report


def _partition(
    graph: Graph,
    backends: Sequence[Backend],
    layout: str,
    *,
    graphs: bool,
    forbid: Mapping[str, Collection[str]] | None = None,
) -> tuple[Graph | None, Report]:
    names = [b.name for b in backends]
    if len(set(names)) != len(names):
        raise PartitionError(f"a backend is listed twice in the target: {', '.join(names)}")
    with collector_paused():
        p = _Partitioner(graph, list(backends), layout)
        if forbid:
            p.forbid(forbid)
        p.run()
        # a dead node takes its boundary transposes with it, which only the built graph shows
        return p.build(graphs=graphs or p.has_dead_nodes())


class _Partitioner:
    def __init__(self, graph: Graph, backends: list[Backend], layout: str):
        self.graph = graph
        self.backends = backends
        self.layout = layout
        self.nodes = graph.nodes
        n = len(self.nodes)
        self.index = {node.name: i for i, node in enumerate(self.nodes)}
        if len(self.index) != n:
            graph.lint(check_types=False)  # names a duplicate
        # The host copy, made when a backend of the model's layout needs it as its view
        # (its regions take their nodes from it); otherwise host nodes are copied one by one.
        self._host: Graph | None = None
        # layout -> (the view, its node for each node index (None where it has none), origin)
        self.views: dict[str, tuple[Graph, list[Node | None], dict[Value, tuple[str, Perm]]]] = {}
        self.tables = [_pattern_table(b) for b in backends]
        # per backend: whether it speaks of transpose (then region inputs it takes in another layout
        # are transposed in its body: _Build._inner_transpose)
        self._transposes = ["transpose" in _op_checks(b) for b in backends]
        # per backend: the ops its runtime converts at a partition's edges (Backend.edge_ops); a
        # backend whose transposes are edge conversions takes its inputs' layout transposes as such
        self._edge_ops = [_edge_ops(b) for b in backends]
        self._transpose_check = [
            b.check_op if "transpose" in _op_checks(b) or "transpose" not in edge else b.check_edge
            for b, edge in zip(backends, self._edge_ops, strict=True)
        ]
        self._transposes = [t or "transpose" in edge for t, edge in zip(self._transposes, self._edge_ops, strict=True)]
        self.edges: dict[int, str] = {}  # node index -> "input" / "output": an edge conversion, by the last assign
        for b in backends:
            if b.layout == layout:
                self._host_view()
            elif b.layout not in self.views:
                view, origin = layout_view(graph, b.layout)
                aligned: list[Node | None] = [None] * n
                for nd in view.nodes:  # (the transposes it adds have fresh names: not in the index)
                    i = self.index.get(nd.name)
                    if i is not None:
                        aligned[i] = nd
                self.views[b.layout] = (view, aligned, origin)
        # node index -> {backend: why it declined the node}, made when a first reason is given
        self.reasons: defaultdict[int, dict[str, str]] = defaultdict(dict)
        # pattern by pattern, for nodes whose reason speaks of the node instead (NodeReport.details)
        self.details: defaultdict[int, dict[str, str]] = defaultdict(dict)
        self.call_attrs = [freeze_attrs({"compiler": b.name}) for b in backends]  # a region call's, per backend
        self.banned: list[set[int]] = [set() for _ in backends]  # per backend: node indices it may not take
        self.work: list[tuple[int, int] | None] = [None] * n  # by node index: (operations, MACs), computed once
        # (its keys name attribute mappings and types by id: those of the graph's nodes, alive while it is
        # partitioned)
        self._work_memo: dict[tuple[object, ...], tuple[int, int]] = {}
        self.graph_outputs = set(graph.outputs)
        # producers and readers by node index, for the unit graph and region boundaries, in one
        # sweep (the nodes are in topological order: a value's producer comes before its readers);
        # readers only serve regions' boundaries, which need a backend
        producer: dict[Value, int] = {}
        users: dict[Value, list[int]] = {}
        deps: list[list[int]] = []
        read = [False] * n  # by node index: whether a node of the graph reads one of its outputs
        late = False
        with_users = bool(backends)
        for i, node in enumerate(self.nodes):
            # (a node reading a value twice lists its producer twice: harmless where deps are read)
            mine = []
            for v in node.inputs:
                j = producer.get(v)
                if j is not None:
                    mine.append(j)
                    read[j] = True
                elif v.producer is not None:
                    late = True  # produced later (out of order) or outside the graph
                if with_users:
                    found = users.get(v)
                    if found is None:
                        users[v] = [i]
                    else:
                        found.append(i)
            deps.append(mine)
            for v in node.outputs:
                producer[v] = i
        if late:  # the unit graph must see every edge, so that form_regions finds a cycle
            deps = [[producer[v] for v in node.inputs if v in producer] for node in self.nodes]
            for d in deps:
                for j in d:
                    read[j] = True
        self._read = read
        self.producer, self.users, self.deps = producer, users, deps

    def forbid(self, forbid: Mapping[str, Collection[str]]) -> None:
        """Ban backends from nodes (by name) before assignment; unknown names are ignored."""
        for b, backend in enumerate(self.backends):
            for name in forbid.get(backend.name, ()):
                i = self.index.get(name)
                if i is not None:
                    self.banned[b].add(i)
                    self.reasons[i][backend.name] = FORBIDDEN

    @property
    def host(self) -> Graph:
        """A copy of the input graph, for views in the model's layout (made on first use)."""
        if self._host is None:
            self._host = self.graph.copy()
        return self._host

    # -- steps 2-4 ------------------------------------------------------------------------
    def run(self) -> None:
        for _round in range(len(self.backends) + 2):
            self.assign()
            self.form_regions()
            rejected = self.profitability()
            if not rejected:
                return
        # every backend had its chance; what is still unprofitable stays on the host
        self.form_regions()
        self.profitability(final=True)

    def assign(self) -> None:
        n = len(self.nodes)
        self.owner = [-1] * n
        self.unit = list(range(n))
        self.composite: dict[int, str] = {}  # unit id (its root's index) -> "<backend>.<pattern>"
        self.members: dict[int, list[int]] = {}  # unit id -> node indices of a composite
        self.labels: dict[int, tuple[tuple[object, ...], ...]] = {}  # unit id -> its pattern labels
        for b, backend in enumerate(self.backends):
            view, vnodes, _ = self.views[backend.layout]
            table = self.tables[b]
            if table:
                self._claim_composites(b, backend, table, view, vnodes)
            banned, owner, check_op = self.banned[b], self.owner, backend.check_op
            for i in range(n):
                if owner[i] < 0 and i not in banned:
                    node = vnodes[i]
                    if node is None:
                        continue
                    try:  # (as _call_check, without a partial per node)
                        reason = check_op(node)
                    except AccelError:
                        raise
                    except Exception as exc:
                        raise _check_raised(backend, node, exc) from exc
                    if reason is None:
                        owner[i] = b
                    else:
                        self.reasons[i].setdefault(backend.name, reason)
            if backend.layout != self.layout:
                self._fix_layout(b, backend, vnodes)
        self.edges = {}
        if any(self._edge_ops):
            self._claim_edges()

    def _claim_edges(self) -> None:
        """Give host nodes at a partition's edge to the backend whose runtime converts them there
        (Backend.edge_ops): input edges first, readers before what they read (a chain of them), then
        output edges in order. A node only another backend's nodes read, or that sits between two of
        this backend's nodes, stays where it is."""
        owner, users, producer, nodes, outputs = self.owner, self.users, self.producer, self.nodes, self.graph_outputs
        n = len(nodes)
        for side, order in (("input", range(n - 1, -1, -1)), ("output", range(n))):
            for i in order:
                if owner[i] >= 0:
                    continue
                node = nodes[i]
                if not any(node.op in ops for ops in self._edge_ops):
                    continue
                froms = [producer.get(v, -1) for v in node.inputs if v.const is None]
                readers = [j for v in node.outputs for j in users.get(v, ())]
                for b, ops in enumerate(self._edge_ops):
                    if node.op not in ops or i in self.banned[b]:
                        continue
                    if side == "input":
                        at_edge = (
                            bool(readers)
                            and all(owner[j] == b for j in readers)
                            and not any(v in outputs for v in node.outputs)
                            and not any(j >= 0 and owner[j] == b for j in froms)
                        )
                    else:
                        at_edge = bool(froms) and all(j >= 0 and owner[j] == b for j in froms)
                        at_edge = at_edge and not any(owner[j] == b for j in readers)
                    if not at_edge:
                        continue
                    backend = self.backends[b]
                    vnode = self.views[backend.layout][1][i]
                    if vnode is None:
                        continue
                    reason = self._call_check(backend, partial(backend.check_edge, vnode), vnode)
                    if reason is not None:  # (said of the node where it sits, over the op check's general word)
                        self.reasons[i][backend.name] = reason
                        continue
                    owner[i] = b
                    self.edges[i] = side
                    self.reasons[i][backend.name] = (
                        f"an edge conversion: {backend.name}'s runtime runs it on the CPU, at its partition's {side}"
                    )
                    break

    def _claim_composites(self, b: int, backend: Backend, table, view: Graph, vnodes: list[Node | None]) -> None:
        try:
            matcher: PatternMatcher[int] = PatternMatcher([(k, e.pattern) for k, e in enumerate(table)])
        except (TypeError, ValueError) as exc:
            raise PartitionError(f"backend {backend.name}: invalid pattern table: {exc}") from exc
        taken = _Taken(self, b)
        own_checks = _op_checks(backend)
        owner, banned = self.owner, self.banned[b]  # (owner is filled in place below)
        for i in range(len(self.nodes) - 1, -1, -1):
            if owner[i] >= 0 or i in banned:
                continue
            root = vnodes[i]
            if root is None or not matcher.candidates(root):
                continue
            for k, match in matcher.match(root, view, exclude=taken):
                idxs = [self.index.get(m.name, -1) for m in match.nodes]
                if any(j < 0 or owner[j] >= 0 or j in banned for j in idxs):
                    continue
                entry = table[k]
                reason = self._call_check(backend, partial(backend.check_match, entry, match), root)
                if reason is not None:
                    for j in idxs:
                        self.reasons[j].setdefault(backend.name, f"{backend.name}.{entry.name}: {reason}")
                    continue
                for j in idxs:
                    self.owner[j] = b
                    self.unit[j] = i
                self.composite[i] = f"{backend.name}.{entry.name}"
                self.labels[i] = composite_labels(match)
                self.members[i] = idxs
                break
            else:
                # Unclaimed: say why the pattern that got furthest failed, unless a check
                # already said why, or the op's own check will (it speaks about the op alone).
                if backend.name not in self.reasons.get(i, _NONE_GIVEN) and root.op not in own_checks:
                    why = _best_failure(matcher.try_all(root, view, exclude=taken))
                    if why is not None:
                        pattern = f"{backend.name}.{table[why[0]].name}"
                        text = self._describe(why[1], root, backend.layout)
                        detail = f"{pattern} does not match: {text}"
                        if _speaks_of(why[1], root):
                            self.reasons[i][backend.name] = detail
                        else:
                            # the pattern failed on what surrounds the node: say what concerns the node,
                            # keep the pattern's detail for -v
                            self.reasons[i][backend.name] = (
                                f"{root.op} is not supported by {backend.name} on its own, only inside {pattern}"
                            )
                            self.details[i][backend.name] = detail

    def _describe(self, reason: str, root: Node, layout: str) -> str:
        """A pattern's failure at ``root`` as the report shows it, beside that node.

        The root is "this <op>" and its inputs "input i of this <op>" (so equal
        failures at many nodes read the same and group); other values the
        layout conversion made (``%transpose_3``) are named as in the model.
        """
        this = f"this {root.op}"
        reason = reason.replace(f"{root.op} {root.name!r}", this)
        inputs: dict[str, int] = {}
        for k, v in enumerate(root.inputs):
            inputs.setdefault(v.name, k)
            p = v.producer
            if p is not None:  # the producer's op says enough; its name would tell the nodes apart
                reason = reason.replace(
                    f"%{v.name} is produced by {p.op} {p.name!r}", f"%{v.name} is produced by {p.op}"
                )
        origin = self.views[layout][2]
        near: list[dict[str, Value]] = []

        def rename(m: re.Match[str]) -> str:
            name = m.group(1)
            if name in inputs:
                return f"input {inputs[name]} of {this}"
            if layout == self.layout:
                return m.group(0)
            if not near:
                near.append(_values_near(root))
            v = near[0].get(name)
            model = origin.get(v, (name,))[0] if v is not None else name
            return m.group(0) if model == name else f"%{model} (transposed for {layout})"

        return _VALUE_NAME.sub(rename, reason)

    @staticmethod
    def _call_check(backend: Backend, check: Callable[[], str | None], node: Node) -> str | None:
        try:
            return check()
        except AccelError:
            raise
        except Exception as exc:
            raise _check_raised(backend, node, exc) from exc

    def takes_transpose(self, b: int) -> bool:
        """Whether backend ``b`` has an op check for ``transpose``."""
        return self._transposes[b]

    def _fix_layout(self, b: int, backend: Backend, vnodes: list[Node | None]) -> None:
        """Give back nodes that would need a layout transpose inside one of ``backend``'s regions."""
        owner, index = self.owner, self.index
        for i, node in enumerate(self.nodes):
            if owner[i] != b:
                continue
            vnode = vnodes[i]
            assert vnode is not None  # (a node a backend owns was seen in its view)
            for v in vnode.inputs:
                t = v.producer
                if t is None or t.name in index or not t.inputs or t.inputs[0].producer is None:
                    continue
                src = index.get(t.inputs[0].producer.name, -1)
                if src >= 0 and owner[src] == b:
                    self._release(
                        i,
                        b,
                        f"{node.op} reads its input in {self.layout} order, which would need a transpose "
                        f"inside a {backend.layout} region of {backend.name}",
                    )
                    break

    def _release(self, i: int, b: int, reason: str) -> None:
        u = self.unit[i]
        members = self.members.pop(u, [i]) if u in self.composite else [i]
        for j in members:
            self.owner[j] = -1
            self.unit[j] = j
            self.reasons[j][self.backends[b].name] = reason
            self.banned[b].add(j)
        self.composite.pop(u, None)

    def _count_work(self, node: Node) -> tuple[int, int]:
        """:func:`count_work`, remembered by what it reads of a node (op, attributes, input and
        output types): a network repeats a few layer shapes many times."""
        if node.body is not None:
            return count_work(node)
        # (types by identity too: an equal type made apart only misses the memo)
        key = (node.op, id(node.attrs), *[id(v.type) for v in node.inputs], None, *[id(v.type) for v in node.outputs])
        found = self._work_memo.get(key)
        if found is None:
            found = self._work_memo[key] = count_work(node)
        return found

    def form_regions(self) -> None:
        """Group units into regions: a Kahn sweep that stays on one backend while it can."""
        n = len(self.nodes)
        unit, owner, deps = self.unit, self.owner, self.deps
        # A unit's id is the index of its root node, whose unit is itself. By unit id: the nodes of
        # a unit of several (a composite; a single node's unit is itself), the units reading it
        # (a unit reading another through two edges is listed twice, and waits for both: lists,
        # not sets, as most units have one reader), and its unmet inputs.
        members: dict[int, list[int]] = {}
        for i in range(n):
            u = unit[i]
            if u != i:
                found = members.get(u)
                if found is None:
                    members[u] = [i]
                else:
                    found.append(i)
        for u, found in members.items():
            bisect.insort(found, u)  # the root among its unit's nodes, in index order
        succ: list[list[int] | None] = [None] * n
        indeg = [0] * n
        for i in range(n):
            u = unit[i]
            for j in deps[i]:
                w = unit[j]
                if w != u:
                    readers = succ[w]
                    if readers is None:
                        succ[w] = [u]
                    else:
                        readers.append(u)
                    indeg[u] += 1
        heaps: dict[int, list[int]] = {}
        for u in range(n):
            if unit[u] == u and indeg[u] == 0:
                heaps.setdefault(owner[u], []).append(u)  # in increasing order: already heaps
        groups: list[tuple[int, list[int]]] = []
        current: int | None = None
        while True:
            if current is None or not heaps.get(current):
                live = [k for k, h in heaps.items() if h]
                if not live:
                    break
                current = min(live, key=lambda k: heaps[k][0])
                groups.append((current, []))
            u = heapq.heappop(heaps[current])
            found = members.get(u)
            if found is None:
                groups[-1][1].append(u)
            else:
                groups[-1][1].extend(found)
            for w in succ[u] or ():
                indeg[w] -= 1
                if indeg[w] == 0:
                    heapq.heappush(heaps.setdefault(owner[w], []), w)
        if sum(len(g) for _, g in groups) != n:
            raise PartitionError("the graph has a cycle; partitioning needs a graph in topological order")
        self.groups = groups

    def profitability(self, *, final: bool = False) -> bool:
        """Send unprofitable regions back; True if any was."""
        rejected = False
        producer, users, nodes, graph_outputs = self.producer, self.users, self.nodes, self.graph_outputs
        work_of = self.work
        self.region_stats: dict[int, tuple[int, int, int]] = {}
        count_work, no_users = self._count_work, ()
        for g, (b, idxs) in enumerate(self.groups):
            if b < 0:
                continue
            inside = set(idxs)
            work = macs = boundary = 0
            seen: set[Value] = set()  # boundary inputs counted
            for i in idxs:
                node = nodes[i]
                wm = work_of[i]
                if wm is None:
                    wm = work_of[i] = count_work(node)
                work += wm[0]
                macs += wm[1]
                for v in node.inputs:
                    if v.const is None and producer.get(v, -1) not in inside and v not in seen:
                        seen.add(v)
                        boundary += v.type.nbytes
                for v in node.outputs:
                    if v in graph_outputs or not inside.issuperset(users.get(v, no_users)):
                        boundary += v.type.nbytes
            self.region_stats[g] = (work, macs, boundary)
            backend = self.backends[b]
            info = RegionInfo(backend.name, len(idxs), work, macs, boundary)
            reason = self._call_check(backend, partial(backend.profitability, info), self.nodes[idxs[0]])
            if reason is None:
                continue
            rejected = True
            for i in idxs:
                self.reasons[i][backend.name] = reason
                self.banned[b].add(i)
                if final:
                    self.owner[i] = -1
                    self.unit[i] = i
            if final:
                for i in idxs:
                    self.composite.pop(i, None)
        if final and rejected:
            self.form_regions()
        return rejected

    # -- steps 5-6 ------------------------------------------------------------------------
    def has_dead_nodes(self) -> bool:
        """Whether a node of the input graph is dead. A dead chain ends in a node nothing reads,
        so looking for a node none of whose outputs is read or returned is enough."""
        outputs = self.graph_outputs
        for i, was_read in enumerate(self._read):
            if not was_read and not any(v in outputs for v in self.nodes[i].outputs):
                return True
        return False

    def build(self, *, graphs: bool = True) -> tuple[Graph | None, Report]:
        """The host graph with a ``call`` per region, and the report.

        With ``graphs`` off, only the report: the same regions, boundaries and
        transposes are worked out, but no node or graph is made (exact when no
        node of the input graph is dead: a dead node's transposes go with it).
        The groups are taken in their order: a region's inputs are the values
        the host and the regions before it made.
        """
        build = _Build(self, graphs)
        for g, (b, idxs) in enumerate(self.groups):
            if b < 0:
                build.host_group(idxs)
            else:
                build.region(g, b, idxs)
        report = self._report(build.node_part, build.reports)
        return build.finish(), report

    def _host_view(self) -> tuple[Graph, list[Node | None], dict[Value, tuple[str, Perm]]]:
        """The host copy as a view in the model's layout (the view of a backend of that layout)."""
        if self.layout not in self.views:
            origin = {v: (v.name, identity_perm(v.type.rank)) for v in self.host.values()}
            aligned: list[Node | None] = list(self.host.nodes)  # (in the input graph's order)
            self.views[self.layout] = (self.host, aligned, origin)
        return self.views[self.layout]

    def _region_layout(
        self, backend: Backend, idxs: list[int], group_of: list[int], group_layout: dict[int, str]
    ) -> str:
        """The layout a region's body is built in: its backend's, except for a region of elementwise ops only.

        An elementwise op computes the same in any axis order, so such a region
        whose inputs all arrive in the model's layout (from the host, graph
        inputs or regions in that layout) takes that layout too, when the
        backend's checks accept its nodes as they are there: a residual
        ``add → relu`` between two planar regions then needs no transposes.
        """
        if backend.layout == self.layout:
            return self.layout
        inside = set(idxs)
        for i in idxs:
            node = self.nodes[i]
            if self.unit[i] in self.composite or node.op == CALL_OP or get_op(node.op).layout is not Layout.ELEMENTWISE:
                return backend.layout
            for j in self.deps[i]:
                if j not in inside and group_layout.get(group_of[j], self.layout) != self.layout:
                    return backend.layout
        host_nodes = self._host_view()[1]
        for i in idxs:
            host_node = host_nodes[i]
            assert host_node is not None
            if self._call_check(backend, partial(backend.check_op, host_node), host_node) is not None:
                return backend.layout
        return self.layout

    def _outline_composites(self, body: Graph, idxs: list[int], graph_outputs: set[Value]) -> None:
        """Make each composite in a region's ``body`` (its nodes are those of ``idxs``) one nested call."""
        units = [self.unit[i] for i in idxs]
        groups: dict[int, list[Node]] = {}
        for node, u in zip(body.nodes, units):
            if u in self.composite:
                groups.setdefault(u, []).append(node)
        if not groups:
            return
        # a member's output leaves its composite when the graph returns it or a node outside reads it
        leaves: set[Value] = set()
        users = self.users
        for node, i, u in zip(body.nodes, idxs, units):
            if u in groups:
                inner = self.members[u]
                for ov, v in zip(self.nodes[i].outputs, node.outputs):
                    if ov in graph_outputs or any(j not in inner for j in users.get(ov, ())):
                        leaves.add(v)
        new_nodes: list[Node] = []
        done: set[int] = set()
        remap: dict[Value, Value] = {}
        for node, u in zip(body.nodes, units):
            if u not in groups:
                if any(v in remap for v in node.inputs):
                    node.inputs = [remap.get(v, v) for v in node.inputs]
                new_nodes.append(node)
                continue
            if u in done:
                continue
            done.add(u)
            members = groups[u]
            produced = {v for n in members for v in n.outputs}
            params: list[Value] = []
            args: list[Value] = []
            pmap: dict[Value, Value] = {}
            for n in members:
                for v in n.inputs:
                    if v.const is None and v not in produced and v not in pmap:
                        pmap[v] = Value(v.name, v.type)
                        params.append(pmap[v])
                        args.append(remap.get(v, v))
                if any(v in pmap for v in n.inputs):
                    n.inputs = [pmap.get(v, v) for v in n.inputs]
            outs = [v for n in members for v in n.outputs if v in leaves]
            root = members[-1]
            # labels are tuples of names and input positions (composite_labels): frozen as they are
            attrs = MappingProxyType({"composite": self.composite[u], LABELS_ATTR: self.labels.get(u, ())})
            call = Node(
                CALL_OP,
                args,
                attrs,
                [v.type for v in outs],
                name=root.name,
                output_names=[v.name for v in outs],
                body=Graph(params, outs, members, name=self.composite[u]),
            )
            for old, new in zip(outs, call.outputs):
                remap[old] = new
            new_nodes.append(call)
        body.nodes = new_nodes
        body.outputs = [remap.get(v, v) for v in body.outputs]

    def _details(self, i: int, declined: list[str]) -> dict[str, str] | None:
        """The pattern details of node i, for the backends that declined it (None: none)."""
        got = self.details.get(i)
        if not got:
            return None
        return {name: got[name] for name in declined if name in got} or None

    def _report(self, node_part: list[str | None], partitions: list[PartitionReport]) -> Report:
        nodes = []
        names = [bk.name for bk in self.backends]
        before = [names[:b] for b in range(len(names))]  # the backends that declined a node of backend b
        composite, owner, unit, all_reasons = self.composite, self.owner, self.unit, self.reasons
        edges, details = self.edges, self.details
        # a graph repeats few types: each written once (by identity: the graph keeps them alive,
        # and equal types made apart are only written twice)
        texts: dict[int, str] = {}
        types: dict[str, str] = {}

        def type_text(v: Value) -> str:
            t = v.type
            text = texts.get(id(t))
            if text is None:
                text = texts[id(t)] = str(t)
            return text

        for v in self.graph.inputs:
            types[v.name] = type_text(v)
        for i, node in enumerate(self.nodes):
            b = owner[i]
            declined = names if b < 0 else before[b]
            if declined:
                given = all_reasons.get(i, _NONE_GIVEN)
                reasons = {
                    name: given[name] if name in given else f"{node.op} is not supported by {name}"  # noqa: SIM401 (no text made for a given reason)
                    for name in declined
                }
            else:
                reasons = {}
            if i in edges:  # (what the backend that runs it says of it: where and on what)
                reasons[names[b]] = all_reasons[i][names[b]]
            u = unit[i]
            in_composite = b >= 0 and u in composite
            outputs = []
            for v in node.outputs:
                outputs.append(v.name)
                text = texts.get(id(v.type))
                types[v.name] = text if text is not None else type_text(v)
            nodes.append(
                NodeReport(
                    node.name,
                    node.op,
                    HOST if b < 0 else names[b],
                    node_part[i],
                    composite[u] if in_composite else None,
                    reasons,
                    [v.name for v in node.inputs if v.const is None],
                    outputs,
                    self.nodes[u].name if in_composite else None,
                    self._details(i, declined) if i in details else None,
                )
            )
        return Report(
            target=names,
            nodes=nodes,
            partitions=partitions,
            graph_inputs=[v.name for v in self.graph.inputs],
            graph_outputs=[v.name for v in self.graph.outputs],
            types=types,
        )


class _Region:
    """One region as :meth:`_Build.region` makes it: its nodes, then its body's boundary, step by step."""

    __slots__ = (
        "g",
        "b",
        "name",
        "idxs",
        "body_nodes",
        "origin",
        "in_names",
        "body_inputs",
        "call_args",
        "replaced",
        "body_outputs",
        "out_names",
        "perms",
        "unread",
        "lead",
    )
    # set by _Build._boundary_inputs
    in_names: list[str]
    body_inputs: list[Value]
    call_args: list[Value]
    replaced: dict[Value, Value]  # view value -> body input (or the output of a transpose in the body)
    lead: list[Node]  # the transposes the body runs first, on inputs that arrive in another layout
    # set by _Build._boundary_outputs
    body_outputs: list[Value]
    out_names: list[str]
    perms: list[Perm]
    unread: bool  # a value nothing reads: the body keeps a dead node to drop

    def __init__(
        self, g: int, b: int, name: str, idxs: list[int], body_nodes: list[Node], origin: dict[Value, tuple[str, Perm]]
    ):
        self.g = g  # its group
        self.b = b  # its backend
        self.name = name
        self.idxs = idxs
        self.body_nodes = body_nodes  # the nodes of its view
        self.origin = origin  # the view's values -> (model value, permutation)


class _Build:
    """One :meth:`_Partitioner.build`: the host graph, made group by group, and the report's partitions.

    The host graph is made one of three ways: without graphs (``host`` None),
    values stand for themselves by name and no node is made; when the host
    copy exists, host nodes are its nodes; otherwise only what runs on the
    host is copied.
    """

    def __init__(self, p: _Partitioner, graphs: bool):
        self.p = p
        self.graphs = graphs
        self.by_name: dict[str, Value] = {}  # host value standing for an original value, once moved
        self.raw: dict[tuple[str, Perm], Value] = {}  # region outputs in a backend layout
        self.transposes: dict[tuple[Value, Perm], Value] = {}
        self.transpose_attrs: dict[Perm, Mapping[str, object]] = {}  # one frozen mapping per permutation
        self.new_nodes: list[Node] = []
        self.reports: list[PartitionReport] = []
        self.node_part: list[str | None] = [None] * len(p.nodes)  # by node index: its partition
        self.counters: dict[str, int] = {}
        self.region_transposes: dict[str, list[Node]] = {}
        self.made: dict[str, int] = {}  # without graphs: transposes per region
        # the host's values of the input graph's values by name, made on first use (stand-ins
        # without graphs, copies of graph inputs and constants), or all those of the host copy
        self.originals: dict[str, Value] = {}
        self.source: dict[str, Value] = {}  # graph inputs and constants, by name, to copy from
        self.host: Graph | None = None
        self.host_nodes: list[Node] | None = None  # the host copy's nodes: same order and names as p.nodes
        if not graphs:  # values stand for themselves by name; no node is copied
            pass
        elif p._host is not None:  # the host copy exists: host nodes are its nodes
            self.host = p._host
            self.host_nodes = self.host.nodes
            self.originals = {v.name: v for v in self.host.values()}
        else:  # only what runs on the host is copied
            graph = p.graph
            self.source = {v.name: v for v in (*graph.inputs, *graph.constants())}
            self.host = Graph([self.original_value(v.name) for v in graph.inputs], [], [], name=graph.name)
            self.host.reserve_names([*self.source, *p.index])  # fresh names are fresh in the input graph too
        # region outputs held in a backend layout, transposed back only when the host (or a
        # region of another layout) reads them: regions of one layout pass them on directly
        self.pending: dict[str, tuple[Value, Perm, str]] = {}
        self.group_of = [0] * len(p.nodes)  # by node index: its group
        for g, (_, idxs) in enumerate(p.groups):
            for i in idxs:
                self.group_of[i] = g
        self.group_layout: dict[int, str] = {}  # region -> the layout its body is in

    # -- values -------------------------------------------------------------------------------
    def original_value(self, name: str) -> Value:
        """The host's value for the input graph's value ``name``, as no region moved it."""
        found = self.originals.get(name)
        if found is None:
            if not self.graphs:  # a stand-in
                found = Value(name, _NO_TYPE)
            else:  # a graph input or a constant
                v = self.source[name]
                found = Value(v.name, v.type, None, v.const)
            self.originals[name] = found
        return found

    def plain_value(self, name: str) -> Value | None:
        """The host value a region made for ``name``, in the model's layout (transposed back now
        if it is pending); None if no region made it."""
        found = self.by_name.get(name)
        if found is None and name in self.pending:
            out, inverse, region = self.pending.pop(name)
            found = self.transpose(out, inverse, region)
            found.name = name
            self.by_name[name] = found
        return found

    def host_value(self, v: Value) -> Value:
        """The host's value for ``v``: as a region made it, else as in the input graph."""
        found = self.plain_value(v.name)
        return self.original_value(v.name) if found is None else found

    def transpose(self, v: Value, axes: Perm, region: str) -> Value:
        """``v`` transposed by ``axes`` on the host, at a boundary of ``region``: once per (value, axes)."""
        key = (v, axes)
        out = self.transposes.get(key)
        if out is None:
            host = self.host
            if host is None:
                self.made[region] = self.made.get(region, 0) + 1
                out = self.transposes[key] = Value(region, _NO_TYPE)
                return out
            # typed as the transpose rule would type it (the input's type, permuted), without
            # running the rule again at each of the many region boundaries
            name = host.fresh_name(f"{region}_layout")
            t = Node(
                "transpose",
                [v],
                self._axes_attrs(axes),
                [permuted_type(v.type, axes)],
                name=name,
                output_names=[host.fresh_name(name)],
            )
            self.new_nodes.append(t)
            self.region_transposes.setdefault(region, []).append(t)
            out = self.transposes[key] = t.output
        return out

    # -- groups -------------------------------------------------------------------------------
    def host_group(self, idxs: list[int]) -> None:
        """The nodes ``idxs`` of a group the host runs, reading the host's values."""
        nodes, new_nodes, host_value = self.p.nodes, self.new_nodes, self.host_value
        if self.host is None:  # no node: only the values they read are transposed back
            pending = self.pending
            for i in idxs:
                for v in nodes[i].inputs:
                    if v.name in pending:
                        self.plain_value(v.name)
        elif self.host_nodes is not None:
            host_nodes = self.host_nodes
            for i in idxs:
                node = host_nodes[i]
                node.inputs = [host_value(v) for v in node.inputs]
                new_nodes.append(node)
        else:
            originals = self.originals
            for i in idxs:
                node = nodes[i]
                new = node.copy_reading([host_value(v) for v in node.inputs])
                for v in new.outputs:
                    originals[v.name] = v
                new_nodes.append(new)

    def region(self, g: int, b: int, idxs: list[int]) -> None:
        """Group ``g``, offloaded to backend ``b``: its body and ``call`` (with graphs), the
        transposes at its boundary, and its partition in the report."""
        r = self._start_region(g, b, idxs)
        self._boundary_inputs(r)
        self._boundary_outputs(r)
        if self.host is None:
            call_outputs = [Value(name, _NO_TYPE) for name in r.out_names]
        else:
            call_outputs = self._call(r)
        self._hand_on(r, call_outputs)
        self._report_region(r)

    def _start_region(self, g: int, b: int, idxs: list[int]) -> _Region:
        """The region's name, its layout and its nodes in that layout's view."""
        p = self.p
        backend = p.backends[b]
        k = self.counters.get(backend.name, 0)
        self.counters[backend.name] = k + 1
        layout = p._region_layout(backend, idxs, self.group_of, self.group_layout)
        self.group_layout[g] = layout
        _, vnodes, origin = p.views[layout] if layout != p.layout else p._host_view()
        body_nodes = cast("list[Node]", [vnodes[i] for i in idxs])  # (every node is in its view)
        return _Region(g, b, f"{backend.name}_{k}", idxs, body_nodes, origin)

    def _boundary_inputs(self, r: _Region) -> None:
        """Boundary inputs: new body inputs, fed on the host (through a transpose if needed).

        A backend that takes ``transpose`` (its op check passes) runs the transpose itself: the
        value comes in as it is held (in the model's layout, or in the layout of the region that
        made it) and the body's first nodes transpose it (:meth:`_inner_transpose`).
        """
        layout = self.p.backends[r.b].layout
        raw, host, origin, pname = self.raw, self.host, r.origin, r.name
        plain_value, original_value, transpose = self.plain_value, self.original_value, self.transpose
        body_nodes = r.body_nodes
        produced = {v for nd in body_nodes for v in nd.outputs}
        body_inputs: list[Value] = []
        call_args: list[Value] = []
        in_names: list[str] = []
        replaced: dict[Value, Value] = {}
        param_names: set[str] = set()
        lead: list[Node] = []
        for nd in body_nodes:
            for v in nd.inputs:
                if v.const is not None or v in produced or v in replaced:
                    continue
                name, perm = origin[v]
                src = raw.get((name, perm))
                inner: Node | None = None
                if src is None:
                    inner, src = self._inner_transpose(r, v, name, perm)
                    if src is None:
                        plain = plain_value(name) or original_value(name)
                        src = plain if _is_identity(perm) else transpose(plain, perm, pname)
                in_names.append(name)
                if host is None:  # no body: the name is all the report needs
                    replaced[v] = v
                    continue
                param = Value(name if name not in param_names else f"{name}_{layout}", v.type)
                param_names.add(param.name)
                body_inputs.append(param)
                call_args.append(src)
                if inner is None:
                    replaced[v] = param
                    continue
                param.type = inner.inputs[0].type
                inner.inputs = [param]
                out = inner.outputs[0]
                out.name = f"{param.name}_transposed"
                while out.name in param_names:
                    out.name += "_"
                param_names.add(out.name)
                lead.append(inner)
                replaced[v] = out
        r.in_names, r.body_inputs, r.call_args, r.replaced, r.lead = in_names, body_inputs, call_args, replaced, lead

    def _inner_transpose(self, r: _Region, v: Value, name: str, perm: Perm) -> tuple[Node | None, Value | None]:
        """``(transpose, source)`` when region ``r``'s backend transposes ``v`` itself from the value the
        host holds for ``name`` (the region that made it left it in another layout, or it is in the
        model's); ``(None, None)`` when the host transposes it."""
        p = self.p
        if not p.takes_transpose(r.b):
            return None, None
        pending = self.pending.get(name)
        held = self.by_name.get(name)
        if held is not None or pending is None:
            q = identity_perm(len(perm))
        else:
            held, inverse, _ = pending
            q = _inverse(inverse)
        if q == perm:
            return None, None
        axes = tuple(q.index(a) for a in perm)  # transpose(held, axes) is transpose(original, perm)
        held_type = permuted_type(v.type, tuple(perm.index(a) for a in q))
        node = Node(
            "transpose",
            [Value(name, held_type)],
            self._axes_attrs(axes),
            [v.type],
            name=f"{r.name}_{name}_layout",
            output_names=[f"{name}_transposed"],
        )
        if p._call_check(p.backends[r.b], partial(p._transpose_check[r.b], node), node) is not None:
            return None, None
        if held is None:
            held = self.original_value(name)  # a graph input, or what the host computed
        return node, held

    def _axes_attrs(self, axes: Perm) -> Mapping[str, object]:
        attrs = self.transpose_attrs.get(axes)
        if attrs is None:
            attrs = self.transpose_attrs[axes] = freeze_attrs({"axes": axes})
        return attrs

    def _boundary_outputs(self, r: _Region) -> None:
        """Boundary outputs: used outside the region, or graph outputs
        (asked of the input graph: a layout view may have dropped dead readers)."""
        nodes, users, graph_outputs, origin = self.p.nodes, self.p.users, self.p.graph_outputs, r.origin
        body_outputs: list[Value] = []
        in_region = set(r.idxs)
        unread = False
        for i, nd in zip(r.idxs, r.body_nodes):
            for ov, v in zip(nodes[i].outputs, nd.outputs):
                readers = users.get(ov, ())
                if ov in graph_outputs or not in_region.issuperset(readers):
                    body_outputs.append(v)
                elif not readers:
                    unread = True
        out_names = []
        perms = []
        for v in body_outputs:
            name, perm = origin[v]
            out_names.append(name)
            perms.append(perm)
        r.body_outputs, r.out_names, r.perms, r.unread = body_outputs, out_names, perms, unread

    def _call(self, r: _Region) -> list[Value]:
        """The region's body, its composites outlined, and the host's ``call`` of it; the call's outputs."""
        p, host, replaced = self.p, self.host, r.replaced
        assert host is not None
        for nd in r.body_nodes:
            if any(v in replaced for v in nd.inputs):
                nd.inputs = [replaced.get(v, v) for v in nd.inputs]
        body = Graph(r.body_inputs, r.body_outputs, r.body_nodes, name=r.name)
        if r.unread:
            remove_dead_nodes(body)
        p._outline_composites(body, r.idxs, p.graph_outputs)
        if r.lead:  # (after the outlining, which reads the body's nodes as the region's, one for one)
            body.nodes = [*r.lead, *body.nodes]
        layout = p.backends[r.b].layout
        call_out_names = [
            name if _is_identity(perm) else host.fresh_name(f"{name}_{layout}")
            for name, perm in zip(r.out_names, r.perms)
        ]
        call = Node(
            CALL_OP,
            r.call_args,
            p.call_attrs[r.b],
            [v.type for v in r.body_outputs],
            name=host.fresh_name(r.name),
            output_names=call_out_names,
            body=body,
        )
        self.new_nodes.append(call)
        return call.outputs

    def _hand_on(self, r: _Region, call_outputs: list[Value]) -> None:
        """The region's outputs, as the values the host and later regions read."""
        for name, perm, out in zip(r.out_names, r.perms, call_outputs):
            if _is_identity(perm):
                self.by_name[name] = out
            else:
                self.raw[(name, perm)] = out
                self.pending[name] = (out, _inverse(perm), r.name)

    def _report_region(self, r: _Region) -> None:
        """The region's partition in the report."""
        p = self.p
        for i in r.idxs:
            self.node_part[i] = r.name
        work, macs, _ = p.region_stats[r.g]
        self.reports.append(
            PartitionReport(
                r.name,
                p.backends[r.b].name,
                [p.nodes[i].name for i in r.idxs],
                r.in_names,
                r.out_names,
                macs,
                work,
            )
        )

    def finish(self) -> Graph | None:
        """The host graph, its outputs set and its dead nodes dropped (None without graphs), and
        the transposes of each partition counted."""
        host, graph = self.host, self.p.graph
        if host is None:
            for v in graph.outputs:
                self.plain_value(v.name)
            for rep in self.reports:
                rep.transposes = self.made.get(rep.name, 0)
            return None
        host.outputs = [self.host_value(v) for v in graph.outputs]
        host.nodes = self.new_nodes
        remove_dead_nodes(host, nested=False)  # region bodies are built without dead nodes
        alive = set(host.nodes)
        for rep in self.reports:
            rep.transposes = sum(1 for t in self.region_transposes.get(rep.name, ()) if t in alive)
        return host


def _check_raised(backend: Backend, node: Node, exc: Exception) -> PartitionError:
    return PartitionError(
        f"backend {backend.name}: its check raised on node {node.name!r} ({node.op}): {type(exc).__name__}: {exc}"
    )


def _pattern_table(backend: Backend) -> list[PatternEntry]:
    return _ask(backend, "its pattern table", lambda: list(backend.pattern_table()))


def _edge_ops(backend: Backend) -> frozenset[str]:
    """The ops the backend's runtime converts at a partition's edges (Backend.edge_ops)."""
    return _ask(backend, "its edge conversions", lambda: frozenset(backend.edge_ops()))


def _op_checks(backend: Backend) -> frozenset[str]:
    """The ops the backend speaks about itself: its op checks and the ops it declines with a reason."""
    return _ask(backend, "its op checks", lambda: frozenset(backend.op_checks()) | frozenset(backend.declines()))


T = TypeVar("T")


def _ask(backend: Backend, what: str, build: Callable[[], T]) -> T:
    """What a plugin hook builds; a failure other than an AccelError is the plugin's PartitionError."""
    try:
        return build()
    except AccelError:
        raise
    except Exception as exc:
        raise PartitionError(f"backend {backend.name}: building {what} failed: {exc}") from exc


class _Taken:
    """View nodes a pattern may not take: owned already, refused for this backend, or not in the input graph."""

    def __init__(self, p: _Partitioner, b: int):
        self.p, self.b = p, b

    def __contains__(self, node: object) -> bool:
        i = self.p.index.get(getattr(node, "name", ""), -1)
        return i < 0 or self.p.owner[i] >= 0 or i in self.p.banned[self.b]


def _values_near(root: Node, limit: int = 64) -> dict[str, Value]:
    """The values read by ``root`` and its nearest producers, by name: those a pattern rooted there can name."""
    found: dict[str, Value] = {}
    queue = [root]
    seen = {root}
    for node in queue:  # grows while it is walked: breadth first
        if len(found) >= limit:
            break
        for v in node.inputs:
            found.setdefault(v.name, v)
            p = v.producer
            if p is not None and p not in seen:
                seen.add(p)
                queue.append(p)
    return found


_OTHER_OP = re.compile(r"^%\S+(?: \(transposed for \w+\))? is (?:produced by .*|not an op output), expected ")
_NODE_FAILURE = re.compile(r"^(\S+) '")


def _speaks_of(reason: str, root: Node) -> bool:
    """Whether a pattern's failure at ``root`` is about the node itself (its attributes, dtype, or one of its
    input values, such as a weight that is not a constant) rather than about another op: a producer the
    pattern expected and did not find, or a condition on another node of the pattern."""
    if _OTHER_OP.match(reason):
        return False
    other = _NODE_FAILURE.match(reason)
    return other is None or reason.startswith(f"{root.op} {root.name!r}")


def _best_failure(attempts: list[tuple[int, Match | MatchFailure]]) -> tuple[int, str] | None:
    """(entry, reason) of the failed attempt that got furthest; the first on a tie."""
    best: tuple[int, MatchFailure] | None = None
    for k, got in attempts:
        if isinstance(got, MatchFailure) and (best is None or got.progress > best[1].progress):
            best = (k, got)
    return None if best is None else (best[0], best[1].reason)


def _is_identity(perm: Perm) -> bool:
    return perm == identity_perm(len(perm))


@cache
def _inverse(perm: Perm) -> Perm:
    return tuple(perm.index(a) for a in range(len(perm)))


_NONE_GIVEN: Mapping[str, str] = MappingProxyType({})

#: the type of a value that only stands for one by name, in a build without graphs
_NO_TYPE = TensorType((), "float32")
