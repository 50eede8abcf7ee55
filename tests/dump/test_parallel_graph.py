"""One rank's parallel graph as MindSpore's unit tests read it: ``_cell_graph_executor._graph_executor``'s
``get_parallel_graph_info(phase)`` (``{"@graph_0": {"ReLU-0": {"inputs": ["AllReduce-0"], "attrs": {}}}}``) and
``get_strategy(phase)``, built from graphpar's plan by ``graphpar.dump.parallel_graph``: the user's ops named
``<Primitive>-<k>``, each partial-sum op followed by its AllReduce, each layout change by MindSpore's
redistribution ops (StridedSlice, AllGather, Split / TupleGetItem / MakeTuple / Concat), data inputs by
``_VirtualDataset`` unless the batch is full."""

import numpy as np
import pytest

import graphpar as ms
from graphpar import Parameter, Tensor, nn, ops
from graphpar.common.api import UnknownPhaseError, _cell_graph_executor


class Net(nn.Cell):
    """relu -> matmul(w) -> relu, each op's strategy given."""

    def __init__(self, relu1, matmul, relu2, transpose_b=False):
        super().__init__()
        self.relu1 = ops.ReLU().shard(relu1)
        self.matmul = ops.MatMul(transpose_b=transpose_b).shard(matmul)
        self.relu2 = ops.ReLU().shard(relu2)
        self.w = Parameter(Tensor(np.ones((32, 16), np.float32)), "w")

    def construct(self, x):
        return self.relu2(self.matmul(self.relu1(x), self.w))


def _compile(net, full_batch=True, devices=8, rank=0):
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=devices, global_rank=rank,
                                 full_batch=full_batch)
    phase, _ = _cell_graph_executor.compile(net, Tensor(np.ones((64, 32), np.float32)))
    return _cell_graph_executor._graph_executor, phase


def test_a_matmul_split_on_its_contracted_dimension_feeds_its_allreduce_to_the_next_op():
    ge, phase = _compile(Net(((2, 4),), ((2, 4), (4, 1)), ((2, 1),)))
    g = ge.get_parallel_graph_info(phase)["@graph_0"]
    assert g["MatMul-0"]["inputs"] == ["ReLU-0", "w"]
    assert g["AllReduce-0"]["inputs"] == ["MatMul-0"]
    assert g["ReLU-1"]["inputs"] == ["AllReduce-0"]
    # the contracted dimension is split 4 ways: rank 0 sums with the 3 ranks beside it
    assert g["AllReduce-0"]["attrs"]["op"] == "sum"
    assert g["AllReduce-0"]["attrs"]["rank_list"] == "(0, 1, 2, 3)"
    # the whole batch on every rank (_VirtualDataset's layout): x is sliced where relu1 wants it split (rank 0: the
    # first block)
    assert g["_VirtualDataset-0"]["inputs"] == ["x"]
    assert g["TupleGetItem-0"]["inputs"] == ["_VirtualDataset-0", 0]
    assert g["ReLU-0"]["inputs"] == ["StridedSlice-0"]
    assert g["StridedSlice-0"]["inputs"] == ["TupleGetItem-0", "(0, 0)", "(32, 8)", "(1, 1)"]
    assert g["MatMul-0"]["attrs"] == {"transpose_a": False, "transpose_b": False}


def test_the_group_and_the_slice_are_those_of_the_rank_the_context_names():
    ge, phase = _compile(Net(((2, 4),), ((2, 4), (4, 1)), ((2, 1),)), rank=5)
    g = ge.get_parallel_graph_info(phase)["@graph_0"]
    assert g["AllReduce-0"]["attrs"]["rank_list"] == "(4, 5, 6, 7)"
    assert g["StridedSlice-0"]["inputs"] == ["TupleGetItem-0", "(32, 8)", "(64, 16)", "(1, 1)"]


def test_no_reduction_when_nothing_contracted_is_split():
    ge, phase = _compile(Net(((8, 1),), ((8, 1), (1, 1)), ((8, 1),)))
    g = ge.get_parallel_graph_info(phase)["@graph_0"]
    assert not any(name.startswith(("AllReduce", "AllGather")) for name in g)
    assert g["ReLU-1"]["inputs"] == ["MatMul-0"]


def test_a_first_dimension_gather_is_one_allgather():
    # relu1 splits the rows 8 ways, matmul wants them 4 ways: rank 0 gathers its row block with rank 1's
    ge, phase = _compile(Net(((8, 1),), ((4, 1), (1, 2)), ((4, 2),)))
    g = ge.get_parallel_graph_info(phase)["@graph_0"]
    assert g["AllGather-0"]["inputs"] == ["ReLU-0"]
    assert g["AllGather-0"]["attrs"]["rank_list"] == "(0, 1)"
    assert g["MatMul-0"]["inputs"] == ["AllGather-0", "w"]  # w is stored as matmul reads it: no move


