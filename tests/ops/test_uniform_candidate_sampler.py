"""UniformCandidateSampler: MindSpore's arguments, its kernel's draw-until-accepted sampling and expected counts,
and its sharding rule (the true expected counts follow true_classes' split; remove_accidental_hits forbids one)."""

import numpy as np
import pytest

import graphpar as ms
from graphpar import Tensor, nn
from graphpar.errors import StrategyError
from graphpar.ops import operations as P
from tests.planner.helpers import kind_strategies


def _classes():
    return Tensor(np.array([[1, 3], [3, 4], [1, 1], [4, 3]], np.int32))


def test_non_unique_draws_num_sampled_with_count_p_times_n():
    sampled, true_count, sampled_count = P.UniformCandidateSampler(2, 6, False, 10, seed=3)(_classes())
    sampled = np.asarray(sampled)
    assert sampled.shape == (6,) and sampled.dtype == np.int32 and ((0 <= sampled) & (sampled < 10)).all()
    np.testing.assert_allclose(np.asarray(true_count), np.full((4, 2), 0.6, np.float32))  # p * n = 6 / 10
    np.testing.assert_allclose(np.asarray(sampled_count), np.full((6,), 0.6, np.float32))


def test_unique_with_removed_hits_avoids_true_classes():
    for seed in (1, 2, 3):
        sampled, _, count = P.UniformCandidateSampler(2, 5, True, 8, seed=seed, remove_accidental_hits=True)(
            _classes())
        sampled = np.asarray(sampled)
        assert len(set(sampled.tolist())) == 5 and not set(sampled.tolist()) & {1, 3, 4}
        assert sorted(sampled.tolist()) == [0, 2, 5, 6, 7]  # the only 5 classes left
        # p * n when no draw was rejected, else 1 - (1 - p) ** tries for the tries > 5 the kernel made
        allowed = [5 / 8] + [-np.expm1(tries * np.log1p(-1 / 8)) for tries in range(6, 500)]
        assert np.isclose(allowed, float(np.asarray(count)[0]), rtol=1e-5).any()


def test_arguments_are_checked():
    with pytest.raises(ValueError, match="num_sampled \\(9\\) must be <= range_max"):
        P.UniformCandidateSampler(1, 9, True, 8)
    with pytest.raises(TypeError, match="unique must be a bool"):
        P.UniformCandidateSampler(1, 2, 1, 8)


class _Net(nn.Cell):
    def __init__(self, strategy, remove=False):
        super().__init__()
        self.sampler = P.UniformCandidateSampler(2, 4, True, 20, seed=4, remove_accidental_hits=remove)
        self.sampler.shard(strategy)

    def construct(self, x):
        _, true_count, _ = self.sampler(x)
        return true_count


def test_true_expected_count_follows_the_split():
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8)
    x = Tensor(np.arange(32, dtype=np.int32).reshape(16, 2) % 20)
    assert kind_strategies(_Net(((8, 1),)), x, kind="UniformCandidateSampler") == [[[8, 1], [1]]]
    with pytest.raises(StrategyError, match="UniformCandidateSampler cannot split true_classes dim 0"):
        ms.parallel.strategies(_Net(((8, 1),), remove=True), x)
