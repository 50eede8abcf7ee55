"""The SEMI_AUTO / AUTO / HYBRID parallel plan: trace, plan with the pass pipeline, lower with pinned layouts.

``PlannedPlan.prepare`` runs once per input signature, before the step is jitted: it traces the network into the
graph IR with global shapes, builds the base mesh from the user's device matrices, runs the pipeline
(``parallel.pipeline``), creates the one global ``jax.sharding.Mesh``, and writes the begin dump. The objective is
then the planned graph evaluated by ``compile.interpret`` — the loss of the *global* batch, whose gradient is the
gradient of the loss the user wrote (see docs/porting_from_mindspore.md for how this relates to MindSpore's
``gradients_mean``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec, SingleDeviceSharding

from graphpar._context import AutoParallelContext, ParallelMode
from graphpar._logging import notice_once
from graphpar.compile.interpret import evaluate
from graphpar.compile.plan import ExecutionPlan, _objective_of, call_network
from graphpar.common.parameter import Parameter
from graphpar.compile.state import NetworkState
from graphpar.errors import ConfigError
from graphpar.ir.graph import Graph
from graphpar.ir.trace import trace

from graphpar.parallel.mesh import make_mesh, mesh_axis_sizes
from graphpar.parallel.passes.context import PlanContext
from graphpar.parallel.pipeline import run_pipeline
from graphpar.parallel.strategy import MeshInfo, Spec, to_partition_spec


def _hint_matrices(graph: Graph, ctx_dims, n: int) -> list[tuple[int, ...]]:
    """Device matrices (with repeat) of the user's hints, to choose a mesh that can express all of them."""
    out = []
    for node in graph.node_list():
        if node.hint is None:
            continue
        dims = ctx_dims(node, graph)
        if dims is None or len(node.hint) != len(dims.inputs):
            continue
        splits: dict[str, int] = {}
        for row, entry in zip(dims.inputs, node.hint):
            for label, s in zip(row, entry):
                if label is not None and s > 1:
                    splits[label] = s
        core = [splits.get(l, 1) for l in dims.order]
        total = int(np.prod(core)) if core else 1
        if total and n % total == 0:
            repeat = [n // total] if total < n else []
            out.append(tuple(repeat + core if dims.repeat_first else core + repeat))
    return out


def dataset_specs(graph: Graph, mesh: MeshInfo, dataset_strategy: Any) -> dict[int, Spec]:
    inputs = [v for v in graph.inputs if graph.values[v].kind == "input"]
    specs: dict[int, Spec] = {}
    if isinstance(dataset_strategy, tuple):
        if len(dataset_strategy) != len(inputs):
            raise ConfigError("set_auto_parallel_context", "dataset_strategy", dataset_strategy,
                              reason=f"dataset_strategy has {len(dataset_strategy)} entries but the network takes "
                                     f"{len(inputs)} inputs")
    for k, vid in enumerate(inputs):
        shape = graph.values[vid].shape
        if isinstance(dataset_strategy, tuple):
            splits = dataset_strategy[k]
            if len(splits) != len(shape):
                raise ConfigError("set_auto_parallel_context", "dataset_strategy", dataset_strategy,
                                  reason=f"entry {k} {splits} does not match input {k}'s rank (shape {shape})")
            names = list(mesh.names)
            spec = []
            for d, (s, size) in enumerate(zip(splits, shape)):
                taken, acc = [], 1
                while acc < s and names:
                    taken.append(names.pop(0))
                    acc *= mesh.size(taken[-1:])
                if acc != s or size % s:
                    raise ConfigError("set_auto_parallel_context", "dataset_strategy", dataset_strategy,
                                      reason=f"input {k} dim {d} (size {size}) cannot be split {s} on "
                                             f"{mesh.n_devices} devices")
                spec.append(tuple(taken))
            specs[vid] = tuple(spec)
        elif dataset_strategy == "full_batch" or not shape:
            specs[vid] = tuple(() for _ in shape)
        else:
            names = list(mesh.names)
            while names and shape[0] % mesh.size(tuple(names)):
                names.pop()
            specs[vid] = (tuple(names),) + tuple(() for _ in shape[1:])
    return specs


class PlannedPlan(ExecutionPlan):
    name = "planned"

    def __init__(self, network: Any, devices: Sequence[jax.Device], pctx: AutoParallelContext,
                 n_virtual: int | None = None):
        self.network = network
        self.devices = list(devices)
        self.pctx = pctx
        self.n = n_virtual or len(self.devices)
        self.pynative = n_virtual is not None
        local = [i for i, d in enumerate(self.devices) if d.process_index == jax.process_index()]
        self.draws = self.n if self.pynative else len(local)
        self.first_rank = 0 if self.pynative else local[0]
        self.mesh = None
        self.info: MeshInfo | None = None
        self._graphs: dict[tuple, Graph] = {}
        self._last: Graph | None = None
        if pctx.parallel_mode == ParallelMode.AUTO_PARALLEL and pctx.search_mode != "sharding_propagation":
            notice_once("search-mode", f"AUTO_PARALLEL with search_mode={pctx.search_mode!r}: graphpar has no "
                        "cost-model search yet; ops without a shard() strategy get data parallel (as "
                        "SEMI_AUTO_PARALLEL)")
        if pctx.parallel_mode == ParallelMode.HYBRID_PARALLEL:
            notice_once("hybrid", "HYBRID_PARALLEL is planned as SEMI_AUTO_PARALLEL (hinted ops keep their "
                        "strategies, the others get data parallel)")

    # --- planning ----------------------------------------------------------------------------------------------
    def prepare(self, ns: NetworkState, inputs: Sequence[Any], purpose: str = "train") -> Graph:
        key = (purpose, ns.epoch, tuple((tuple(np.shape(x)), str(np.dtype(getattr(x, "dtype", np.float32))))
                                        for x in inputs))
        graph = self._graphs.get(key)
        if graph is None:
            graph = self._plan(ns, inputs, purpose)
            self._graphs[key] = graph
        self._last = graph
        return graph

    def _trace(self, ns: NetworkState, inputs: Sequence[Any], purpose: str) -> Graph:
        pvals, rvals = ns.params.values(), ns.rest.values()
        avals = [jax.ShapeDtypeStruct(tuple(np.shape(x)), jnp.asarray(x).dtype if not hasattr(x, "dtype")
                                      else x.dtype) for x in inputs]
        rest_kinds = [("param" if isinstance(h, Parameter) else "state", n)
                      for h, n in zip(ns.rest.holders, ns.rest.names())]
        kinds = ([("param", n) for n in ns.param_names()] + rest_kinds
                 + [("input", f"input{i}") for i in range(len(inputs))])

        def train_fn(pv, rv, xs):
            model = ns.merge(ns.params.unflatten(pv), ns.rest.unflatten(rv))
            loss = call_network(model, xs)
            return [loss] + jax.tree.leaves(ns.split_after(model))

        def forward_fn(pv, rv, xs):
            model = ns.merge(ns.params.unflatten(pv), ns.rest.unflatten(rv))
            return jax.tree.leaves(call_network(model, xs))

        fn = train_fn if purpose == "train" else forward_fn
        graph = trace(fn, (pvals, rvals, avals), kinds, name=f"{type(ns.network).__name__}_{purpose}")
        if purpose == "forward":
            out_struct = jax.eval_shape(lambda pv, rv, xs: call_network(
                ns.merge(ns.params.unflatten(pv), ns.rest.unflatten(rv)), xs), pvals, rvals, avals)
            graph.meta["out_treedef"] = jax.tree.structure(out_struct)
        return graph

    def _plan(self, ns: NetworkState, inputs: Sequence[Any], purpose: str) -> Graph:
        graph = self._trace(ns, inputs, purpose)
        probe = PlanContext(MeshInfo(("m0",), (self.n,)), self.pctx.parallel_mode, self.pctx.search_mode)
        sizes = mesh_axis_sizes(self.n, _hint_matrices(graph, probe.dims, self.n))
        info = MeshInfo(tuple(f"m{i}" for i in range(len(sizes))), sizes)
        if self.info is not None and self.info != info:
            raise ConfigError("set_auto_parallel_context", "parallel_mode", self.pctx.parallel_mode,
                              reason="the network's strategies need a different device mesh for another input "
                                     "shape; graphpar keeps one mesh per program")
        self.info = info
        if not self.pynative and self.mesh is None:
            self.mesh = make_mesh(self.devices, [sizes])
        ctx = PlanContext(info, self.pctx.parallel_mode, self.pctx.search_mode)
        ctx.input_specs = dataset_specs(graph, info, self.pctx.dataset_strategy)
        graph = run_pipeline(graph, ctx)
        graph.meta["mesh"] = info
        graph.meta["purpose"] = purpose
        from graphpar.dump.writer import maybe_dump_begin

        maybe_dump_begin(graph, self)
        return graph

    # --- placement ---------------------------------------------------------------------------------------------
    def _sharding(self, spec: Spec) -> jax.sharding.Sharding:
        if self.mesh is None:
            return SingleDeviceSharding(self.devices[0])
        return NamedSharding(self.mesh, to_partition_spec(spec))

    def _value_spec(self, kind: str, name: str) -> Spec | None:
        graph = self._last
        if graph is None:
            return None
        for vid in graph.inputs:
            value = graph.values[vid]
            if value.kind == kind and value.name == name:
                return graph.meta["value_specs"][vid]
        return None

    def param_sharding(self, name: str, shape: tuple[int, ...]) -> jax.sharding.Sharding:
        """Where a Parameter (or other state leaf) named ``name`` is stored: its consumers' layout."""
        spec = self._value_spec("param", name)
        return self._sharding(spec if spec is not None else tuple(() for _ in shape))

    def state_sharding(self, shape):
        return self._sharding(tuple(() for _ in shape))

    def input_sharding(self, index, shape):
        spec = self._value_spec("input", f"input{index}")
        return self._sharding(spec if spec is not None else tuple(() for _ in shape))

    def check_batch(self, shapes):
        return None  # dataset_specs already splits only what divides

    # --- running -----------------------------------------------------------------------------------------------
    def _graph_for(self, purpose: str, inputs: Sequence[Any]) -> Graph:
        key_shapes = tuple((tuple(np.shape(x)), str(x.dtype)) for x in inputs)
        for (p, _, shapes), graph in self._graphs.items():
            if p == purpose and shapes == key_shapes:
                return graph
        raise RuntimeError(f"graphpar: no plan was prepared for {purpose} inputs {key_shapes}")

    def objective(self, ns, params, rest, inputs, sens):
        if self.pynative:
            return super().objective(ns, params, rest, inputs, sens)
        graph = self._graph_for("train", inputs)
        flat = jax.tree.leaves(params) + jax.tree.leaves(rest) + list(inputs)
        loss, *new_rest = evaluate(graph, flat, self.mesh)
        return _objective_of(loss, sens), (jnp.mean(jnp.asarray(loss, jnp.float32)), ns.rest.unflatten(new_rest))

    def forward(self, ns, params, rest, inputs):
        if self.pynative:
            return super().forward(ns, params, rest, inputs)
        graph = self._graph_for("forward", inputs)
        flat = jax.tree.leaves(params) + jax.tree.leaves(rest) + list(inputs)
        outs = evaluate(graph, flat, self.mesh)
        return jax.tree.unflatten(graph.meta["out_treedef"], outs)


def planned_plan(network, devices, pctx, n_virtual=None) -> PlannedPlan:
    return PlannedPlan(network, devices, pctx, n_virtual)