def test_another_dimension_is_gathered_by_allgather_split_and_concat():
    # relu1 splits the columns 8 ways, matmul wants them whole: AllGather stacks the 8 blocks on the rows, Split
    # cuts them apart again and Concat joins them on the columns, as MindSpore's redistribution does
    ge, phase = _compile(Net(((1, 8),), ((8, 1), (1, 1)), ((8, 1),)))
    g = ge.get_parallel_graph_info(phase)["@graph_0"]
    assert g["AllGather-0"]["inputs"] == ["ReLU-0"]
    assert g["Split-0"]["inputs"] == ["AllGather-0", 0, 8]
    assert g["MakeTuple-0"]["inputs"] == [f"TupleGetItem-{i}" for i in range(1, 9)]  # TupleGetItem-0 reads x
    assert g["Concat-0"]["inputs"] == ["MakeTuple-0", 1]
    # then the rows are sliced 8 ways for matmul
    assert g["StridedSlice-1"]["inputs"][0] == "Concat-0"
    assert g["MatMul-0"]["inputs"] == ["StridedSlice-1", "w"]


def test_without_full_batch_each_rank_reads_its_batch_slice():
    ge, phase = _compile(Net(((8, 1),), ((8, 1), (1, 1)), ((8, 1),)), full_batch=False)
    g = ge.get_parallel_graph_info(phase)["@graph_0"]
    assert g["ReLU-0"]["inputs"] == ["TupleGetItem-0"]  # the dataset's row split is relu1's: nothing moves
    ge, phase = _compile(Net(((4, 1),), ((4, 1), (1, 1)), ((4, 1),)), full_batch=False)
    g = ge.get_parallel_graph_info(phase)["@graph_0"]
    assert g["ReLU-0"]["inputs"] == ["AllGather-0"]  # the batch is split 8 ways, relu1 wants 4
    assert g["AllGather-0"]["inputs"] == ["TupleGetItem-0"]


def test_strategies_and_parameter_shapes_of_the_phase():
    net = Net(((2, 4),), ((2, 4), (4, 1)), ((2, 1),))
    ge, phase = _compile(net)
    strategies = ge.get_strategy(phase)
    assert strategies["Default/MatMul-op0"] == [[2, 4], [4, 1]]
    assert strategies["Default/ReLU-op1"] == [[2, 4]]  # relu1: MindSpore numbers a kind from the output back
    assert net.parameter_layout_dict["w"][2] == [8, 16]  # w's rows split 4 ways
    assert ge.get_parameter_layout(phase) == net.parameter_layout_dict


def test_each_compile_is_its_own_phase():
    first = Net(((2, 4),), ((2, 4), (4, 1)), ((2, 1),))
    ge, phase1 = _compile(first)
    _, phase2 = _compile(Net(((8, 1),), ((8, 1), (1, 1)), ((8, 1),)))
    assert phase1 != phase2
    assert "AllReduce-0" in ge.get_parallel_graph_info(phase1)["@graph_0"]
    assert "AllReduce-0" not in ge.get_parallel_graph_info(phase2)["@graph_0"]
    with pytest.raises(UnknownPhaseError, match="no compiled phase 'train'"):
        ge.get_parallel_graph_info("train")


class WithLoss(nn.Cell):
    """Net with a sum as its loss, strategy given: a train step's network."""

    def __init__(self, network, loss_strategy):
        super().__init__()
        self.network = network
        self.sum = ops.ReduceSum().shard(loss_strategy)

    def construct(self, x):
        return self.sum(self.network(x))


def test_a_train_step_mirrors_its_parameters_and_divides_the_repeated_loss():
    # matmul holds w split 4 ways on its rows, repeated over the other 2 devices: each slice's gradient is summed
    # over those 2 ranks, which _MirrorOperator stands for in the forward graph
    net = WithLoss(Net(((2, 4),), ((2, 4), (4, 1)), ((2, 1),)), ((2, 1),))
    step = nn.TrainOneStepCell(net, nn.Momentum(net.trainable_params(), 0.1, 0.9))
    ge, phase = _compile(step)
    g = ge.get_parallel_graph_info(phase)["@graph_0"]
    assert g["MatMul-0"]["inputs"] == ["ReLU-0", "_MirrorOperator-0"]
    assert g["_MirrorOperator-0"]["inputs"] == ["network.w"]
    assert g["_MirrorOperator-0"]["attrs"]["rank_list"] == "(0, 4)"
    assert g["_MirrorOperator-0"]["attrs"]["mean_flag"] is False
    # the loss uses 2 of the 8 devices: the gradient its input receives is divided among the 4 that repeat it
    assert g["ReduceSum-0"]["inputs"][0] == "_VirtualDiv-0"
    assert g["_VirtualDiv-0"]["inputs"] == ["ReLU-1"]
    assert g["_VirtualDiv-0"]["attrs"] == {"divisor": 4}


def test_a_forward_graph_has_no_mirror():
    ge, phase = _compile(Net(((2, 4),), ((2, 4), (4, 1)), ((2, 1),)))
    assert not any(k.startswith(("_MirrorOperator", "_VirtualDiv")) for k in ge.get_parallel_graph_info(phase)["@graph_0"])


