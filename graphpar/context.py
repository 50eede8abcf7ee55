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
from graphpar.communication import tls_config

# MindSpore's private name for the same reset (its parallel unit tests call it)
_reset_auto_parallel_context = reset_auto_parallel_context


def set_ps_context(**kwargs) -> None:
    """MindSpore's ``set_ps_context``: TLS of the control plane (``enable_ssl``, ``config_file_path``,
    ``client_password``, ``server_password``); see ``graphpar.communication.tls_config``."""
    tls_config.set_ps_context(**kwargs)


def get_ps_context(key: str):
    return tls_config.get_ps_context(key)
