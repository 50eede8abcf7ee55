"""``ms.export(net, x, file_name=..., file_format="MINDIR")`` writes a ``jax.export`` artifact under MindSpore's
file name; ``jax.export.deserialize`` reads it back and it computes what the network computed."""

import jax
import numpy as np
import pytest

import graphpar as ms
from graphpar import Tensor, nn
from graphpar.errors import ConfigError


class LeNetish(nn.Cell):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3)
        self.flatten = nn.Flatten()
        self.drop = nn.Dropout(p=0.5)
        self.fc = nn.Dense(4 * 8 * 8, 10)

    def construct(self, x):
        return self.fc(self.drop(self.flatten(self.conv(x))))


def test_export_round_trip(tmp_path, notices):
    ms.set_seed(0)
    net = LeNetish()
    net.set_train(False)
    x = Tensor(np.random.default_rng(0).normal(size=(2, 1, 8, 8)).astype(np.float32))
    expected = net(x).asnumpy()
    path = ms.export(net, x, file_name=str(tmp_path / "lenet"), file_format="MINDIR")
    assert path == str(tmp_path / "lenet.mindir")
    exported = jax.export.deserialize(bytearray(open(path, "rb").read()))
    assert [tuple(a.shape) for a in exported.in_avals] == [(2, 1, 8, 8)]
    np.testing.assert_allclose(np.asarray(exported.call(x)), expected, rtol=1e-5, atol=1e-6)
    assert "writes a jax.export artifact" in notices.text and "not MINDIR" in notices.text
    # the parameters are embedded: changing the net afterwards does not change the artifact
    net.fc.weight.set_data(np.zeros(net.fc.weight.shape, np.float32))
    np.testing.assert_allclose(np.asarray(exported.call(x)), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fmt", ["AIR", "ONNX"])
def test_export_refuses_other_formats_by_name(tmp_path, fmt):
    with pytest.raises(ConfigError, match=f"file_format='{fmt}' is not built.*'MINDIR'"):
        ms.export(nn.Dense(2, 2), Tensor(np.ones((1, 2), np.float32)), file_name=str(tmp_path / "n"),
                  file_format=fmt)


def test_export_refuses_options_it_does_not_build(tmp_path):
    with pytest.raises(ConfigError, match=r"export options \['enc_key'\] are not built"):
        ms.export(nn.Dense(2, 2), Tensor(np.ones((1, 2), np.float32)), file_name=str(tmp_path / "n"),
                  file_format="MINDIR", enc_key=b"0" * 16)
