"""The device grid is computed from a layout alone; it must agree with where JAX puts the shards."""

import re

import jax
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from graphpar.viz.blocks import LayoutError, block_holders, device_blocks
from graphpar.viz.grids import device_grid

CASES = [  # (mesh axes, global shape, layout)
    ({"m0": 8}, (16,), (("m0",),)),
    ({"m0": 2, "m1": 4}, (8, 12), (("m1",), ("m0",))),
    ({"m0": 2, "m1": 2, "m2": 2}, (16, 8), (("m0", "m2"), ())),
    ({"m0": 2, "m1": 2, "m2": 2}, (4, 6, 8), (("m1",), (), ("m2", "m0"))),
    ({"m0": 2, "m1": 2, "m2": 2}, (4, 4, 4), (("m0",), ("m1",), ("m2",))),
    ({"m0": 6}, (12,), (("m0",),)),
    ({"m0": 2, "m1": 3}, (6, 4), (("m1",), ("m0",))),
    ({"m0": 3, "m1": 2}, (6, 9), ((), ("m0",))),
    ({"m0": 2, "m1": 3}, (4, 6, 10), (("m0",), ("m1",), ())),
    ({"m0": 3, "m1": 2}, (6, 2, 4), (("m1", "m0"), (), ())),
]


def _normalize(index, shape):
    return tuple((s.start or 0, s.stop if s.stop is not None else n) for s, n in zip(index, shape))


@pytest.mark.parametrize("mesh_axes, shape, layout", CASES)
def test_blocks_match_addressable_shards(mesh_axes, shape, layout):
    n = int(np.prod(list(mesh_axes.values())))
    devices = np.asarray(jax.devices()[:n], dtype=object).reshape(tuple(mesh_axes.values()))
    mesh = Mesh(devices, tuple(mesh_axes))
    spec = PartitionSpec(*[tuple(axes) if axes else None for axes in layout])
    array = jax.device_put(np.arange(np.prod(shape), dtype=np.float32).reshape(shape), NamedSharding(mesh, spec))
    rank_of = {d: r for r, d in enumerate(devices.flat)}
    blocks = device_blocks(shape, layout, mesh_axes)
    assert sorted(blocks) == list(range(n))
    for shard in array.addressable_shards:
        got = tuple((s.start, s.stop) for s in blocks[rank_of[shard.device]])
        assert got == _normalize(shard.index, shape), (shard.device, got, shard.index)
    # the rendered grid lists, in every block's cell, exactly the devices holding that block
    html = device_grid("t", shape, layout, mesh_axes)
    cells = {tuple(int(v) for v in b.split(",") if v): sorted(int(v) for v in d.split(","))
             for b, d in re.findall(r'data-block="([\d,]*)" data-devices="([\d,]*)"', html)}
    holders = block_holders(shape, layout, mesh_axes)
    assert cells == {k: sorted(v) for k, v in holders.items()}
    expected: dict = {}
    for shard in array.addressable_shards:
        start = tuple(lo for lo, _ in _normalize(shard.index, shape))
        size = tuple(shard.data.shape)
        block = tuple(s // z for s, z in zip(start, size))
        expected.setdefault(block, []).append(rank_of[shard.device])
    assert cells == {k: sorted(v) for k, v in expected.items()}


def test_bad_layouts_are_named():
    with pytest.raises(LayoutError, match=r"layout \(m0\) .* dimension of size 6 cannot be split 4 ways"):
        device_blocks((6,), (("m0",),), {"m0": 4})
    with pytest.raises(LayoutError, match="axis 'm9' is not in the mesh"):
        device_blocks((8,), (("m9",),), {"m0": 8})
    with pytest.raises(LayoutError, match="2 entries for 1 dimensions"):
        device_blocks((8,), (("m0",), ()), {"m0": 8})


def test_a_grid_is_drawn_to_the_tensors_proportions_with_its_mesh_axes():
    """A (64, 16) weight split 4 ways over m1 by rows: four cells stacked in a grid four times as tall as wide, and
    the legend says which axis splits which dimension and over which axis the blocks are replicas."""
    html = device_grid("w", (64, 16), (("m1",), ()), {"m0": 2, "m1": 4})
    assert "dim 0 (64): 4 ways over m1=4; dim 1 (16): whole; each block replicated over m0=2" in html
    sizes = re.findall(r'width:(\d+)px;height:(\d+)px', html)
    assert sizes == [("40", "40")] * 4  # 160 px tall, 40 px wide: 64 rows to 16 columns
