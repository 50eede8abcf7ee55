"""Mixed precision levels (MindSpore's ``amp``): which Cells and ops compute in the low-precision type.

* ``O0``: nothing changes (the program is the float32 program, bit for bit).
* ``O1``: the white list computes in the low type (``Dense``, ``Conv2d`` Cells and the ``MatMul``,
  ``BatchMatMul``, ``Conv2D``, ``ReLU`` ops held by any Cell); their outputs are cast back to float32.
* ``O2``: the whole network computes in the low type except the black list (``BatchNorm1d/2d``,
  ``SyncBatchNorm``), which computes in float32 and hands the low type on (``keep_batchnorm_fp32=True``);
  the loss runs in float32; dynamic loss scaling (``DynamicLossScaleManager()``) by default.
* ``O3``: the whole network in the low type, BatchNorm included; no loss scaling.

The low type is float16, as in MindSpore, except with ``device_target="CPU"``, where graphpar uses bfloat16 (XLA's
CPU backend computes float16 slowly and float16 needs loss scaling that bfloat16 does not); naming the type
(``cast_model_type=graphpar.float16`` or ``cell.to_float(graphpar.float16)``) overrides that. Parameters stay float32
(the master weights the optimizer updates); the casts are part of the compiled step, so gradients come back in
float32. The casting itself is ``graphpar.nn._mixed_precision``; loss scaling is ``graphpar.nn.loss_scale``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from graphpar import _context
from graphpar.common import dtype as mstype
from graphpar.nn import _mixed_precision
from graphpar.nn.cell import Cell
from graphpar.nn.layer.basic import Dense
from graphpar.nn.layer.conv import Conv2d
from graphpar.nn.layer.normalization import _BatchNorm
from graphpar.nn.loss_scale import TrainOneStepWithLossScaleCell
from graphpar.nn.optim.optimizer import Optimizer
from graphpar.nn.wrap import TrainOneStepCell, WithLossCell
from graphpar.ops import math_ops, nn_ops
from graphpar.train.loss_scale_manager import DynamicLossScaleManager, LossScaleManager

LEVELS = ("O0", "O1", "O2", "O3", "auto")

AMP_WHITE_LIST: list[type] = [Dense, Conv2d, math_ops.MatMul, math_ops.BatchMatMul, nn_ops.Conv2D, nn_ops.ReLU]
AMP_BLACK_LIST: list[type] = [_BatchNorm]  # BatchNorm1d/2d, SyncBatchNorm (MindSpore's list adds LayerNorm)


def get_white_list() -> list[type]:
    """A copy of the O1 white list."""
    return list(AMP_WHITE_LIST)


def get_black_list() -> list[type]:
    """A copy of the O2 black list (kept in float32)."""
    return list(AMP_BLACK_LIST)


def low_precision_dtype() -> np.dtype:
    """The type MindSpore's float16 levels use here: bfloat16 on CPU, float16 on GPU."""
    return mstype.bfloat16 if _context.current().device_target == "CPU" else mstype.float16


def _level_config(level: str) -> dict[str, Any]:
    """MindSpore's per-level defaults (``amp._config_level``), with the low type of this device."""
    if level in ("O0", "O1"):
        return {"keep_batchnorm_fp32": False, "cast_model_type": mstype.float32, "loss_scale_manager": None}
    if level == "O2":
        return {"keep_batchnorm_fp32": True, "cast_model_type": low_precision_dtype(),
                "loss_scale_manager": DynamicLossScaleManager()}
    return {"keep_batchnorm_fp32": False, "cast_model_type": low_precision_dtype(), "loss_scale_manager": None}


def check_level(level: Any, who: str = "amp_level") -> str:
    """The level, with ``auto`` resolved (O2 on GPU, O3 otherwise: MindSpore's choice for GPU and Ascend)."""
    if not isinstance(level, str) or level not in LEVELS:
        raise ValueError(f"{who}={level!r}: valid levels are {', '.join(repr(v) for v in LEVELS)}")
    if level == "auto":
        return "O2" if _context.current().device_target == "GPU" else "O3"
    return level


def _check_kwargs(kwargs: dict[str, Any]) -> None:
    unknown = set(kwargs) - {"cast_model_type", "keep_batchnorm_fp32", "loss_scale_manager"}
    if unknown:
        raise ValueError(f"build_train_network: unsupported arguments {sorted(unknown)}; valid: cast_model_type, "
                         "keep_batchnorm_fp32, loss_scale_manager")
    if "cast_model_type" in kwargs:
        dtype = np.dtype(kwargs["cast_model_type"])
        if dtype not in (mstype.float16, mstype.bfloat16, mstype.float32):
            raise ValueError(f"cast_model_type={kwargs['cast_model_type']!r}: valid types are float16, bfloat16 "
                             "and float32")
        kwargs["cast_model_type"] = dtype
    if "keep_batchnorm_fp32" in kwargs and not isinstance(kwargs["keep_batchnorm_fp32"], bool):
        raise TypeError(f"keep_batchnorm_fp32 must be a bool, got {kwargs['keep_batchnorm_fp32']!r}")
    manager = kwargs.get("loss_scale_manager")
    if manager is not None and not isinstance(manager, LossScaleManager):
        raise TypeError(f"loss_scale_manager must be a FixedLossScaleManager or DynamicLossScaleManager, got "
                        f"{type(manager).__name__}")


