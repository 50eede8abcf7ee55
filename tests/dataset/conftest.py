"""Every dataset test starts from graphpar.dataset's default config and no global seed, and leaves them as found."""

import pytest


@pytest.fixture(autouse=True)
def _fresh_dataset_config():
    from graphpar.common import seed as global_seed
    from graphpar.dataset import _rng, config

    saved = (config._seed, config._num_parallel_workers, config._prefetch_size, global_seed._seed,
             global_seed._generator)
    config._seed, config._num_parallel_workers, config._prefetch_size = None, None, None
    global_seed._seed, global_seed._generator = None, None
    _rng.reset_eager_rng()
    yield
    (config._seed, config._num_parallel_workers, config._prefetch_size, global_seed._seed,
     global_seed._generator) = saved
    _rng.reset_eager_rng()
