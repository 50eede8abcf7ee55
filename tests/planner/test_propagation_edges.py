"""Which edges sharding propagation walks, as MindSpore's cost graph has them (``graphpar.planner.follow``):
a Depend's ordering-only input is no edge and Depend is no op of the plan, two Reshapes back to back stop a layout,
the ops nothing reaches get every split 1, and a convolution's H/W split carries through BatchNorm and MaxPool."""

import numpy as np

import graphpar as ms
from graphpar import Parameter, Tensor, nn, ops
from graphpar.compile.runtime.forward import ForwardProgram
from graphpar.ops import operations as P
from graphpar.parallel import strategies


def _auto(**extra):
    ms.reset_auto_parallel_context()
    ms.set_auto_parallel_context(parallel_mode="auto_parallel", search_mode="sharding_propagation", device_num=8,
                                 dataset_strategy="full_batch", **extra)


class _DependNet(nn.Cell):
    """``mul`` feeds the Depend only as its ordering input; ``y``'s branch goes Reshape -> Depend -> Reshape."""

    def __init__(self, mul_hint=((2, 4), (2, 4)), add_hint=None):
        super().__init__()
        self.mul = P.Mul().shard(mul_hint) if mul_hint else P.Mul()
        self.weight = Parameter(Tensor(np.ones([128, 96]), ms.float32), name="weight")
        self.relu = P.ReLU()
        self.reshape1 = P.Reshape()
        self.reshape2 = P.Reshape()
        self.depend = P.Depend()
        self.add = P.Add().shard(add_hint) if add_hint else None

    def construct(self, x, y):
        out1 = self.mul(x, self.weight)
        out2 = self.reshape1(self.relu(y), (96, 32, 4))
        out3 = self.reshape2(self.depend(out2, out1), (128, 96))
        return self.add(out1, out3) if self.add is not None else out3


class _Mean(nn.Cell):
    def __init__(self, network):
        super().__init__()
        self.network = network
        self.mean = P.ReduceMean(keep_dims=False)

    def construct(self, x, y):
        return self.mean(self.network(x, y), ())


class _GradAll(nn.Cell):
    """MindSpore's tests' GradWrap: the gradients of the mean output with respect to both inputs."""

    def __init__(self, network):
        super().__init__()
        self.network = _Mean(network)
        self.grad = ops.GradOperation(get_all=True)

    def construct(self, x, y):
        return self.grad(self.network)(x, y)


_X, _Y = Tensor(np.ones([128, 96]), ms.float32), Tensor(np.ones([256, 48]), ms.float32)


def _plan(net):
    return strategies(_GradAll(net), _X, _Y)


def _by_kind(table, kind):
    return [v for k, v in table.items() if f"/{kind}-op" in k or k.startswith(f"{kind}-op")]


def test_depend_is_no_op_of_the_plan_and_its_ordering_input_is_no_edge():
    # Mul's (2, 4) would reach ReLU through the Depend's second input if it were an edge; it is not (MindSpore's
    # cost graph walks from a Depend to its first input only), and the strategies list no Depend
    _auto()
    table = _plan(_DependNet())
    assert not _by_kind(table, "Depend")
    assert _by_kind(table, "Mul") == [[[2, 4], [2, 4]]]
    assert _by_kind(table, "ReLU") == [[[1, 1]]]  # from the whole (full_batch) dataset, not from Mul


def test_two_reshapes_back_to_back_stop_a_layout():
    # Add's (4, 2) reaches reshape2 and stops there: reshape2 -> (Depend ->) reshape1 is an edge between two
    # Reshapes, which MindSpore's propagation refuses ("please set the strategy for at least one")
    _auto()
    table = _plan(_DependNet(add_hint=((4, 2), (4, 2))))
    assert _by_kind(table, "ReLU") == [[[1, 1]]]
    assert _by_kind(table, "Add") == [[[4, 2], [4, 2]]]


def test_an_op_nothing_reaches_gets_every_split_1():
    # ReLU after the two Reshapes: no configured op and no dataset reader reaches it, so it takes MindSpore's
    # first strategy (every split 1), not SEMI_AUTO's data-parallel default
    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.inner = _DependNet()
            self.relu2 = P.ReLU()

        def construct(self, x, y):
            return self.relu2(self.inner(x, y))

    _auto()
    table = _plan(Net())
    relus = _by_kind(table, "ReLU")
    assert relus == [[[1, 1]], [[1, 1]]]


def test_depend_ordering_input_is_taken_as_it_arrives():
    # nothing is redistributed for the value a Depend only orders on: no priced edge into its second input
    _auto()
    graph = ForwardProgram(_GradAll(_DependNet())).planned(_X, _Y).graph
    depend = graph.find("depend")[0]
    mul = graph.find("mul")[0]
    assert depend.strategy.input_spec(1) == mul.strategy.output_spec(0)
    assert not [r for r in graph.plan.redistributions if r["node"] == depend.id]


class _ConvNet(nn.Cell):
    def __init__(self, hint):
        super().__init__()
        self.relu = P.ReLU().shard(hint)
        self.conv = P.Conv2D(out_channel=8, kernel_size=3, pad_mode="same")
        self.weight = Parameter(Tensor(np.ones([8, 16, 3, 3]), ms.float32), name="w")
        self.bn = nn.BatchNorm2d(8)
        self.pool = P.MaxPool(kernel_size=2, strides=2)

    def construct(self, x):
        return self.pool(self.bn(self.conv(self.relu(x), self.weight)))


def test_a_spatial_split_carries_through_conv_batchnorm_and_maxpool():
    # MindSpore's test_sharding_propagation_for_conv2ds: W split 8 ways stays on W; BatchNorm's consumer MaxPool
    # can take the split (a hint-only label, carried in from its neighbour), so it is no gather ahead
    _auto()
    x = Tensor(np.ones([32, 16, 64, 64]), ms.float32)
    table = strategies(_ConvNet(((1, 1, 1, 8),)), x)
    assert _by_kind(table, "Conv2D") == [[[1, 1, 1, 8], [1, 1, 1, 1]]]
    assert _by_kind(table, "BatchNorm") == [[[1, 1, 1, 8], [1], [1], [1], [1]]]
    assert _by_kind(table, "MaxPool") == [[[1, 1, 1, 8]]]
