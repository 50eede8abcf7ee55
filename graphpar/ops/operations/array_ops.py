"""``mindspore.ops.operations.array_ops``: the array primitives, re-exported from where graphpar defines them."""

from graphpar.ops.array_ops import (  # noqa: F401
    Cast, Concat, DType, ExpandDims, Fill, Flatten, Gather, GatherV2, OneHot, Pad, Reshape, Select, Shape, Slice, Split,
    Squeeze, Stack, StridedSlice, TensorToScalar, Tile, Transpose)
from graphpar.ops.index_ops import (  # noqa: F401
    BroadcastTo, EmbeddingLookup, GatherD, GatherNd, SparseGatherV2, TensorScatterUpdate)
from graphpar.ops.pad_ops import PadV3  # noqa: F401
from graphpar.ops.segment_ops import (  # noqa: F401
    UnsortedSegmentMax, UnsortedSegmentMin, UnsortedSegmentProd, UnsortedSegmentSum)
from graphpar.ops.misc_ops import SplitV  # noqa: F401
