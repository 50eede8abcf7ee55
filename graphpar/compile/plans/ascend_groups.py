"""MindSpore's check of the communication groups a plan creates on Ascend 910 (``device_target="Ascend"``).

MindSpore builds every group a rank's graph needs when it compiles it (``DeviceManager::CreateGroup``), and on Ascend
910 it first checks the ranks against HCCL's server topology (``IsFeasibleDeiveList``, device_manager.cc): ranks
split into servers of 8 devices, every server of the group must hold the same local ranks, and those local ranks
must be all 8, one, four of them as ``0-3``, ``4-7`` or two pairs with equal rank mod 4, or two of them 4 apart or
on the same half of the server. Otherwise the compile fails with ``RuntimeError``. So on 24 devices a MatMul
``((8, 1), (1, 3))`` fails (its weight's gradient is summed over ranks 0, 3, 6, ..., 21: local ranks 0, 3, 6 on
the first server, 1, 4, 7 on the second) where ``((3, 8), (8, 1))`` compiles (ranks 0-7, and 0, 8, 16).

graphpar has no Ascend backend (an Ascend script runs on JAX's platform), but a script that names Ascend gets
MindSpore's answer: :func:`check` raises :class:`~graphpar.errors.CommunicationGroupError` for the first op whose
groups fail, naming it, the group and its purpose. The groups are those MindSpore's step_parallel creates for the
rank the context names (``global_rank``, else 0), as ``graphpar.dump.parallel_graph`` builds them: an op's forward
reduction over its split contracted dimensions, in a train graph the gradient reduction (``_MirrorOperator``) of
each Parameter it reads over the ranks repeating its slice, and the gathers of each layout change an input needs.
"""

from __future__ import annotations

from collections.abc import Iterator

from graphpar import _context
from graphpar._context import ParallelMode
from graphpar.dump.parallel_graph import group_ranks
from graphpar.errors import CommunicationGroupError
from graphpar.ir.graph import Graph, Node

SERVER = 8  # devices per Ascend 910 server (MindSpore's NODE_PER_SERVER)
_PLANNED = (ParallelMode.SEMI_AUTO_PARALLEL, ParallelMode.AUTO_PARALLEL, ParallelMode.HYBRID_PARALLEL)


def _feasible_on_server(local: list[int]) -> bool:
    """MindSpore's ``IsFeasibleDeiveListOneServer`` on one server's local ranks (in group order)."""
    if len(local) in (1, SERVER):
        return True
    if len(local) == 4:
        return (local[3] - local[0] == 3 and (local[0] == 0 or local[3] == 7)) or (
            local[3] % 4 == local[1] % 4 and local[2] % 4 == local[0] % 4)
    if len(local) == 2:
        return local[1] - local[0] == 4 or (local[0] < 4 and local[1] < 4) or (local[0] >= 4 and local[1] >= 4)
    return False


def feasible(ranks: tuple[int, ...]) -> bool:
    """Whether HCCL on Ascend 910 servers can form a group of ``ranks`` (MindSpore's ``IsFeasibleDeiveList``)."""
    servers: dict[int, list[int]] = {}
    for rank in ranks:
        servers.setdefault(rank // SERVER, []).append(rank % SERVER)
    locals_ = list(servers.values())
    return all(local == locals_[0] for local in locals_) and _feasible_on_server(locals_[0])


def _groups(graph: Graph, node: Node, rank: int) -> Iterator[tuple[str, tuple[int, ...]]]:
    """(purpose, ranks) of each group ``node`` needs on ``rank`` (see the module docstring)."""
    mesh, s = graph.plan.mesh, node.strategy
    if s.partial_axes:
        yield "forward reduction", group_ranks(mesh, s.partial_axes, rank)
    for k, vid in enumerate(node.inputs):
        value = graph.values[vid]
        if k >= len(s.input_specs) or not value.is_array:
            continue
        want = s.input_spec(k)
        if value.kind == "param" and graph.plan.purpose == "train":
            used = {a for axes in want for a in axes}
            repeated = tuple(a for a in mesh.names if a not in used)
            if mesh.size(repeated) > 1:
                yield f"gradient reduction of Parameter '{value.name}'", group_ranks(mesh, repeated, rank)
        producer = graph.nodes[value.producer] if value.producer is not None else None
        have = (producer.strategy.output_spec(producer.outputs.index(vid))
                if producer is not None and producer.strategy is not None else graph.plan.value_specs.get(vid))
        for d, (src, dst) in enumerate(zip(have or (), want)):
            gone = tuple(a for a in src if a not in dst)
            if gone:
                yield f"gather of input {k} dimension {d}", group_ranks(mesh, gone, rank)


def check(graph: Graph, parallel_mode: str, global_rank: int | None) -> None:
    """Raise :class:`CommunicationGroupError` when ``device_target="Ascend"`` was set and a group the planned
    ``graph`` needs on the context's rank is not one HCCL forms on Ascend 910 servers."""
    mesh = graph.plan.mesh
    if not _context.current().ascend or parallel_mode not in _PLANNED or mesh is None or mesh.n_devices <= 1:
        return
    rank = (global_rank or 0) % mesh.n_devices
    for node in graph.node_list():
        if not node.is_op or node.strategy is None:
            continue
        for purpose, group in _groups(graph, node, rank):
            ranks = tuple(sorted(group))  # MindSpore lists a group's devices in rank order
            if len(ranks) > 1 and not feasible(ranks):
                raise CommunicationGroupError(
                    node.instance_name, node.scope or "(top level)", purpose, ranks,
                    f"a group must hold the same local ranks (rank % {SERVER}) on every server of {SERVER} devices, "
                    "and 1, 2 (4 apart, or on one half), 4 (0-3, 4-7, or two pairs equal mod 4) or 8 of them; "
                    "choose a strategy whose splits follow the servers (e.g. the 8 devices of a server on the "
                    "innermost split), or set device_target='GPU' / 'CPU', where any group works")
