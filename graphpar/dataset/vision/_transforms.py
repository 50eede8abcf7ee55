"""The image transforms of ``graphpar.dataset.vision``, gathered once for the package and for its MindSpore
spellings ``c_transforms`` and ``py_transforms`` (which import this module, not the package that imports them)."""

from graphpar.dataset.transforms._ops import TypeCast as ToType  # noqa: F401 (in __all__)
from graphpar.dataset.vision._enums import Border as Border
from graphpar.dataset.vision._enums import Inter as Inter
from graphpar.dataset.vision._enums import SliceMode as SliceMode
from graphpar.dataset.vision._geometry import HWC2CHW as HWC2CHW
from graphpar.dataset.vision._geometry import CenterCrop as CenterCrop
from graphpar.dataset.vision._geometry import Pad as Pad
from graphpar.dataset.vision._geometry import RandomCrop as RandomCrop
from graphpar.dataset.vision._geometry import RandomHorizontalFlip as RandomHorizontalFlip
from graphpar.dataset.vision._geometry import RandomVerticalFlip as RandomVerticalFlip
from graphpar.dataset.vision._patches import SlicePatches as SlicePatches
from graphpar.dataset.vision._pixels import Decode as Decode
from graphpar.dataset.vision._pixels import Normalize as Normalize
from graphpar.dataset.vision._pixels import Rescale as Rescale
from graphpar.dataset.vision._pixels import ToTensor as ToTensor
from graphpar.dataset.vision._resize import RandomResizedCrop as RandomResizedCrop
from graphpar.dataset.vision._resize import Resize as Resize

__all__ = ["Border", "CenterCrop", "Decode", "HWC2CHW", "Inter", "Normalize", "Pad", "RandomCrop",
           "RandomHorizontalFlip", "RandomResizedCrop", "RandomVerticalFlip", "Rescale", "Resize", "SliceMode",
           "SlicePatches", "ToTensor", "ToType"]