class ConvNet(nn.Cell):
    def __init__(self, strategy):
        super().__init__()
        self.conv = ops.Conv2D(out_channel=4, kernel_size=3, pad_mode="pad", pad=1).shard(strategy)
        self.w = Parameter(Tensor(np.ones((4, 4, 3, 3), np.float32)), "w")

    def construct(self, x):
        return self.conv(x, self.w)


def test_a_convolution_split_on_height_and_width_exchanges_its_neighbours_rows():
    # 3x3 kernel, pad 1, stride 1: each rank needs one row / column of each neighbour. Rank 5 is the second of 2 in
    # height (rank 1 above it) and the second of 4 in width (ranks 4 and 6 beside it)
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8, global_rank=5, full_batch=True)
    phase, _ = _cell_graph_executor.compile(ConvNet(((1, 1, 2, 4), (1, 1, 1, 1))),
                                            Tensor(np.ones((8, 4, 16, 16), np.float32)))
    g = _cell_graph_executor._graph_executor.get_parallel_graph_info(phase)["@graph_0"]
    assert g["Conv2D-0"]["inputs"] == ["NeighborExchangeV2-0", "w"]
    exchange = g["NeighborExchangeV2-0"]["attrs"]
    assert exchange["recv_lens"] == exchange["send_lens"] == "[1, 0, 1, 1]"  # top, bottom, left, right
    # top, top-right, right, bottom-right, bottom, bottom-left, left, top-left
    assert exchange["recv_rank_ids"] == "[1, 2, 6, -1, -1, -1, 4, 0]"
    assert g["Conv2D-0"]["attrs"]["pad_list"] == "(0, 1, 0, 0)"  # only the bottom border keeps its pad


class Draw(nn.Cell):
    def __init__(self, strategy):
        super().__init__()
        self.uniform = ops.UniformReal(seed=1, seed2=1).shard(strategy)

    def construct(self, shape):
        return self.uniform(shape)


def test_a_split_random_op_draws_its_block_of_the_one_stream():
    # (2, 2) on 8 devices: each rank draws a 4 x 4 block. graphpar draws the blocks of the stream an unsplit op
    # draws, so the seeds stay the user's (MindSpore's step_parallel adds the block's index to them)
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8, global_rank=5, full_batch=True)
    phase, _ = _cell_graph_executor.compile(Draw(((2, 2),)), (8, 8))
    g = _cell_graph_executor._graph_executor.get_parallel_graph_info(phase)["@graph_0"]
    assert g["UniformReal-0"]["inputs"] == ["(4, 4)"]
    assert g["UniformReal-0"]["attrs"]["seed"] == g["UniformReal-0"]["attrs"]["seed2"] == 1


def test_an_op_without_a_strategy_records_the_generated_one_and_the_graph_returns():
    net = Net(((2, 4),), ((2, 4), (4, 1)), None)  # relu2 gets SEMI_AUTO's batch-parallel default
    ge, phase = _compile(net)
    g = ge.get_parallel_graph_info(phase)["@graph_0"]
    assert g["ReLU-1"]["attrs"]["gen_strategy"] == "((8, 1))"
    assert "gen_strategy" not in g["MatMul-0"]["attrs"]  # given by the user
    assert list(g)[-1] == "Return-0" and g["Return-0"]["inputs"] == ["ReLU-1"]


class TableGather(nn.Cell):
    """A 64-row table gathered on axis 0 with its rows split 8 ways, the output whole (MindSpore's ShardAxis)."""

    def __init__(self):
        super().__init__()
        self.gather = ops.Gather().shard(((8, 1), (1, 1)), out_strategy=((1, 1, 1),))
        self.table = Parameter(Tensor(np.ones((64, 16), np.float32)), "table")

    def construct(self, idx):
        return self.gather(self.table, idx, 0)


def test_a_gather_split_on_its_axis_masks_the_rows_this_rank_lacks_before_the_allreduce():
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8, global_rank=3, full_batch=True)
    phase, _ = _cell_graph_executor.compile(TableGather(), Tensor(np.ones((4, 5), np.int32)))
    g = _cell_graph_executor._graph_executor.get_parallel_graph_info(phase)["@graph_0"]
    # rank 3 holds rows 24..31: indices shifted by 24, clamped to 0..7, masked where they were out of range
    assert g["Sub-0"]["inputs"] == ["TupleGetItem-0", 24]
    assert g["ReLU-0"]["inputs"] == ["Sub-0"] and g["Minimum-0"]["inputs"] == ["ReLU-0", 7]
    assert g["Equal-0"]["inputs"] == ["Sub-0", "Minimum-0"]
    assert g["Gather-0"]["inputs"] == ["table", "Minimum-0", 0]
    assert g["Cast-0"]["inputs"][0] == "Equal-0" and g["ExpandDims-0"]["inputs"] == ["Cast-0", -1]
    assert g["Mul-0"]["inputs"] == ["Gather-0", "ExpandDims-0"]
    assert g["AllReduce-0"]["inputs"] == ["Mul-0"] and g["AllReduce-0"]["attrs"]["rank_list"] == str(tuple(range(8)))
