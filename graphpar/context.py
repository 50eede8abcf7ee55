"""MindSpore's ``mindspore.context`` module: ``from graphpar.context import ParallelMode``."""

from graphpar._context import GRAPH_MODE as GRAPH_MODE
from graphpar._context import PYNATIVE_MODE as PYNATIVE_MODE
from graphpar._context import ParallelMode as ParallelMode
from graphpar._context import get_auto_parallel_context as get_auto_parallel_context
from graphpar._context import get_context as get_context
from graphpar._context import reset_auto_parallel_context as reset_auto_parallel_context
from graphpar._context import reset_context as reset_context
from graphpar._context import set_auto_parallel_context as set_auto_parallel_context
from graphpar._context import set_context as set_context


def set_ps_context(**kwargs) -> None:
    """Parameter-server settings. graphpar has no parameter server; ``enable_ssl=False`` (the seeds' call) is
    accepted, and anything that asks for a feature raises a clear error."""
    from graphpar.errors import ConfigError

    for key, value in kwargs.items():
        if key == "enable_ssl" and value is False:
            continue
        raise ConfigError("set_ps_context", key, value, valid=["enable_ssl=False"],
                          reason=f"{key}={value!r} is not supported: graphpar has no parameter-server mode; the "
                                 "coordinator of jax.distributed has no TLS option (see docs/distributed.md)")
