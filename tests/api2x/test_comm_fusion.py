"""``Cell.set_comm_fusion``: MindSpore's arguments checked, and one line saying that XLA's combiner fuses by size."""

import pytest

from graphpar import nn


def test_set_comm_fusion_says_once_what_happens_instead(notices):
    net = nn.SequentialCell(nn.Dense(4, 4), nn.Dense(4, 2))
    assert net[0].set_comm_fusion(0) is net[0]
    net[1].set_comm_fusion(1)
    lines = [r.getMessage() for r in notices.records if "set_comm_fusion" in r.getMessage()]
    assert len(lines) == 1 and "XLA's all-reduce combiner" in lines[0]
    with pytest.raises(TypeError, match=r"fusion_type must be an int >= 0, got -1"):
        net.set_comm_fusion(-1)
    with pytest.raises(TypeError, match="recurse must be a bool"):
        net.set_comm_fusion(1, recurse="yes")
