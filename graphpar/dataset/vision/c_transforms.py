"""``mindspore.dataset.vision.c_transforms``: the numpy transforms of :mod:`graphpar.dataset.vision`."""

from graphpar.dataset.vision import *  # noqa: F401,F403
from graphpar.dataset.vision import __all__ as __all__