def _keep_black_list_fp32(network: Cell, low: np.dtype) -> None:
    """Black-listed Cells compute in float32 and hand the low type on (MindSpore's ``_OutputTo16(to_float(fp32))``)."""
    black = tuple(get_black_list())
    for _, cell in network.cells_and_names():
        if isinstance(cell, black):
            _mixed_precision.set_compute_dtype(cell, mstype.float32)
            _mixed_precision.set_output_dtype(cell, low)


def _white_list(network: Cell, low: np.dtype) -> None:
    """O1: white-listed Cells and ops compute in the low type, their outputs go back to float32."""
    white = tuple(AMP_WHITE_LIST)
    spec = _mixed_precision.CellCast(low, mstype.float32)
    for _, cell in network.cells_and_names():
        if isinstance(cell, white):
            _mixed_precision.set_compute_dtype(cell, low)
            _mixed_precision.set_output_dtype(cell, mstype.float32)
            continue
        for value in vars(cell).values():
            if isinstance(value, white) and not isinstance(value, Cell):
                value._amp_cast = spec


def auto_mixed_precision(network: Cell, amp_level: str = "O0", dtype: Any = None) -> Cell:
    """Cast ``network`` in place for ``amp_level`` (O2/O3 also cast its outputs back to float32); returns it.
    ``dtype`` names the low type (default: :func:`low_precision_dtype`)."""
    if not isinstance(network, Cell):
        raise TypeError(f"auto_mixed_precision(network): expected a Cell, got {type(network).__name__}")
    level = check_level(amp_level)
    low = np.dtype(dtype) if dtype is not None else low_precision_dtype()
    if level == "O1":
        _white_list(network, low)
    elif level in ("O2", "O3"):
        _mixed_precision.set_compute_dtype(network, low)
        if level == "O2":
            _keep_black_list_fp32(network, low)
        _mixed_precision.set_output_dtype(network, mstype.float32)
    return network


class _AmpWithLossCell(WithLossCell):
    """The loss network of a low-precision model: the backbone's output and the label enter the loss as float32
    (MindSpore's amp ``WithLossCell``); same parameter names as ``WithLossCell``."""

    def construct(self, *inputs: Any) -> Any:
        if len(inputs) < 2:
            raise TypeError(f"WithLossCell takes the network's inputs and a label; got {len(inputs)} input(s)")
        out = _mixed_precision.cast_tree(self._backbone(*inputs[:-1]), mstype.float32)
        return self._loss_fn(out, _mixed_precision.cast_tree(inputs[-1], mstype.float32))


def build_train_network(network: Cell, optimizer: Any, loss_fn: Cell | None = None, level: str = "O0",
                        boost_level: str = "O0", **kwargs: Any) -> TrainOneStepCell:
    """MindSpore's ``amp.build_train_network``: cast ``network`` for ``level`` (in place), add ``loss_fn`` and
    build the train cell, with loss scaling when the level or ``loss_scale_manager`` asks for it."""
    if not isinstance(optimizer, Optimizer):
        raise TypeError(f"build_train_network(optimizer): expected a graphpar optimizer, got "
                        f"{type(optimizer).__name__}")
    if boost_level != "O0":
        raise ValueError(f"build_train_network(boost_level={boost_level!r}): mindspore.boost is not implemented; "
                         "use boost_level='O0'")
    level = check_level(level, "level")
    _check_kwargs(kwargs)
    config = dict(_level_config(level), **kwargs)
    cast_type = config["cast_model_type"]
    if cast_type != mstype.float32:
        _mixed_precision.set_compute_dtype(network, cast_type)
        if config["keep_batchnorm_fp32"]:
            _keep_black_list_fp32(network, cast_type)
    elif not config["keep_batchnorm_fp32"] and level == "O2":
        _mixed_precision.set_compute_dtype(network, low_precision_dtype())
    elif level not in ("O2", "O3"):
        auto_mixed_precision(network, level)
    if loss_fn is not None:
        if not isinstance(loss_fn, Cell):
            raise TypeError(f"build_train_network(loss_fn): expected a Cell, got {type(loss_fn).__name__}")
        network = (_AmpWithLossCell if cast_type != mstype.float32 else WithLossCell)(network, loss_fn)
    manager = config["loss_scale_manager"]
    if manager is not None:
        update = manager.get_update_cell()
        if update is not None:
            return TrainOneStepWithLossScaleCell(network, optimizer, scale_sense=update)
        return TrainOneStepCell(network, optimizer, sens=manager.get_loss_scale())
    return TrainOneStepCell(network, optimizer)
