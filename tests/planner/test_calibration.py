"""The calibration file: ``python -m bench calibrate`` measures the cost model's constants on the machine at hand
and writes them where the planner reads them (``$GRAPHPAR_CALIBRATION``, else
``$XDG_CACHE_HOME/graphpar/calibration.json``); the stage search and the intra-op search price with them when present, else with the
built-in constants, and says which in one INFO line."""

from __future__ import annotations

import logging

import jax
import pytest

from bench.calibrate import KINDS, measure
from graphpar.planner.calibration import Calibration, calibration_path, load, platform_hardware, save
from graphpar.planner.cost import HARDWARE
from graphpar.planner.stages import Cluster, EdgeCost, LayerCost, Shape, assign

LAYER = LayerCost(tp=1, micro=1, flops=1e12, comm_bytes=1e8, messages=4, weight_bytes=1e8, activation_bytes=1e8,
                  boundary_bytes=1e7)


def _calibration(**kw) -> Calibration:
    base = dict(platform="cpu", devices=8, alpha=4e-4, beta=1.5e-9, gamma=2e-11, matmul_flops={"1024": 5e10},
                elementwise_bytes_per_s=2.4e9, collectives={"AllReduce": {"alpha": 4e-4, "beta": 1.5e-9}})
    return Calibration(**{**base, **kw})


def test_the_file_round_trips_and_keeps_other_platforms(tmp_path):
    path = tmp_path / "calibration.json"
    save(_calibration(), path)
    save(_calibration(platform="gpu", gamma=1e-15), path)
    assert load("cpu", path) == _calibration()
    assert load("gpu", path).gamma == 1e-15
    assert load("tpu", path) is None and load("cpu", tmp_path / "missing.json") is None


def test_the_path_is_the_override_else_the_xdg_cache(monkeypatch, tmp_path):
    monkeypatch.delenv("GRAPHPAR_CALIBRATION", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert calibration_path() == tmp_path / "graphpar" / "calibration.json"
    monkeypatch.setenv("GRAPHPAR_CALIBRATION", str(tmp_path / "mine.json"))
    assert calibration_path() == tmp_path / "mine.json"


def test_the_stage_search_prices_with_the_calibration_when_present_and_says_which(monkeypatch, tmp_path, caplog):
    path = tmp_path / "calibration.json"
    monkeypatch.setenv("GRAPHPAR_CALIBRATION", str(path))
    shape = Shape(2, 1, 4, 4, 1)
    with caplog.at_level(logging.INFO, logger="graphpar"):
        built_in = Cluster.for_platform(8, "cpu", None)
        assert built_in.hw == HARDWARE["cpu"]
        save(_calibration(), path)
        calibrated = Cluster.for_platform(8, "cpu", None)
    assert calibrated.hw.gamma == 2e-11 and calibrated.hw.beta == 1.5e-9 and calibrated.hw.alpha == 4e-4
    messages = [r.getMessage() for r in caplog.records]
    assert any("built-in constants" in m for m in messages)
    assert any(f"calibrated constants from {path}" in m for m in messages)
    before = assign(shape, 4, LAYER, EdgeCost(), EdgeCost(), built_in, slots=2.0)
    after = assign(shape, 4, LAYER, EdgeCost(), EdgeCost(), calibrated, slots=2.0)
    assert after.step_time != before.step_time


def test_the_intra_op_search_reads_the_calibration_too(monkeypatch, tmp_path):
    """AUTO_PARALLEL's intra-op search (``search_settings``) weighs its objective with the same constants: the
    calibration's beta and gamma when the file has the platform, the built-in ones otherwise."""
    from graphpar.planner.search.settings import search_settings

    path = tmp_path / "calibration.json"
    monkeypatch.setenv("GRAPHPAR_CALIBRATION", str(path))
    built_in = search_settings("auto_parallel", "dynamic_programming", None, "cpu").hardware
    assert (built_in.beta, built_in.gamma) == (HARDWARE["cpu"].beta, HARDWARE["cpu"].gamma)
    save(_calibration(), path)
    measured = search_settings("auto_parallel", "dynamic_programming", None, "cpu").hardware
    assert (measured.beta, measured.gamma) == (1.5e-9, 2e-11)
    # a mode that searches nothing reads no hardware constants
    assert search_settings("semi_auto_parallel", "dynamic_programming", None, "cpu").hardware.beta == \
        HARDWARE["cpu"].beta


def test_measure_covers_matmul_bandwidth_and_every_collective_kind_over_the_local_devices(tmp_path):
    cal = measure(matmul_sizes=(32, 64), elements=1024, small=16, large=4096, repeats=1)
    assert cal.platform == jax.local_devices()[0].platform and cal.devices == jax.local_device_count()
    assert set(cal.matmul_flops) == {"32", "64"} and all(f > 0 for f in cal.matmul_flops.values())
    assert cal.elementwise_bytes_per_s > 0 and cal.gamma == pytest.approx(1 / cal.matmul_flops["64"])
    if cal.devices > 1:
        assert set(cal.collectives) == set(KINDS) and cal.alpha == cal.collectives["AllReduce"]["alpha"]
    assert load(cal.platform, save(cal, tmp_path / "c.json")) == cal
