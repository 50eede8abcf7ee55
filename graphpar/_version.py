"""graphpar's version, at the bottom of the layers: ``graphpar.__version__`` and ``graphpar --version`` read it."""

__version__ = "0.1.0"
