"""``mindspore.dataset.vision``: image transforms in numpy (also as ``.c_transforms`` and ``.py_transforms``).

Images are HWC numpy arrays (uint8 from the readers). Random transforms draw from the per-sample generator the
pipeline gives them, so augmentation is reproducible for a seed whatever the worker count.
"""

from graphpar.dataset.transforms._ops import TypeCast as ToType
from graphpar.dataset.vision._enums import Border as Border
from graphpar.dataset.vision._enums import Inter as Inter
from graphpar.dataset.vision._geometry import HWC2CHW as HWC2CHW
from graphpar.dataset.vision._geometry import CenterCrop as CenterCrop
from graphpar.dataset.vision._geometry import Pad as Pad
from graphpar.dataset.vision._geometry import RandomCrop as RandomCrop
from graphpar.dataset.vision._geometry import RandomHorizontalFlip as RandomHorizontalFlip
from graphpar.dataset.vision._geometry import RandomVerticalFlip as RandomVerticalFlip
from graphpar.dataset.vision._pixels import Decode as Decode
from graphpar.dataset.vision._pixels import Normalize as Normalize
from graphpar.dataset.vision._pixels import Rescale as Rescale
from graphpar.dataset.vision._pixels import ToTensor as ToTensor
from graphpar.dataset.vision._resize import RandomResizedCrop as RandomResizedCrop
from graphpar.dataset.vision._resize import Resize as Resize

__all__ = ["Border", "CenterCrop", "Decode", "HWC2CHW", "Inter", "Normalize", "Pad", "RandomCrop",
           "RandomHorizontalFlip", "RandomResizedCrop", "RandomVerticalFlip", "Rescale", "Resize", "ToTensor",
           "ToType"]

from graphpar.dataset.vision import c_transforms as c_transforms  # noqa: E402
from graphpar.dataset.vision import py_transforms as py_transforms  # noqa: E402
