"""A MindSpore user's Mixture of Experts network (in our own words, small), as MindSpore's parallel transformer
is used: ``TransformerOpParallelConfig(data_parallel=8, model_parallel=1, expert_parallel=4)`` and ``MoEConfig``
from ``mindspore.parallel._transformer``, the ``MoE`` layer between two ``Dense`` layers, its load-balancing loss
added to the task loss in the loss cell, trained by ``Model.train`` with ``LossMonitor`` under
SEMI_AUTO_PARALLEL with ``full_batch``. Only the imports differ from MindSpore's.

    python moe_port.py [semi_auto_parallel|stand_alone]
"""

import sys

import numpy as np

import graphpar as ms
import graphpar.dataset as ds
from graphpar import nn, ops, train
from graphpar.parallel._transformer import MoEConfig, TransformerOpParallelConfig
from graphpar.parallel._transformer.moe import MoE

BATCH, FEATURES, HIDDEN, CLASSES = 32, 16, 32, 4
parallel_config = TransformerOpParallelConfig(data_parallel=8, model_parallel=1, expert_parallel=4)
moe_config = MoEConfig(expert_num=8, capacity_factor=2.0, aux_loss_factor=0.05, num_experts_chosen=2)


class Network(nn.Cell):
    def __init__(self):
        super().__init__()
        dp = parallel_config.data_parallel
        self.dense_in = nn.Dense(FEATURES, HIDDEN)
        self.dense_in.matmul.shard(((dp, 1), (1, 1)))
        self.dense_in.bias_add.shard(((dp, 1), (1,)))
        self.moe = MoE(hidden_size=HIDDEN, ffn_hidden_size=2 * HIDDEN, dropout_rate=0.0, hidden_act="relu",
                       moe_config=moe_config, parallel_config=parallel_config.moe_parallel_config)
        self.dense_out = nn.Dense(HIDDEN, CLASSES)
        self.dense_out.matmul.shard(((dp, 1), (1, 1)))
        self.dense_out.bias_add.shard(((dp, 1), (1,)))

    def construct(self, x):
        hidden, aux_loss = self.moe(self.dense_in(x))
        return self.dense_out(hidden), aux_loss


class NetWithLoss(nn.Cell):
    def __init__(self, network):
        super().__init__()
        self.network = network
        self.loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
        self.add = ops.Add()

    def construct(self, x, label):
        logits, aux_loss = self.network(x)
        return self.add(self.loss(logits, label), aux_loss)


def create_dataset():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(4 * BATCH, FEATURES)).astype(np.float32)
    label = np.argmax(x @ rng.normal(size=(FEATURES, CLASSES)), axis=1).astype(np.int32)
    return ds.GeneratorDataset(list(zip(x, label)), ["x", "label"], shuffle=False).batch(BATCH)


def main(mode: str) -> None:
    ms.set_context(mode=ms.GRAPH_MODE)
    # full_batch: every rank reads the whole batch, as MindSpore's large-model scripts do; the dataset's batch is the
    # global batch the router cuts into data_parallel groups
    ms.set_auto_parallel_context(parallel_mode=mode, full_batch=True)
    ms.set_seed(1)
    net = NetWithLoss(Network())
    model = ms.Model(net, optimizer=nn.Momentum(net.trainable_params(), 0.1, 0.9))
    model.train(2, create_dataset(), callbacks=[train.LossMonitor(1)], dataset_sink_mode=False)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "semi_auto_parallel")
