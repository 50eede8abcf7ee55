"""``mindspore.dataset`` on grain: sources, chained operations, samplers and transforms.

``import graphpar.dataset as ds`` then ``ds.Cifar10Dataset(path, num_shards=..., shard_id=...)``,
``ds.GeneratorDataset(generate, ["input", "label"])``, ``.map/.shuffle/.batch/.repeat``, ``ds.vision.*``,
``ds.transforms.TypeCast``, ``ds.config.set_seed``. See docs/datasets.md for what differs from MindSpore.
"""

from graphpar.dataset import config as config
from graphpar.dataset import samplers as samplers
from graphpar.dataset import transforms as transforms
from graphpar.dataset import vision as vision
from graphpar.dataset._cifar import Cifar10Dataset as Cifar10Dataset
from graphpar.dataset._cifar import Cifar100Dataset as Cifar100Dataset
from graphpar.dataset._generator import GeneratorDataset as GeneratorDataset
from graphpar.dataset._image_folder import ImageFolderDataset as ImageFolderDataset
from graphpar.dataset._iterators import DictIterator as DictIterator
from graphpar.dataset._iterators import EpochIterator as EpochIterator
from graphpar.dataset._iterators import TupleIterator as TupleIterator
from graphpar.dataset._mnist import MnistDataset as MnistDataset
from graphpar.dataset._numpy_slices import NumpySlicesDataset as NumpySlicesDataset
from graphpar.dataset._pipeline import BatchDataset as BatchDataset
from graphpar.dataset._pipeline import MapDataset as MapDataset
from graphpar.dataset._pipeline import ProjectDataset as ProjectDataset
from graphpar.dataset._pipeline import RenameDataset as RenameDataset
from graphpar.dataset._pipeline import RepeatDataset as RepeatDataset
from graphpar.dataset._pipeline import ShuffleDataset as ShuffleDataset
from graphpar.dataset._pipeline import SkipDataset as SkipDataset
from graphpar.dataset._pipeline import TakeDataset as TakeDataset
from graphpar.dataset._pipeline import Dataset as Dataset
from graphpar.dataset._source import SourceDataset as SourceDataset
from graphpar.dataset._tfds import TFDSDataset as TFDSDataset
from graphpar.dataset.samplers import DistributedSampler as DistributedSampler
from graphpar.dataset.samplers import RandomSampler as RandomSampler
from graphpar.dataset.samplers import Sampler as Sampler
from graphpar.dataset.samplers import SequentialSampler as SequentialSampler
from graphpar.dataset.samplers import SubsetRandomSampler as SubsetRandomSampler
from graphpar.dataset.samplers import SubsetSampler as SubsetSampler
