"""MindSpore's ``mindspore.nn.utils``: ``no_init_parameters``."""

from graphpar.nn.utils.init import no_init_parameters as no_init_parameters

__all__ = ["no_init_parameters"]
