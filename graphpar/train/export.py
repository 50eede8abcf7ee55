"""``mindspore.export``: a network's inference program written to a file.

MindSpore writes MINDIR (its own graph format, read by MindSpore and MindSpore Lite). graphpar has no MINDIR
writer; for ``file_format="MINDIR"`` it writes what JAX has for the same purpose: a ``jax.export`` artifact
(``jax.export.export(...).serialize()``: the StableHLO of the network's forward with every Parameter embedded as a
constant, the input shapes and dtypes, the platform), under MindSpore's file name (``file_name`` plus ``.mindir``
when it has no suffix, so a script finds the file where MindSpore would put it), and says so once. Read it back
with ``jax.export.deserialize(open(path, "rb").read()).call(*inputs)`` (or :func:`load_exported`): the same outputs
as ``net(*inputs)`` at export time.

What is exported is the Cell as it is now: its Parameters' current values and its ``training`` flag (call
``net.set_train(False)`` first, as MindSpore's samples do, for inference behaviour of Dropout and BatchNorm). The
program runs on one device; its input shapes are those of ``inputs``. ``"AIR"`` and ``"ONNX"`` and MindSpore's
export options (``enc_key``, ``enc_mode``, ``dataset``, ``obf_config``, ``custom_func``) are refused by name.
"""

from __future__ import annotations

import os
from typing import Any

import jax
import numpy as np
from flax import nnx

from graphpar._logging import notice_once
from graphpar.errors import ConfigError
from graphpar.nn.cell import Cell

FORMATS = ("MINDIR",)
_REFUSED_FORMATS = ("AIR", "ONNX")


def _path(file_name: str) -> str:
    return file_name if os.path.splitext(os.path.basename(file_name))[1] else file_name + ".mindir"


def export(net: Any, *inputs: Any, file_name: str, file_format: str, **kwargs: Any) -> str:
    """Write ``net``'s forward on ``inputs`` as a ``jax.export`` artifact (see the module docstring); returns the
    path written."""
    if file_format in _REFUSED_FORMATS:
        raise ConfigError("export", "file_format", file_format, valid=FORMATS,
                          reason=f"file_format={file_format!r} is not built in graphpar (no {file_format} writer "
                                 "on XLA); 'MINDIR' writes a jax.export artifact instead")
    if file_format not in FORMATS:
        raise ConfigError("export", "file_format", file_format, valid=FORMATS)
    if kwargs:
        raise ConfigError("export", sorted(kwargs)[0], kwargs[sorted(kwargs)[0]],
                          reason=f"export options {sorted(kwargs)} are not built in graphpar (MINDIR encryption, "
                                 "dataset preprocessing, obfuscation and custom functions have no jax.export "
                                 "counterpart); call export(net, *inputs, file_name=..., file_format='MINDIR')")
    if not isinstance(file_name, str) or not file_name:
        raise ConfigError("export", "file_name", file_name, reason="file_name must be a non-empty str")
    if not inputs:
        raise ConfigError("export", "inputs", None, reason="give the network's example inputs after net: "
                                                           "export(net, x, file_name=..., file_format='MINDIR')")
    arrays = [np.asarray(x) if not isinstance(x, jax.Array) else x for x in inputs]
    if isinstance(net, Cell):
        graphdef, state = nnx.split(net)

        def forward(*xs: Any) -> Any:
            return nnx.merge(graphdef, state)(*xs)  # merged in the trace: the Parameters become constants
    elif callable(net):
        forward = net
    else:
        raise ConfigError("export", "net", type(net).__name__, reason="net must be a Cell or a function")
    specs = [jax.ShapeDtypeStruct(np.shape(x), x.dtype) for x in arrays]
    exported = jax.export.export(jax.jit(forward))(*specs)
    path = _path(file_name)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    with open(path, "wb") as f:
        f.write(exported.serialize())
    notice_once("export:format", f"export(file_format='MINDIR'): graphpar writes a jax.export artifact (StableHLO "
                                 f"with the Parameters embedded), not MINDIR, to {path}; read it back with "
                                 "jax.export.deserialize(...).call(*inputs)")
    return path


def load_exported(path: str) -> jax.export.Exported:
    """The ``jax.export.Exported`` that :func:`export` wrote to ``path`` (``.call(*inputs)`` runs it)."""
    with open(path, "rb") as f:
        return jax.export.deserialize(bytearray(f.read()))
