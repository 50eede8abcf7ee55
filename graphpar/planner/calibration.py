"""Measured cost-model constants: the small file ``python -m bench calibrate`` writes and the planner reads.

The cost model prices time as alpha x messages + beta x wire bytes + gamma x FLOPs (:class:`~.cost.Hardware`); its
built-in constants per platform are orders of magnitude. A calibration file holds, per platform, what was measured
on the machine at hand: matmul FLOP/s at a few sizes, element-wise bandwidth, and per collective kind the latency
and the seconds per wire byte over the local devices, with the three constants derived from them (gamma from the
largest matmul, beta and alpha from the AllReduce fit).

Where: ``$GRAPHPAR_CALIBRATION`` when set (a path; the override), else ``$XDG_CACHE_HOME/graphpar/calibration.json``
(``~/.cache`` when ``XDG_CACHE_HOME`` is unset). :func:`platform_hardware` gives the measured constants of a
platform when the file has them, else the built-in ones, and says which once (one INFO line per platform and file).
The stage search (``planner.stages``: ``Cluster.for_platform``) prices with it.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from graphpar._logging import notice_once
from graphpar.planner.cost import DEFAULT_HW, HARDWARE, Hardware

ENV = "GRAPHPAR_CALIBRATION"
VERSION = 1


@dataclass(frozen=True)
class Calibration:
    """One platform's measurements (``devices``: how many local devices the collectives ran over)."""

    platform: str
    devices: int
    alpha: float  # s per collective
    beta: float  # s per wire byte
    gamma: float  # s per FLOP
    matmul_flops: dict[str, float] = field(default_factory=dict)  # "n" (an n x n x n matmul) -> FLOP/s
    elementwise_bytes_per_s: float = 0.0
    collectives: dict[str, dict[str, float]] = field(default_factory=dict)  # kind -> {"alpha", "beta"}

    def hardware(self) -> Hardware:
        return Hardware(self.platform, self.alpha, self.beta, self.gamma)


def calibration_path() -> Path:
    """Where the calibration file is read and written (module docstring)."""
    override = os.environ.get(ENV)
    if override:
        return Path(override)
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "graphpar" / "calibration.json"


def save(calibration: Calibration, path: Path | None = None) -> Path:
    """Write (or update) ``calibration``'s platform in the file; the other platforms' entries are kept."""
    path = calibration_path() if path is None else Path(path)
    data = _read(path) or {"version": VERSION, "platforms": {}}
    data["platforms"][calibration.platform] = asdict(calibration)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, sort_keys=True))
    return path


def load(platform: str, path: Path | None = None) -> Calibration | None:
    """The platform's calibration from the file, or None (no file, another version, no entry for the platform)."""
    data = _read(calibration_path() if path is None else Path(path))
    entry = None if data is None else data.get("platforms", {}).get(platform)
    return None if entry is None else Calibration(**entry)


def _read(path: Path) -> dict | None:
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        notice_once(f"calibration:unreadable:{path}", f"calibration file {path} is not readable JSON: the planner "
                    "uses its built-in constants (rerun python -m bench calibrate)")
        return None
    return data if isinstance(data, dict) and data.get("version") == VERSION else None


def platform_hardware(platform: str, path: Path | None = None) -> Hardware:
    """The cost model's constants for ``platform``: measured (the calibration file) when present, else built in."""
    path = calibration_path() if path is None else Path(path)
    measured = load(platform, path)
    if measured is not None:
        hw = measured.hardware()
        notice_once(f"calibration:measured:{platform}:{path}", f"cost model for {platform}: calibrated constants "
                    f"from {path} (alpha {hw.alpha:.3g} s, beta {hw.beta:.3g} s/B, gamma {hw.gamma:.3g} s/FLOP)",
                    logging.INFO)
        return hw
    hw = HARDWARE.get(platform, DEFAULT_HW)
    notice_once(f"calibration:built-in:{platform}:{path}", f"cost model for {platform}: built-in constants (no "
                f"calibration at {path}; python -m bench calibrate measures them)", logging.INFO)
    return hw
