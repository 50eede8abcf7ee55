"""``make bench``: graphpar against hand-written JAX, measured in the same run; prints ratios, asserts nothing.

``python -m bench [NAME ...] [--busy]``: only the named sections (step, first_step, planning, ...); ``--busy`` keeps
one core busy with a spinning process while measuring (the figures "with the other core busy")."""

from __future__ import annotations

import os
import subprocess
import sys

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")


def _table(rows: list[dict], keys: list[str]) -> str:
    def fmt(v):
        return f"{v:.3f}" if isinstance(v, float) else str(v)

    widths = [max(len(k), *(len(fmt(r.get(k, ""))) for r in rows)) for k in keys]
    lines = ["  ".join(k.ljust(w) for k, w in zip(keys, widths))]
    lines += ["  ".join(fmt(r.get(k, "")).ljust(w) for k, w in zip(keys, widths)) for r in rows]
    return "\n".join(lines)


def _spinner() -> subprocess.Popen:
    """A process that keeps one core busy (``--busy``): another program competing for the CPU, reproducibly, as
    other work does on a shared machine (graphpar's per-call Python suffers more from contention than jit's C++
    fast path: issue 28)."""
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def main(argv: list[str]) -> int:
    spinner = _spinner() if "--busy" in argv else None
    try:
        return _main([a for a in argv if a != "--busy"], busy=spinner is not None)
    finally:
        if spinner is not None:
            spinner.kill()
            spinner.wait()


