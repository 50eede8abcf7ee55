"""MindSpore 2.6's recompute sample (docs sample_code/recompute), in our own words and smaller: ten attention-like
blocks (Transpose, RealDiv, BatchMatMul, Softmax, Dropout, BatchMatMul) whose gradient with respect to the input
is taken inside a Cell (``GradOperation`` in ``construct``), the network built under ``no_init_parameters()`` and
run through ``AutoParallel(grad_network, parallel_mode="semi_auto")``. ``build(recompute=True)`` marks every block
``recompute()``, as the tutorial does, so the backward pass recomputes each block's activations from its input
instead of keeping them. Only the imports differ from MindSpore's."""

import numpy as np

import graphpar as ms
from graphpar import nn, ops
from graphpar.common import Parameter, Tensor
from graphpar.common.initializer import One, initializer
from graphpar.nn import Cell
from graphpar.nn.utils import no_init_parameters
from graphpar.parallel.auto_parallel import AutoParallel

BATCH, SEQ, HEADS, HEAD_DIM, BLOCKS = 8, 64, 8, 16, 10


class Block(Cell):
    def __init__(self):
        super().__init__()
        self.transpose1 = ops.Transpose()
        self.transpose2 = ops.Transpose()
        self.transpose3 = ops.Transpose()
        self.transpose4 = ops.Transpose()
        self.real_div1 = ops.RealDiv()
        self.real_div2 = ops.RealDiv()
        self.batch_matmul1 = ops.BatchMatMul()
        self.batch_matmul2 = ops.BatchMatMul()
        self.add = ops.Add()
        self.softmax = ops.Softmax(-1)
        self.dropout = ops.Dropout(0.9)
        self.expand_dims = ops.ExpandDims()
        self.sub = ops.Sub()
        self.mul = ops.Mul()
        self.y = Parameter(initializer(One(), [BATCH, SEQ, SEQ], ms.float32))

    def construct(self, x):
        # x: (batch, seq, heads, head_dim); scores per head (batch, heads, seq, seq)
        query = self.real_div1(self.transpose1(x, (0, 2, 1, 3)), Tensor(2.37891))
        key = self.real_div2(self.transpose2(x, (0, 2, 3, 1)), Tensor(2.37891))
        scores = self.batch_matmul1(query, key)
        bias = self.mul(self.sub(Tensor([1.0]), self.expand_dims(self.y, 1)), Tensor([-0.0001]))
        probs = self.dropout(self.softmax(self.add(bias, scores)))
        context = self.batch_matmul2(probs[0], self.transpose3(x, (0, 2, 1, 3)))
        return self.transpose4(context, (0, 2, 1, 3))


class Net(Cell):
    def __init__(self, recompute, blocks=BLOCKS):
        super().__init__()
        self.blocks = nn.CellList()
        for _ in range(blocks):
            block = Block()
            if recompute:
                block.recompute()
            self.blocks.append(block)

    def construct(self, x):
        out = x
        for block in self.blocks:
            out = block(out)
        return out


class Grad(Cell):
    def __init__(self, net):
        super().__init__()
        self.grad = ops.GradOperation()
        self.net = net

    def construct(self, x):
        grad_net = self.grad(self.net)
        return grad_net(x)


def build(recompute, blocks=BLOCKS):
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_seed(1)
    with no_init_parameters():
        network = Net(recompute, blocks)
    return AutoParallel(Grad(network), parallel_mode="semi_auto")


def input_x():
    return Tensor(np.ones((BATCH, SEQ, HEADS, HEAD_DIM)).astype(np.float32))


if __name__ == "__main__":
    print(build(True)(input_x()).shape)
