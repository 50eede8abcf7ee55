"""``mindspore.parallel.shard`` as a module (MindSpore 2.x scripts write ``from mindspore.parallel.shard import
Layout``); ``graphpar.parallel.shard`` itself is the function, as in MindSpore."""

from graphpar.nn.functional_shard import shard as shard
from graphpar.planner.layout import Layout as Layout