def _main(argv: list[str], busy: bool) -> int:
    only = set(argv)
    import jax

    print(f"graphpar bench on {jax.device_count()} {jax.devices()[0].platform} devices "
          f"({os.cpu_count()} CPU cores{'; one kept busy by a spinning process (--busy)' if busy else ''}); ratios "
          f"are graphpar / hand-written, measured interleaved\n", flush=True)
    if "calibrate" in only:  # only when asked: it writes the planner's calibration file
        from bench.calibrate import main as calibrate

        calibrate()
        only.discard("calibrate")
        if not only:
            return 0
    if not only or "step" in only:
        from bench.step_time import bench_call_path, bench_data_parallel, bench_dispatch, bench_megatron

        rows = [bench_data_parallel([32, 16, 16], 16, calls=50, rounds=90),
                bench_data_parallel([32, 16, 16], 16, calls=50, rounds=90, control=True),
                bench_data_parallel([1024] * 5, 256, calls=5), bench_megatron(), bench_dispatch()]
        print("Train step time (issues 2, 3 and 11; goal ratio <= 1.02; the Megatron baseline gives XLA only the "
              "parameter and batch shardings)")
        print(_table(rows, ["model", "batch", "graphpar_ms", "handwritten_ms", "ratio", "compile_s"]), flush=True)
        print("The tiny MLP's ratio split (issue 28): graphpar's executable called directly vs hand-written, "
              "graphpar's call vs that direct call, and that call's parts, each against the one below: BoundStep.run "
              "(executable + write-back + in-flight limit) vs the direct call, BoundStep.repeat (the loop's checks) vs "
              "run, the Cell call vs repeat")
        print(_table([bench_call_path([32, 16, 16], 16)], ["model", "batch", "program_vs_hand", "call_vs_program",
                                                            "run_vs_program", "repeat_vs_run", "call_vs_repeat",
                                                            "call_vs_program_cpu"]),
              "\n", flush=True)
    if not only or "planning" in only:
        from bench.planning import bench_planning, bench_planning_gpt

        rows = [bench_planning(64), bench_planning(256), bench_planning_gpt()]
        print("Compile-stage cost (issue 11; goals: fraction_of_compile <= 0.25, lower_ratio <= 1.3): graphpar's "
              "trace + plan + lower against XLA's compile, its lowering against JAX lowering the same sharded program")
        print(_table(rows, ["model", "nodes", "trace_s", "trace_plan_s", "lower_s", "per_node_ms", "xla_compile_s",
                            "fraction_of_compile", "jax_lower_s", "lower_ratio", "lower_ratio_spread"]))
        print("the same in CPU seconds of the process (steadier on a loaded machine):")
        print(_table(rows, ["model", "trace_plan_cpu_s", "lower_cpu_s", "xla_compile_cpu_s", "fraction_cpu",
                            "lower_ratio_cpu", "jax_lower_fraction"]))
        for r in rows:
            print(f"  {r['model']}: (trace + plan + lower) / XLA compile = {r['fraction_of_compile']:.2f} wall, "
                  f"{r['fraction_cpu']:.2f} CPU (goal <= 0.25); lowering / JAX's lowering = {r['lower_ratio']:.2f} "
                  f"wall, {r['lower_ratio_cpu']:.2f} CPU (goal <= 1.3); JAX's own lowering alone = "
                  f"{r['jax_lower_fraction']:.2f} of XLA's compile")
        print(f"per-node time 256 layers / 64 layers: {rows[1]['per_node_ms'] / rows[0]['per_node_ms']:.2f} "
              "(1.0 = linear)")
        print("passes (ms):", {r["model"]: {k: round(v, 1) for k, v in r["passes_ms"].items()} for r in rows}, "\n",
              flush=True)
    if not only or "first_step" in only:
        from bench.first_step import CPU_SPLIT, bench_cached_first_step, bench_first_step

        rows = [bench_first_step("gpt"), bench_first_step("megatron")]
        print("First step in a fresh process, XLA's persistent cache off (issue 28; goal share_of_compile <= 0.25): "
              "graphpar's share = the call up to the step's dispatch - XLA's compile of the step; first_run_s: the "
              "devices running that first step, run_s: a later step")
        print(_table(rows, ["model", "first_step_s", "dispatched_s", "xla_step_s", "xla_other_s", "graphpar_s",
                            "share_of_compile", "trace_plan_s", "lower_s", "first_run_s", "run_s"]))
        print("the same in CPU seconds of the process (steadier on a loaded machine):")
        print(_table(rows, ["model", "dispatched_cpu_s", "xla_step_cpu_s", "graphpar_cpu_s", "share_cpu"]))
        from bench.first_step_jax import bench_jax_cached_first_step

        cached = [bench_cached_first_step(m) for m in ("gpt_onehot", "megatron", "gpt")]
        cached.append(bench_jax_cached_first_step())
        print("XLA's persistent compilation cache (issue 28; goal cached_vs_first <= 0.3): the first step of a "
              "script's second run against its first run's, one fresh cache directory (gpt: sparse labels, checked "
              "beside the step; gpt_onehot: the same model on one-hot labels; gpt (plain JAX): a hand-written step "
              "of the same model with JAX's cache on, the floor); the second run's first step = dispatched + the "
              "devices' first run of it (later_step_s: a later step)")
        print(_table(cached, ["model", "first_run_s", "second_run_s", "cached_vs_first", "cached_vs_first_cpu",
                              "second_dispatched_s", "second_device_run_s", "later_step_s", "second_prefetched",
                              "second_xla_read_s", "second_trace_plan_s", "second_lower_s"]))
        print("the second run's first step in CPU seconds: tracing the network, planning, the executable cache's "
              "key, the step's autodiff trace and lowering, XLA's cache read (or the wait for graphpar's prefetched "
              "read, whose CPU lands mostly in tracing), the rest (optimizer state, placing parameters and batch), "
              "the devices' first run, the whole step:")
        print(_table(cached, ["model", *(f"second_{key}" for key in CPU_SPLIT)]), "\n", flush=True)
    if not only or "compile_time" in only:
        from bench.compile_time import bench_compile_time

        print("XLA compile of the train step by mixed-precision level, CPU seconds (issue 28; goal: O2 not ~2x O0 "
              "because of its overflow check and loss-scale update; O3 has the same casts without them)")
        print(_table(bench_compile_time(), ["model", "O0_cpu_s", "O2_cpu_s", "O3_cpu_s", "O2/O0", "O3/O0",
                                            "O0_hlo_lines", "O2_hlo_lines"]), "\n", flush=True)
    if not only or "planner" in only:
        from bench.planner import bench_cost_model, bench_planning_per_node

        rows = [bench_planning_per_node(33), bench_planning_per_node(333)]
        print("Planner cost per op node (issue 9; goal: ~10k-node per-node time within 1.5x of ~1k's)")
        print(_table(rows, ["layers", "nodes", "trace_and_plan_s", "plan_s", "plan_us_per_node"]))
        print(f"per-node planning time {rows[1]['nodes']} / {rows[0]['nodes']} nodes: "
              f"{rows[1]['plan_us_per_node'] / rows[0]['plan_us_per_node']:.2f}")
        print("passes (ms):", {r["nodes"]: r["passes_ms"] for r in rows})
        cost = [bench_cost_model(3), bench_cost_model(12)]
        print("Cost model on 8 vs 4,096 devices (issue 9; goal ratio <= 2)")
        print(_table(cost, ["devices", "axes", "us_per_pricing"]))
        print(f"4,096 / 8 devices: {cost[1]['us_per_pricing'] / cost[0]['us_per_pricing']:.2f}\n", flush=True)
    if not only or "pipeline" in only:
        from bench.pipeline import bench_pipeline

        print("Data pipeline (issues 4, 15): images/s vs a plain numpy loop, interleaved rounds")
        print(bench_pipeline(), "\n", flush=True)
    if not only or "resnet" in only:
        from bench.resnet import bench_resnet

        steps, feeding = bench_resnet()
        print("ResNet-18 train step, DATA_PARALLEL on the 8 devices, 32x32 images (issue 4; goal ratio <= 1.05)")
        print(_table(steps, ["model", "batch", "graphpar_ms", "handwritten_ms", "ratio", "compile_s", "img_s"]))
        print("Feeding ResNet-18 (issue 4; goal: pipeline >= 3x what training consumes)")
        print(feeding, "\n", flush=True)
    if not only or "throughput" in only:
        from bench.throughput import bench_amp, bench_feeding_overlap, bench_two_processes

        print("Feeding ResNet-18 DATA_PARALLEL from the pipeline vs pre-staged batches (issue 15; goal <= 1.03)")
        print(_table([bench_feeding_overlap()], ["model", "global_batch", "prestaged_ms", "fed_prefetch2_ms",
                                                  "fed_no_prefetch_ms", "fed_vs_prestaged", "fed_vs_prestaged_mean_95",
                                                  "no_prefetch_vs_prestaged", "control_prestaged_vs_itself",
                                                  "control_mean_95", "feed_host_ms"]), flush=True)
        print("ResNet-18 mixed precision (issue 15): step time and 20-step loss vs float32 (bfloat16 on CPU)")
        print(_table(bench_amp(), ["amp_level", "width", "batch", "step_ms", "vs_float32", "max_rel_loss_diff",
                                   "max_diff_over_first_loss", "loss_first_last"]), flush=True)
        print("2 processes x 4 devices, 3x512 MLP DATA_PARALLEL vs plain JAX over jax.distributed (goal <= 1.05)")
        print(_table([bench_two_processes()], ["model", "processes", "devices", "global_batch", "graphpar_ms",
                                               "jax_distributed_ms", "ratio"]), "\n", flush=True)
    if not only or "feeding" in only:
        from bench.feeding import bench_feeding

        on_cpu = jax.default_backend() == "cpu"
        print("Model.train from the CIFAR pipeline with default dataset settings (workers and read-ahead chosen by "
              "graphpar) vs the same step on pre-staged batches (issue 28; goal on a GPU: vs_prestaged >= 0.95); "
              "the one-worker row is graphpar's default before issue 28")
        rows = bench_feeding(*(("resnet18", 32, "f32", 24) if on_cpu else ("resnet50", 256, "bf16", 48)),
                             rounds=3 if on_cpu else 1)
        print(_table(rows, ["model", "feeding", "batch", "device", "img_s", "vs_prestaged", "per_round",
                            "first_epoch_img_s", "compile_s", "train_call_s", "cpu_ms_per_step", "tuning"]), "\n",
              flush=True)
    if "resnet50" in only or (not only and jax.default_backend() != "cpu"):
        from bench.resnet50_accel import bench_resnet50

        print("ResNet-50, 32x32 images, one train step per call on pre-staged batches (issue 15's accelerator row): "
              "graphpar / hand-written flax (NHWC, State pytrees and flat leaves); runs by default on an "
              "accelerator only (full-width ResNet-50 on a CPU takes long). Same function on one device; on "
              "several, graphpar's DATA_PARALLEL normalises per device and flax over the global batch")
        on_cpu = jax.default_backend() == "cpu"  # a CPU step takes about a second: fewer, shorter rounds
        rows = list(bench_resnet50(8 if on_cpu else 256, calls=2 if on_cpu else 20, rounds=3 if on_cpu else 5,
                                   levels=("O0", "O3") if on_cpu else ("O0", "O2", "O3"), layouts=("NHWC",),
                                   flax_states=("pytree", "flat")))
        print(_table(rows, ["graphpar", "precision", "flax_state", "batch", "devices", "graphpar_ms", "flax_ms",
                            "ratio", "graphpar_img_s", "flax_img_s"]), "\n", flush=True)
    if not only or "checkpoint" in only:
        from bench.checkpoint import bench_save, bench_step_overhead

        print("Checkpoints (issue 6): 100 MB sharded save, graphpar / orbax called directly (goal ratio >= 0.9)")
        print(_table([bench_save()], ["model_mb", "graphpar_mb_s", "orbax_mb_s", "ratio"]))
        print("Step time with ModelCheckpoint(save_checkpoint_steps=10, async_save=True) / without")
        print(_table([bench_step_overhead()], ["steps", "plain_ms", "ckpt_every_10_async_ms", "overhead"]), "\n",
              flush=True)
    if not only or "bigmodels" in only:
        from bench.bigmodels import bench_bigmodels

        rows, scheduled, baseline = bench_bigmodels()
        print("Bigger models (issue 12): DATA_PARALLEL on the 8 devices, 8 FFN blocks d=128, batch 2048, Adam; "
              "per device: parameters + optimizer state (state_mb) and the step's temp memory (temp_mb)")
        print(_table(rows, ["feature", "off_ms", "on_ms", "on/off", "state_mb_off", "state_mb_on", "temp_mb_off",
                            "temp_mb_on"]))
        print(f"with XLA's memory scheduler on CPU: temp {scheduled['plain']:.1f} MB -> recompute "
              f"{scheduled['recompute']:.1f} MB; parallel optimizer level1 {scheduled['level1']:.1f} MB -> level3 "
              f"{scheduled['level3']:.1f} MB")
        print("Parallel optimizer against ZeRO written by hand in JAX (goal ratio <= 1.05)")
        print(_table([baseline], ["model", "graphpar_ms", "handwritten_ms", "ratio"]), "\n", flush=True)
    if not only or "search" in only:
        from bench.search import bench_search

        depth, devices = bench_search()
        keys = ["layers", "devices", "nodes", "variables", "choices", "edges", "search_s", "build_s", "solve_s",
                "plan_s", "optimal"]
        print("AUTO_PARALLEL search time, GPT-style model (issue 10; goal: 48 layers <= 2x 12 layers)")
        print(_table(depth, keys))
        print(f"search time 48 layers / 12 layers: {depth[2]['search_s'] / depth[1]['search_s']:.2f}")
        print(_table(devices, keys))
        print(f"search time 1,024 devices / 8 devices: {devices[1]['search_s'] / devices[0]['search_s']:.2f}", "\n",
              flush=True)
        from bench.search import bench_search_memory

        print("Predicted per-device peak memory vs the compiled program's memory_analysis() (issue 10; goal: within "
              "+-15 %, never more than 10 % under)")
        print(_table(bench_search_memory(), ["model", "batch", "plan", "predicted_mb", "compiled_mb", "ratio"]), "\n",
              flush=True)
    if not only or "pipeline_parallel" in only:
        from bench.pipeline_parallel import bench_pipeline_parallel

        print("Pipeline parallel (issue 12): step time and memory per device, pipelining on/off; ratio = graphpar / "
              "a hand-written 2-stage JAX GPipe pipeline")
        print(_table(bench_pipeline_parallel(), ["setup", "micro", "graphpar_ms", "handwritten_gpipe_ms", "ratio",
                                                 "state_mb_per_device", "handwritten_state_mb",
                                                 "peak_residual_mb_per_device", "transfers_per_step"]), "\n",
              flush=True)
    if not only or "pipeline_schedules" in only:
        from bench.pipeline_schedules import bench_pipeline_schedules

        print("Pipeline schedules (issue 24): idle fraction per stage, 4 stages x 2 devices, 8 micro-batches; "
              "'schedule': cost model F = B = W = 1 per stage, 'trace': each action's measured time (run one at a "
              "time) placed on the schedule; goal: interleaved < 1f1b, zero_bubble_v < both")
        print(_table(bench_pipeline_schedules(), ["schedule", "layers", "idle_schedule", "idle_trace_cpu",
                                                  "idle_trace_cpu_per_stage", "idle_trace_wall", "F_ms", "B_ms",
                                                  "W_ms", "traced_step_cpu_ms"]), "\n", flush=True)
    if not only or "stages" in only:
        from bench.stage_search import main as bench_stages

        print("Pipeline stage search at LLM scale (issue 25): GPT-3 175B on 1,536 GPUs of 80 GB, searched against the "
              "best Megatron-style configuration under the same cost model; search time against depth and devices")
        bench_stages([])
        print(flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
