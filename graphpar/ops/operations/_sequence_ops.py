"""``mindspore.ops.operations._sequence_ops``: of MindSpore's primitives on tuples and lists, the one graphpar has
(``TensorToScalar``); in a traced graph Python tuples and lists are constants, so the others are not built and fail
at import by name."""

from graphpar.ops.array_ops import TensorToScalar  # noqa: F401
