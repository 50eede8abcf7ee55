"""One process of ``bench.throughput.bench_two_processes`` (not run by itself): joins the 2-process job from the
GRAPHPAR_* variables, builds the same 3-layer 512-wide MLP step in graphpar (DATA_PARALLEL over the 8 devices of
the job) and in plain JAX (``jax.jit`` over a mesh of the job's devices, batch split, parameters replicated), and
times both interleaved; process 0 prints one JSON line. Usage: _two_process_worker.py CALLS ROUNDS
"""

import json
import sys

import numpy as np


def main(calls: int, rounds: int) -> None:
    import jax
    import jax.numpy as jnp
    import optax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    import graphpar as ms
    from graphpar import nn
    from graphpar.communication import init
    from graphpar.models.mlp import DenseStack

    sys.path.insert(0, ".")
    from bench.timing import compare

    init()
    ms.set_auto_parallel_context(parallel_mode="data_parallel", gradients_mean=True)
    width, local_batch = 512, 128
    rng = np.random.default_rng(jax.process_index())
    x = rng.normal(size=(local_batch, width)).astype(np.float32)
    y = rng.normal(size=(local_batch, width)).astype(np.float32)
    init_rng = np.random.default_rng(0)
    weights = [init_rng.normal(0, width ** -0.5, (width, width)).astype(np.float32) for _ in range(3)]

    net = DenseStack([w.T.copy() for w in weights])
    train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params(), 0.01))
    placed = train.program.place_inputs([x, y])
    ours = lambda: train.program.run_step(placed)  # noqa: E731

    mesh = Mesh(np.array(jax.devices()), ("d",))
    batch_sh, repl = NamedSharding(mesh, P("d")), NamedSharding(mesh, P())
    params = [jax.make_array_from_callback(w.shape, repl, lambda idx, w=w: w[idx]) for w in weights]
    biases = [jax.make_array_from_callback((width,), repl, lambda idx: np.zeros(width, np.float32)[idx])
              for _ in weights]
    gx = jax.make_array_from_process_local_data(batch_sh, x)
    gy = jax.make_array_from_process_local_data(batch_sh, y)
    tx = optax.sgd(0.01)
    state = {"p": (params, biases)}
    state["o"] = jax.jit(tx.init, out_shardings=repl)(state["p"])

    def loss_fn(p, xb, yb):
        h = xb
        for i, (w, b) in enumerate(zip(*p)):
            h = h @ w + b
            if i < 2:
                h = jax.nn.relu(h)
        return jnp.mean((h - yb) ** 2)

    @jax.jit
    def step(p, o, xb, yb):
        loss, g = jax.value_and_grad(loss_fn)(p, xb, yb)
        u, o = tx.update(g, o, p)
        return optax.apply_updates(p, u), o, loss

    def hand():
        state["p"], state["o"], loss = step(state["p"], state["o"], gx, gy)
        return loss

    ours(), hand()
    t_ours, t_hand, ratio = compare(ours, hand, calls=calls, rounds=rounds, warmup=2)
    if jax.process_index() == 0:
        print(json.dumps({"model": "MLP 3x512 DP", "processes": jax.process_count(),
                          "devices": jax.device_count(), "global_batch": local_batch * jax.process_count(),
                          "graphpar_ms": round(t_ours * 1e3, 2), "jax_distributed_ms": round(t_hand * 1e3, 2),
                          "ratio": round(ratio, 3)}), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
