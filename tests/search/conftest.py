import pytest

import graphpar as ms
from graphpar import _context


@pytest.fixture(autouse=True)
def _fresh_context():
    """Every search test leaves the global and parallel contexts as it found them (budgets, search modes)."""
    yield
    _context.reset_context()
    ms.reset_auto_parallel_context()
