"""``mindspore.dataset.transforms``: transforms for any column (also as ``.c_transforms`` and ``.py_transforms``)."""

from graphpar.dataset.transforms._base import Transform as Transform
from graphpar.dataset.transforms._ops import Compose as Compose
from graphpar.dataset.transforms._ops import Duplicate as Duplicate
from graphpar.dataset.transforms._ops import OneHot as OneHot
from graphpar.dataset.transforms._ops import RandomApply as RandomApply
from graphpar.dataset.transforms._ops import RandomChoice as RandomChoice
from graphpar.dataset.transforms._ops import TypeCast as TypeCast
from graphpar.dataset.transforms import c_transforms as c_transforms  # noqa: E402
from graphpar.dataset.transforms import py_transforms as py_transforms  # noqa: E402
