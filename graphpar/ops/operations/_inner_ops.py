"""``mindspore.ops.operations._inner_ops``: the primitives MindSpore files as inner ops that graphpar has (SiLU);
the others (quantisation, FFN, MoE routers) are not built and fail at import by name."""

from graphpar.ops.nn_ops import SiLU  # noqa: F401
