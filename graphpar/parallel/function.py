"""``mindspore.parallel.function`` (MindSpore 2.x): ``reshard(tensor, layout)``, a layout constraint in
``construct``."""

from graphpar.ops.layout_ops import reshard as reshard
