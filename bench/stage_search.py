"""The stage search at LLM scale against the best Megatron-style configuration, priced by the same cost model.

``python -m bench.stage_search [--layers 96] [--devices 1536]``: a GPT-3 175B-shaped model (96 layers, hidden
12,288, 96 heads, sequence 2,048, vocabulary 51,200, global batch 1,536) built under ``no_init_parameters()``
(nothing drawn), traced from abstract shapes, searched for 1,536 GPUs of 80 GB (Adam), and priced as Megatron sets
it by hand: tensor 8 inside a node (the layer traced with Megatron's ``shard()`` hints, SEMI_AUTO; as traced, and
as its two clean variants, sequence parallel on or off, whichever is faster), pipeline p for p in 4, 8, 12, 16, 24,
32, 48, data 1,536 / 8p, the micro-batch count and recompute that fit, with plain 1F1B and with Megatron's
interleaved 1F1B (v chunks per stage for each v the search tries, where the layers divide into p x v chunks),
without and with the distributed optimizer. Then the search's
time as the depth (12 -> 96 layers) and the device count (8 -> 4,096) grow. Prints figures, asserts nothing.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time

import jax
import numpy as np

import graphpar as ms
from bench.stage_gpt import GPT3_175B, loss_network
from graphpar.compile.lowering.graph_trace import trace_network
from graphpar.compile.lowering.network_state import NetworkState
from graphpar.compile.plans.stage_profile import (MICROS, edge_costs, find_layers, layer_costs, layer_variants,
                                                  search_pipeline)
from graphpar.nn.utils import no_init_parameters
from graphpar.planner.stages import Cluster, best_fixed
from graphpar.planner.stages.report import differences
from graphpar.planner.stages.schedules import CHUNKS

MEGATRON_STAGES = (4, 8, 12, 16, 24, 32, 48)
GIB80 = 80 * 2 ** 30
ADAM = 2.0


def traced(cfg: dict, batch: int, mp: int | None = None):
    with no_init_parameters():
        net = loss_network(**cfg, mp=mp)
    avals = [jax.ShapeDtypeStruct((batch, cfg["seq"]), np.int32), jax.ShapeDtypeStruct((batch * cfg["seq"],), np.int32)]
    graph, _ = trace_network(NetworkState(net, net.trainable_params()), avals, "train")
    return net, graph


def megatron(cfg: dict, batch: int, cluster: Cluster, n_layers: int):
    """The best Megatron-style configurations, the model's own head: the layer with Megatron's hints on 8 devices
    as traced (its unhinted LayerNorms and residual Adds split the batch rows over the 8, as SEMI_AUTO plans an
    unhinted op), and with those token regions whole on each device or split (Megatron's sequence parallel: the
    layer's two variants, ``stage_sequence``), each without and with the distributed optimizer."""
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.SEMI_AUTO_PARALLEL)
    net, graph = traced({**cfg, "layers": 2}, batch, mp=8)
    layers = find_layers(net, graph)
    costs, sequence = layer_variants(layers, batch, [8], MICROS, cluster, ADAM,
                                     mode=ms.ParallelMode.SEMI_AUTO_PARALLEL)
    hinted = layer_costs(layers, batch, [8], MICROS, cluster, ADAM, mode=ms.ParallelMode.SEMI_AUTO_PARALLEL)
    head, tail = edge_costs(graph, layers, batch)
    out = {}
    for layer, seq, how in ((hinted, None, " (hinted layer as traced)"), (costs, sequence, "")):
        for shard, opt in ((False, ""), (True, " + distributed optimizer")):
            out[f"Megatron{how}{opt}"] = best_fixed(layer, n_layers, head, tail, cluster, batch, ADAM, 8,
                                                    MEGATRON_STAGES, shard, sequence=seq)
            interleaved = [q for v in CHUNKS if (q := best_fixed(layer, n_layers, head, tail, cluster, batch, ADAM, 8,
                                                                  MEGATRON_STAGES, shard, chunks=v, sequence=seq))
                           is not None]
            out[f"Megatron interleaved{how}{opt}"] = min(interleaved, key=lambda q: q.step_time, default=None)
    return out


def searched(cfg: dict, batch: int, devices: int):
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.AUTO_PARALLEL, auto_pipeline=True)
    started = time.process_time()
    net, graph = traced(cfg, batch)
    report = search_pipeline(net, graph, devices, "gpu", GIB80, ADAM)
    return report, time.process_time() - started


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=96)
    parser.add_argument("--devices", type=int, default=1536)
    parser.add_argument("--batch", type=int, default=1536)
    args = parser.parse_args(argv)
    cfg = {**GPT3_175B, "layers": args.layers}
    report, cpu = searched(cfg, args.batch, args.devices)
    print(report.text())
    best = report.search.best
    print(f"\nsearched: {best.describe()} (trace + profile + search {cpu:.2f} s CPU)")
    for name, plan in megatron(cfg, args.batch, report.cluster, args.layers).items():
        print(f"{name}: {plan.describe() if plan else 'no configuration fits'}")
        if plan is not None:
            print(f"  searched / {name} step time: {best.step_time / plan.step_time:.3f}; {name} vs searched: "
                  f"{differences(plan, best)}")
    print("\nsearch time (s; the model's trace is separate, it grows with the depth):")
    for layers, devices in ((12, args.devices), (96, args.devices), (cfg["layers"], 8), (cfg["layers"], 4096)):
        r, t = searched({**cfg, "layers": layers}, args.batch, devices)
        print(f"  {layers} layers, {devices} devices: layer profile {r.profile_s:.2f} s + stage search "
              f"{r.search_s:.2f} s ({r.search.priced} shapes); with the trace {t:.2f} s CPU; "
              f"{r.search.best.describe() if r.search.best else 'nothing fits'}")
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20:.2f} GiB")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
