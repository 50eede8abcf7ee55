"""The order of MindSpore's sharding propagation (``CostGraph::StrategyPropagate``, graph_costmodel.cc), which
decides whose layout reaches an op first; the ``propagate`` pass walks in it under
``set_auto_parallel_context(propagation_order="mindspore")`` (graphpar's default, ``"hints_first"``, sends fewer
bytes where the two differ: docs/porting_from_mindspore.md).

MindSpore runs one breadth-first walk per configured op, one after another, each walk deciding only the ops no
earlier walk decided:

- The configured ops are taken in the order of their ``OperatorInfo`` names (a ``std::map`` ordered by
  ``OpsPtrCompare``, a string comparison of ``"{Kind}Info{n}{n}"``, ``n`` the running count the operator was
  created with in the walk from the output, ``graphpar.ir.walk_order``): by kind name, then by that count compared
  as text; under sharding propagation ``_VirtualDataset`` is a configured op holding the dataset strategy, and its
  name (``_`` after every capital) puts it last.
- From each op reached, its consumers first (``BFSNextNode`` over its successor edges), then its producers
  (``BFSPrevNode``).
- A consumer with several input edges (``IsMultiInput``: inputs from several ops or network inputs; Parameters and
  constants are no edge) waits until all of them are reached. When a walk's queue runs dry, the first waiting op
  (``waitting_list_``, keyed by ``OperatorInfo`` pointer: creation order) is decided from the edges reached so far
  (``GetStrategyByVisitedEdges``) and the walk goes on from it, unless the next configured op was created before
  it (``ExistPrevConfiguredOps``: it is nearer the output; its own walk decides the waiting op). An op's edge to a
  network input is reached only once the dataset's walk runs, so before that the dataset's layouts are not priced.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from graphpar.ir.graph import Graph, Node, Provenance
from graphpar.ir.walk_order import output_first_order
from graphpar.planner.follow import data_inputs, follows_input, is_pass_through, linked
from graphpar.planner.passes.context import PlanContext
from graphpar.planner.passes.parameters import PIN_KIND
from graphpar.planner.strategy import NodeStrategy, replicated_strategy

LAST = float("inf")  # ``_VirtualDataset``'s topo index (``TOTAL_OPS_MAX``)


@dataclass(frozen=True)
class Dataset:
    """The dataset as the source of propagation (MindSpore's ``_VirtualDataset``, a configured op under sharding
    propagation); ``id`` matches no node."""

    id: int = -1


DATASET = Dataset()


def creation_indices(graph: Graph) -> dict[int, int]:
    """Node id -> the count MindSpore creates the op's ``OperatorInfo`` with (``TOTAL_OPS``): ops in the walk from
    the output, a Depend (no operator of MindSpore's plan) not counted."""
    out: dict[int, int] = {}
    for node in output_first_order(graph):
        if node.is_op and not is_pass_through(node):
            out[node.id] = len(out)
    return out


def configured_order(graph: Graph, configured: list[Node], created: dict[int, int]) -> list[Node]:
    """``configured`` in the order MindSpore walks from them (module docstring): by ``"{Kind}Info{n}{n}"``."""
    return sorted(configured, key=lambda n: f"{n.kind}Info{created[n.id]}{created[n.id]}")


def walk_neighbours(graph: Graph, node: Node) -> list[Node]:
    """``node``'s neighbours in the order a walk visits them: consumers (in graph order), then producers (in input
    order)."""
    seen: dict[int, Node] = {}
    for vid in node.outputs:
        for consumer, _ in graph.consumers(vid):
            seen.setdefault(consumer.id, consumer)
    for k in data_inputs(node):
        producer = graph.producer(node.inputs[k])
        if producer is not None:
            seen.setdefault(producer.id, producer)
    seen.pop(node.id, None)
    return list(seen.values())


def edge_inputs(graph: Graph, node: Node) -> list[int]:
    """The value ids of ``node``'s input edges in MindSpore's cost graph: data inputs that are arrays made by an op
    or given as network inputs (a Parameter or a constant is no edge)."""
    out = []
    for k in data_inputs(node):
        value = graph.values[node.inputs[k]]
        if value.is_array and (value.producer is not None or value.kind == "input"):
            out.append(node.inputs[k])
    return out


def waits(graph: Graph, node: Node, decided: dict, dataset_reached: bool) -> bool:
    """Whether ``node``, reached from a producer, waits for its other input edges (module docstring)."""
    edges = edge_inputs(graph, node)
    if len(edges) < 2:
        return False
    for vid in edges:
        producer = graph.values[vid].producer
        if (producer is None and not dataset_reached) or (producer is not None and producer not in decided):
            return True
    return False


class MindSporeWalks:
    """The walks in MindSpore's order (module docstring) over the ``propagate`` pass's state: ``strategies`` (the
    decided nodes; the ``unwalked`` configured ones join when their walk begins), ``queue`` and ``decide`` (prices
    and sets a node, queueing it)."""

    def __init__(self, graph: Graph, configured: list[Node], unwalked: set[int], strategies: dict,
                 queue: deque, decide: Callable[[Node, Node | Dataset], None]):
        self.graph, self.configured, self.unwalked = graph, configured, unwalked
        self.strategies, self.queue, self.decide = strategies, queue, decide
        self.created = creation_indices(graph)
        self.waiting: dict[int, Node] = {}  # consumers waiting for their other input edges
        self.dataset_reached = False

    def run(self, reach_dataset: Callable[[], None], readers: Callable[[], list[Node]]) -> None:
        """Every configured op's walk, pins first, then the dataset's (``reach_dataset`` makes the inputs' layouts
        known; ``readers``: the undecided ops reading a network input)."""
        pins = [n for n in self.configured if n.kind == PIN_KIND]
        order = pins + configured_order(self.graph, [n for n in self.configured if n.kind != PIN_KIND],
                                        self.created)
        for i, node in enumerate(order):
            self.strategies[node.id] = node.strategy
            self.unwalked.discard(node.id)
            self.queue.append(node)
            self._walk(node, self.created[order[i + 1].id] if i + 1 < len(order) else LAST)
        reach_dataset()
        self.dataset_reached = True
        for reader in readers():
            if reader.id not in self.strategies:
                self._reach(reader, DATASET, True)
        self._walk(DATASET, None)

    def _reach(self, neighbour: Node, current: Node | Dataset, downstream: bool) -> None:
        if downstream and waits(self.graph, neighbour, self.strategies, self.dataset_reached):
            self.waiting[neighbour.id] = neighbour
            return
        self.decide(neighbour, current)

    def _walk(self, root: Node | Dataset, next_created: float | None) -> None:
        """One walk (``CostGraph::BFS``): from the queue's ops, then the waiting ops it may decide."""
        graph, strategies, waiting, created = self.graph, self.strategies, self.waiting, self.created
        while True:
            while self.queue:
                current = self.queue.popleft()
                for neighbour in walk_neighbours(graph, current):
                    if neighbour.id not in strategies and neighbour.id not in self.unwalked and \
                            linked(graph, current, neighbour):
                        self._reach(neighbour, current, any(graph.values[v].producer == current.id
                                                            for v in neighbour.inputs))
            for nid in [nid for nid in waiting if nid in strategies]:
                del waiting[nid]
            if not waiting:
                return
            first = min(waiting.values(), key=lambda n: created.get(n.id, LAST))
            if next_created is not None and created.get(first.id, LAST) > next_created:
                return  # a configured op nearer the output walks next and decides it
            del waiting[first.id]
            self.decide(first, root)


def dataset_readers(graph: Graph, ctx: PlanContext, strategies: dict[int, NodeStrategy]) -> list[Node]:
    """The undecided ops that read a network input through a data input (propagation's dataset sources)."""
    return [n for n in graph.node_list() if n.id not in strategies and n.strategy is None and any(
        n.inputs[k] in ctx.input_specs and graph.values[n.inputs[k]].is_array for k in data_inputs(n))]


def unreached(graph: Graph, ctx: PlanContext, strategies: dict[int, NodeStrategy],
               provenance: dict[int, Provenance]) -> None:
    """The ops no propagation reached (cut off by a Reshape-Reshape edge or a Depend's ordering-only input) get the
    first strategy MindSpore generates for them, every split 1 (``CostGraph::StrategyPropagate``: "Set default
    strategy for op", ``GetStrategyCost()[0]``), not the data-parallel default of SEMI_AUTO. Layout-following ops
    (Reshape, Depend) and ops without a rule are left to ``default_strategies``."""
    for node in graph.node_list():
        if node.id in strategies or follows_input(node):
            continue
        dims = ctx.dims(node, graph)
        if dims is None:
            continue
        strategies[node.id] = replicated_strategy(dims, ctx.mesh)
        provenance[node.id] = Provenance("default", detail="not reached by propagation: every split 1 (MindSpore's "
                                         "first strategy)")
