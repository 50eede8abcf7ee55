"""The cost model: closed-form redistribution and op costs in wire bytes, checked against hand computations."""

import numpy as np
import pytest

from graphpar.dump.hlo import wire_bytes
from graphpar.planner.cost import Cost, HARDWARE, redistribution_cost
from graphpar.planner.dims import DimSpec
from graphpar.planner.strategy import MeshInfo, NodeStrategy

MESH = MeshInfo(("m0", "m1", "m2"), (2, 2, 2))


class V:
    def __init__(self, shape, itemsize=4, dtype=np.float32):
        self.shape, self.itemsize, self.dtype = shape, itemsize, np.dtype(dtype)


def test_wire_bytes_units():
    assert wire_bytes("AllReduce", 1000, 4) == 1500
    assert wire_bytes("AllGather", 1000, 4) == 750
    assert wire_bytes("ReduceScatter", 1000, 4) == 3000
    assert wire_bytes("AlltoAll", 1000, 2) == 500
    assert wire_bytes("CollectivePermute", 1000, 2) == 1000
    assert wire_bytes("AllReduce", 1000, 1) == 0
    with pytest.raises(ValueError, match="unknown collective kind"):
        wire_bytes("AllSum", 1, 2)


def test_redistribution_closed_form():
    v = V((64, 64))  # 16 KiB
    split0, split1, whole = (("m0",), ()), ((), ("m0",)), ((), ())
    # removing a split: AllGather of the 16 KiB result over 2 devices; backward is a free slice
    assert redistribution_cost(v, split0, whole, MESH) == Cost(8192, 1)
    # adding a split: free forward, AllGather of the cotangent backward
    assert redistribution_cost(v, whole, split0, MESH) == Cost(8192, 1)
    assert redistribution_cost(v, whole, split0, MESH, training=False) == Cost()
    # moving m0 from dim 0 to dim 1: AlltoAll of the 8 KiB block both ways
    assert redistribution_cost(v, split0, split1, MESH) == Cost(2 * 4096, 2)
    # common prefix kept, suffix gathered: (m0, m1) -> (m0,) gathers over m1 only
    assert redistribution_cost(v, (("m0", "m1"), ()), split0, MESH, training=False) == Cost(
        wire_bytes("AllGather", 8192, 2), 1)
    # integer values carry no gradient
    assert redistribution_cost(V((64, 64), dtype=np.int32), whole, split0, MESH) == Cost()


def test_redistribution_on_4096_devices():
    # every axis moves onto dim 1: one AlltoAll of the 4 KiB block each way (closed form, no device loop)
    big = MeshInfo(tuple(f"m{i}" for i in range(12)), (2,) * 12)
    v = V((4096, 4096))
    src, dst = (tuple(f"m{i}" for i in range(6)), tuple(f"m{i}" for i in range(6, 12))), ((), big.names)
    block = 4096 * 4096 * 4 / 4096
    assert redistribution_cost(v, src, dst, big) == Cost(2 * wire_bytes("AlltoAll", block, 4096), 2)


def test_op_cost_matmul_partial_and_gradients():
    from graphpar.planner.cost import op_cost

    class G:  # a one-node graph: x (16, 32) @ w (32, 16)
        inner_gradient = False  # a train step's graph: the input x is not differentiated

    from graphpar.ir.graph import GraphPlan, Node, Value

    x = Value(0, (16, 32), np.dtype(np.float32), "input")
    w = Value(1, (32, 16), np.dtype(np.float32), "param", "w")
    y = Value(2, (16, 16), np.dtype(np.float32), "op", producer=0)
    node = Node(0, "MatMul", "matmul", "", {}, None, None, [0, 1], [2], None, True)
    g = G()
    g.values, g.inputs, g.nodes, g.plan = {0: x, 1: w, 2: y}, [0, 1], {0: node}, GraphPlan()
    g.node_list = lambda: [node]
    dims = DimSpec((("i", "k"), ("k", "j")), (("i", "j"),), ("i", "k", "j"))
    # quickstart ((2, 4), (4, 1)): i on m0, k on (m1, m2)
    s = NodeStrategy(dims, (("i", ("m0",)), ("k", ("m1", "m2"))), (), MESH)
    c = op_cost(g, node, s, MESH)
    out_block = 16 * 16 * 4 / 2
    w_block = 32 * 16 * 4 / 4
    # forward: AllReduce of the output block over k's 4 devices; backward: w's gradient over i's 2 devices
    assert c.comm_bytes == wire_bytes("AllReduce", out_block, 4) + wire_bytes("AllReduce", w_block, 2)
    assert c.messages == 2
    assert c.flops == 2 * 16 * 32 * 16 * 3 / 8
    assert c.time(HARDWARE["gpu"]) > 0 and set(c.as_dict()) >= {"comm_bytes", "messages", "flops", "memory_bytes"}
