"""``mindspore.dataset.transforms.py_transforms``: the same numpy transforms as :mod:`graphpar.dataset.transforms`."""

from graphpar.dataset.transforms._base import Transform as Transform
from graphpar.dataset.transforms._ops import Compose as Compose
from graphpar.dataset.transforms._ops import Duplicate as Duplicate
from graphpar.dataset.transforms._ops import OneHot as OneHot
from graphpar.dataset.transforms._ops import RandomApply as RandomApply
from graphpar.dataset.transforms._ops import RandomChoice as RandomChoice
from graphpar.dataset.transforms._ops import TypeCast as TypeCast
