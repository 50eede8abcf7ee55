"""``mindspore.ops.auto_generate``: the generated ``Ext`` ops MindSpore's parallel tests use (``gen_ops_def``)."""

from graphpar.ops.auto_generate import gen_ops_def as gen_ops_def
from graphpar.ops.auto_generate.gen_ops_def import (  # noqa: F401
    AddcmulExt, AddExt, SubExt, add_ext, addcmul_ext_op, sub_ext)
