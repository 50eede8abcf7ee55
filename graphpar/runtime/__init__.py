"""MindSpore 2.6's ``mindspore.runtime``: ``import graphpar as ms; ms.runtime.set_memory(max_size="30GB")``.

``memory``: ``set_memory`` (``max_size`` is ``set_context(max_device_memory=...)``) and the allocator statistics;
``executor``: CPU binding and MindSpore's launch knobs; ``stream``: ``synchronize`` and the refused stream API.
See docs/porting_from_mindspore.md ("mindspore.runtime") for each name's meaning here.
"""

from graphpar.runtime.executor import dispatch_threads_num as dispatch_threads_num
from graphpar.runtime.executor import launch_blocking as launch_blocking
from graphpar.runtime.executor import set_cpu_affinity as set_cpu_affinity
from graphpar.runtime.executor import set_kernel_launch_group as set_kernel_launch_group
from graphpar.runtime.memory import empty_cache as empty_cache
from graphpar.runtime.memory import max_memory_allocated as max_memory_allocated
from graphpar.runtime.memory import max_memory_reserved as max_memory_reserved
from graphpar.runtime.memory import memory_allocated as memory_allocated
from graphpar.runtime.memory import memory_reserved as memory_reserved
from graphpar.runtime.memory import memory_stats as memory_stats
from graphpar.runtime.memory import memory_summary as memory_summary
from graphpar.runtime.memory import reset_max_memory_allocated as reset_max_memory_allocated
from graphpar.runtime.memory import reset_max_memory_reserved as reset_max_memory_reserved
from graphpar.runtime.memory import reset_peak_memory_stats as reset_peak_memory_stats
from graphpar.runtime.memory import set_memory as set_memory
from graphpar.runtime.stream import Event as Event
from graphpar.runtime.stream import Stream as Stream
from graphpar.runtime.stream import StreamCtx as StreamCtx
from graphpar.runtime.stream import communication_stream as communication_stream
from graphpar.runtime.stream import current_stream as current_stream
from graphpar.runtime.stream import default_stream as default_stream
from graphpar.runtime.stream import set_cur_stream as set_cur_stream
from graphpar.runtime.stream import synchronize as synchronize
