"""``mindspore.dataset.vision``: image transforms in numpy (also as ``.c_transforms`` and ``.py_transforms``).

Images are HWC numpy arrays (uint8 from the readers). Random transforms draw from the per-sample generator the
pipeline gives them, so augmentation is reproducible for a seed whatever the worker count.
"""

from graphpar.dataset.vision._transforms import *  # noqa: F401,F403
from graphpar.dataset.vision._transforms import __all__ as __all__
from graphpar.dataset.vision import c_transforms as c_transforms
from graphpar.dataset.vision import py_transforms as py_transforms
