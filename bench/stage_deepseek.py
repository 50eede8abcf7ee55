"""The stage search on a DeepSeek-V3-like MoE against a hand-set configuration, priced by the same cost model.

``python -m bench.stage_deepseek [--layers 61] [--devices 1024] [--batch 1024]``: the MoE GPT of
:mod:`bench.stage_moe` (DeepSeek-V3's public sizes; what it approximates is listed there and printed) built under
``no_init_parameters()`` (nothing drawn), traced from abstract shapes, searched for 1,024 GPUs of 80 GB (Adam) over
pipeline stages x tensor x data x expert parallel x micro-batches x schedule x recompute x optimizer sharding, and
priced as set by hand: dp 16 x mp 4 x pp 16 x ep 8 with 32 micro-batches (layers split as evenly as 61 allows, the
same recompute on every stage, with and without optimizer sharding; its layer on 4 devices is the same profiled
layer the search uses, the experts' inner dimension split 4 ways as the search splits them on a tensor group of 4).
When it fits no budget, its least memory (recompute everywhere) is printed with by how much it misses 80 GiB, and
the ratio is taken against its price there. Prints figures, asserts nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import resource
import sys
import time

import jax
import numpy as np

import graphpar as ms
from bench.stage_moe import DEEPSEEK_V3, loss_network
from graphpar.compile.lowering.graph_trace import trace_network
from graphpar.compile.lowering.network_state import NetworkState
from graphpar.compile.plans.stage_profile import MICROS, edge_costs, find_layers, layer_costs, search_pipeline
from graphpar.nn.transformer import MoEParallelConfig
from graphpar.nn.utils import no_init_parameters
from graphpar.planner.stages import Shape, assign, best_fixed
from graphpar.planner.stages.report import differences

GIB80 = 80 * 2 ** 30
ADAM = 2.0
HAND = dict(dp=16, mp=4, pp=16, ep=8, micro_batches=32)
APPROXIMATED = ("standard attention for MLA; every layer MoE (V3's first 3 are dense); GeLU two-matrix experts, "
                "GShard dense dispatch (capacity 1.1) in router groups of 1,024 tokens, softmax top-k; float32; "
                "LayerNorm")


def traced(cfg: dict, batch: int, parallel: MoEParallelConfig | None = None):
    with no_init_parameters():
        net = loss_network(**cfg, parallel=parallel)
    avals = [jax.ShapeDtypeStruct((batch, cfg["seq"]), np.int32), jax.ShapeDtypeStruct((batch * cfg["seq"],), np.int32)]
    graph, _ = trace_network(NetworkState(net, net.trainable_params()), avals, "train")
    return net, graph


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=DEEPSEEK_V3["layers"])
    parser.add_argument("--devices", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=1024, help="global batch (sequences of 4,096)")
    args = parser.parse_args(argv)
    cfg = {**DEEPSEEK_V3, "layers": args.layers}
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.AUTO_PARALLEL, auto_pipeline=True)
    started = time.process_time()
    net, graph = traced(cfg, args.batch)
    report = search_pipeline(net, graph, args.devices, "gpu", GIB80, ADAM)
    cpu = time.process_time() - started
    print(f"model: {cfg} (approximated: {APPROXIMATED})")
    print(report.text())
    best = report.search.best
    # the hand configuration: its layer built with MindSpore's MoE strategies for model_parallel 4 (the experts'
    # inner dimension split 4 ways; expert parallel is priced by the stage model), the rest of the layer planned
    # on its 4 devices by the same intra-op search
    hand_net, hand_graph = traced({**cfg, "layers": 2}, args.batch, MoEParallelConfig(1, HAND["mp"], 1))
    layers = find_layers(hand_net, hand_graph)
    costs = layer_costs(layers, args.batch, [HAND["mp"]], MICROS, report.cluster, ADAM)
    head, tail = edge_costs(graph, find_layers(net, graph), args.batch)
    print(f"\nsearched: {best.describe() if best else 'nothing fits'} (trace + profile + search {cpu:.2f} s CPU)")
    for shard in (False, True):
        hand = best_fixed(costs, args.layers, head, tail, report.cluster, args.batch, ADAM, HAND["mp"],
                          (HAND["pp"],), shard, ep=HAND["ep"], micro_batches=HAND["micro_batches"])
        name = f"dp 16 x mp 4 x pp 16 x ep 8, 32 micro-batches{' + optimizer sharding' if shard else ''}"
        if hand is None:  # its least memory (recompute everywhere) without a budget: by how much it misses
            micro = args.batch // HAND["dp"] // HAND["micro_batches"]
            shape = Shape(HAND["pp"], HAND["mp"], HAND["dp"], HAND["micro_batches"], micro, "1f1b", shard, HAND["ep"])
            least = assign(shape, args.layers, costs[(HAND["mp"], micro)], head, tail,
                           dataclasses.replace(report.cluster, memory=None), ADAM, fixed_recompute=True, even=True)
            peak = max(least.stage_memory)
            print(f"{name}: does not fit 80 GiB: {least.describe()}, {(peak - GIB80) / 2 ** 30:.1f} GiB over")
            hand = least
        else:
            print(f"{name}: {hand.describe()}")
        if best is not None:
            print(f"  searched / hand step time: {best.step_time / hand.step_time:.3f}; hand vs searched: "
                  f"{differences(hand, best)}")
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20:.2f} GiB")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
