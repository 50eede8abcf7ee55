"""The ported seed-000 gradient-accumulation example: the hand-written loop equals the compiled wrapper."""

import importlib.util
import pathlib

import pytest


@pytest.mark.slow
def test_grad_accumulation_example_matches_by_hand_and_compiled():
    path = pathlib.Path(__file__).parents[2] / "examples" / "grad_accumulation.py"
    spec = importlib.util.spec_from_file_location("grad_accumulation_example", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main() < 1e-6
