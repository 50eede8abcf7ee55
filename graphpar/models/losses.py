"""``SoftmaxCrossEntropyExpand``: the tutorials' cross-entropy written out as separate ops.

MindSpore's distributed-training tutorials (seeds 000/001/003) recommend expanding the loss into primitive ops so
that AUTO_PARALLEL can choose a strategy for each (``ReduceMax``, ``Sub``, ``Exp``, ``ReduceSum``, ``RealDiv``,
``OneHot``, ``Log``, ``Mul``, ``ReduceMean``). This is that class, op for op, with the same instance names. The
tutorial's own code runs unchanged too (``import graphpar`` in place of ``mindspore``); this copy saves writing it.
It computes the same value and gradient as ``nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")``
(up to rounding: the softmax is divided out and its log taken, rather than a fused log-softmax).
"""

from __future__ import annotations

from graphpar import nn, ops
from graphpar.common import dtype as mstype
from graphpar.common.tensor import Tensor


class SoftmaxCrossEntropyExpand(nn.Cell):
    """``SoftmaxCrossEntropyExpand(sparse=False)(logit, label)``: mean over the batch of
    ``-sum(onehot(label) * log(softmax(logit)))``; ``sparse=True`` takes class indices, else one-hot labels."""

    def __init__(self, sparse: bool = False):
        super().__init__()
        self.exp = ops.Exp()
        self.sum = ops.ReduceSum(keep_dims=True)
        self.onehot = ops.OneHot()
        self.on_value = Tensor(1.0, mstype.float32)
        self.off_value = Tensor(0.0, mstype.float32)
        self.div = ops.RealDiv()
        self.log = ops.Log()
        self.sum_cross_entropy = ops.ReduceSum(keep_dims=False)
        self.mul = ops.Mul()
        self.mul2 = ops.Mul()
        self.mean = ops.ReduceMean(keep_dims=False)
        self.sparse = sparse
        self.max = ops.ReduceMax(keep_dims=True)
        self.sub = ops.Sub()

    def construct(self, logit, label):
        logit_max = self.max(logit, -1)
        exp = self.exp(self.sub(logit, logit_max))
        exp_sum = self.sum(exp, -1)
        softmax_result = self.div(exp, exp_sum)
        if self.sparse:
            label = self.onehot(label, ops.shape(logit)[1], self.on_value, self.off_value)
        softmax_result_log = self.log(softmax_result)
        loss = self.sum_cross_entropy((self.mul(softmax_result_log, label)), -1)
        loss = self.mul2(ops.scalar_to_array(-1.0), loss)
        loss = self.mean(loss, -1)
        return loss
