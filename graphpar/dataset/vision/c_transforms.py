"""``mindspore.dataset.vision.c_transforms``: the numpy transforms of :mod:`graphpar.dataset.vision`."""

from graphpar.dataset.vision._transforms import *  # noqa: F401,F403
from graphpar.dataset.vision._transforms import __all__ as __all__
