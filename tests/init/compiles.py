"""Which XLA programs a block of code compiles: the names JAX logs (``jax_log_compiles``) as "Compiling jit(NAME)"."""

import contextlib
import logging
import re

import jax

_COMPILING = re.compile(r"^Compiling jit\(([^)]*)\)")


@contextlib.contextmanager
def compiled_names():
    """Yields the list of program names compiled inside the block, in order (``jit(step)`` -> ``"step"``)."""
    names: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            found = _COMPILING.match(record.getMessage())
            if found:
                names.append(found.group(1))

    handler, logger = Collect(level=logging.DEBUG), logging.getLogger("jax")
    logger.addHandler(handler)
    try:
        with jax.log_compiles(True):
            yield names
    finally:
        logger.removeHandler(handler)
