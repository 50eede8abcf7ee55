"""MindSpore's ``mindspore.parallel._auto_parallel_context`` module path: ``auto_parallel_context()``, a view over
graphpar's auto-parallel settings (``graphpar._context.parallel_view``)."""

from graphpar._context.parallel_view import AutoParallelContextView as AutoParallelContextView
from graphpar._context.parallel_view import NoSuchSettingError as NoSuchSettingError
from graphpar._context.parallel_view import auto_parallel_context as auto_parallel_context

__all__ = ["auto_parallel_context", "AutoParallelContextView", "NoSuchSettingError"]
