"""graphpar.communication: MindSpore's communication API over ``jax.distributed``.

A *rank* is a device, as in MindSpore: ``get_group_size()`` is the number of devices of the job and ``get_rank()``
the rank of this process's first device (a process driving several devices owns consecutive ranks; see
``get_local_rank_size()`` and the process-level ``get_process_index()`` / ``get_process_count()``). ``init()`` joins
a job started by ``graphpar launch``, MindSpore's Dynamic Cluster variables, ``mpirun`` or SLURM. The collective ops
themselves are ``graphpar.ops.AllGather`` & co. See docs/distributed.md.
"""

from graphpar.communication.management import (  # noqa: F401
    GlobalComm, HCCL_WORLD_COMM_GROUP, MCCL_WORLD_COMM_GROUP, NCCL_WORLD_COMM_GROUP, create_group, destroy_group,
    get_group_rank_from_world_rank, get_group_size, get_local_rank, get_local_rank_size, get_process_count,
    get_process_index, get_rank, get_world_rank_from_group_rank, init, release)
