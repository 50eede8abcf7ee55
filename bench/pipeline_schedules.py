"""Pipeline schedules (issue 24): each schedule's idle fraction, from the schedule and from a trace of a real run.

One model, 8 Dense layers (width ``WIDTH``), on 4 stages x 2 devices with 8 micro-batches, trained with:

* ``1f1b``: 2 layers per stage;
* interleaved 1F1B (``pipeline_interleave=True``): 2 segments per stage, one layer each (stage 0: layers 0 and 4);
* ``zero_bubble_v``: 2 segments per stage in a V (stage 0: layers 0 and 7), the backward split into B and W.

Per schedule it prints the idle fraction per stage (idle time inside the step over the step's length, averaged over
the stages) twice: **schedule**, the schedule's timeline under the cost model F = B = W = 1 per stage and micro-batch
(``compile.pipeline.schedule_cost``; a backward that is not split costs B + W; a segment's action 1/2 of a stage's),
and **trace**, the same schedule with each action's measured duration: ``PipelineProgram.trace_step`` runs the
actions one at a time, each waited for (on CPU the 8 devices are simulated on shared cores, so the wall clock of
concurrent groups would measure how the cores were shared, not the bubbles; see ``compile.pipeline.step_record``),
and the median over ``TRACED`` steps of each action's duration is placed on the schedule's dependencies: with each
action's process CPU time (``idle_trace_cpu``: the steadier figure on a machine shared with other work) and with its
wall-clock time (``idle_trace_wall``). It also prints the median CPU ms of F, B and W actions and the traced step's
length in CPU ms. A split backward's W repeats the activation-gradient work inside a chunk that its weight
gradients need (``compile.pipeline.stage_programs``); here each chunk is one Dense layer, so it repeats nothing and
B + W is the fused backward's work (W holds the gradient's all-reduce over the stage's devices). The last two rows
run interleaved 1F1B and zero_bubble_v again with 16 layers (2 per chunk), where W repeats one layer's input
gradient: compare their B + W with the interleaved fused B. There is no
hand-written JAX baseline: the figure is the schedule's, not a speed.

    python -m bench pipeline_schedules
"""

from __future__ import annotations

import numpy as np

import graphpar as ms
from graphpar import nn
from graphpar.compile.pipeline.schedule_cost import schedule_timeline
from graphpar.compile.pipeline.step_record import median_timeline
from graphpar.models.mlp import DenseStack

STAGES, MICRO, LAYERS, WIDTH, BATCH, TRACED = 4, 8, 8, 512, 512, 5
SCHEDULES = {"1f1b": ({"pipeline_interleave": False, "pipeline_scheduler": "1f1b"}, 1, False),
             "interleaved 1f1b (2 segments)": ({"pipeline_interleave": True, "pipeline_scheduler": "1f1b"}, 2, False),
             "zero_bubble_v": ({"pipeline_interleave": True, "pipeline_scheduler": "zero_bubble_v"}, 2, True)}
DEEP = ("interleaved 1f1b (2 segments)", "zero_bubble_v")  # also run with 2 layers per chunk: W's repeated work


def _network(segments: int, v_shape: bool, layers: int = LAYERS) -> DenseStack:
    rng = np.random.default_rng(0)
    net = DenseStack([rng.normal(0, 1 / np.sqrt(WIDTH), (WIDTH, WIDTH)).astype(np.float32) for _ in range(layers)])
    for i, layer in enumerate(net.layers):
        segment, stage = divmod(i * STAGES * segments // layers, STAGES)
        layer.pipeline_stage = STAGES - 1 - stage if v_shape and segment % 2 else stage
        if segments > 1:
            layer.pipeline_segment = segment
    return net


def _row(name: str, config: dict, segments: int, v_shape: bool, x: np.ndarray, y: np.ndarray,
         layers: int = LAYERS) -> dict:
    ms.reset_auto_parallel_context()
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", pipeline_stages=STAGES, pipeline_config=config)
    net = _network(segments, v_shape, layers)
    train = nn.TrainOneStepCell(nn.PipelineCell(nn.WithLossCell(net, nn.MSELoss()), MICRO),
                                nn.Momentum(net.trainable_params(), 0.001, 0.9))
    train(x, y)  # compiles every program
    traces = [train.program.trace_step([x, y])[1] for _ in range(TRACED)]
    schedule = schedule_timeline([list(o) for o in traces[0].orders], traces[0].layout)
    measured, measured_cpu = median_timeline(traces), median_timeline(traces, cpu=True)
    kinds = {k: [] for k in "FBW"}
    for trace in traces:
        for kind, sec in trace.kind_seconds(cpu=True).items():
            kinds[kind].append(sec)
    return {"schedule": name, "layers": layers, "idle_schedule": schedule.idle_total, "idle_trace_cpu": measured_cpu.idle_total,
            "idle_trace_cpu_per_stage": " ".join(f"{v:.2f}" for v in measured_cpu.idle),
            "idle_trace_wall": measured.idle_total,
            "F_ms": 1e3 * float(np.median(kinds["F"])), "B_ms": 1e3 * float(np.median(kinds["B"])),
            "W_ms": 1e3 * float(np.median(kinds["W"])) if kinds["W"] else "-",
            "traced_step_cpu_ms": 1e3 * measured_cpu.length}


def bench_pipeline_schedules() -> list[dict]:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(BATCH, WIDTH)).astype(np.float32)
    y = rng.normal(size=(BATCH, WIDTH)).astype(np.float32)
    rows = [_row(name, *spec, x, y) for name, spec in SCHEDULES.items()]
    rows += [_row(name, *SCHEDULES[name], x, y, layers=2 * LAYERS) for name in DEEP]
    ms.reset_auto_parallel_context()
    return rows
