"""``mindspore.dataset.vision.py_transforms``: the numpy transforms of :mod:`graphpar.dataset.vision`.

MindSpore's Python transforms pass PIL images between them; graphpar's pass numpy arrays (a PIL image given as
input is converted). One default differs to match that module: ``Normalize`` reads channels first, because it
follows ``ToTensor`` there.
"""

from collections.abc import Sequence

from graphpar.dataset.vision._transforms import *  # noqa: F401,F403
from graphpar.dataset.vision._transforms import __all__ as __all__
from graphpar.dataset.vision._pixels import Normalize as _Normalize


class Normalize(_Normalize):
    """``(x - mean) / std`` on a CHW float image (the output of ``ToTensor``)."""

    def __init__(self, mean: Sequence[float], std: Sequence[float], is_hwc: bool = False):
        super().__init__(mean, std, is_hwc=is_hwc)
