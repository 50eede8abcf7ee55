"""Shardings of an optimizer state are a pure function of its leaves' paths and shapes
(``compile.plans.layout.state_shardings``): a leaf that mirrors a parameter lives where the parameter lives."""

import jax
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from graphpar.compile.plans.layout import state_shardings
from graphpar.planner.state_paths import parameter_of


def test_mirrored_leaves_follow_their_parameter_and_the_others_are_replicated():
    mesh = Mesh(np.asarray(jax.devices()[:2]), ("m0",))
    split, whole = NamedSharding(mesh, PartitionSpec("m0")), NamedSharding(mesh, PartitionSpec())
    params = {"w": np.zeros((4, 2), np.float32), "b": np.zeros((2,), np.float32)}
    state = jax.eval_shape(optax.adam(1e-3).init, params)
    shardings = state_shardings(state, {"w": ((4, 2), split), "b": ((2,), whole)}, lambda shape: whole)
    adam = shardings[0]
    assert adam.mu["w"] is split and adam.nu["w"] is split and adam.mu["b"] is whole
    assert adam.count is whole  # a step count mirrors no parameter
    paths = [path for path, _ in jax.tree_util.tree_flatten_with_path(state)[0]]
    assert sorted(str(parameter_of(p, params)) for p in paths) == ["None", "b", "b", "w", "w"]


def test_a_leaf_named_like_a_parameter_but_shaped_otherwise_is_not_its_mirror():
    mesh = Mesh(np.asarray(jax.devices()[:2]), ("m0",))
    split, whole = NamedSharding(mesh, PartitionSpec("m0")), NamedSharding(mesh, PartitionSpec())
    state = {"row": {"w": jax.ShapeDtypeStruct((4,), np.float32)}}  # a factored second moment (Adafactor)
    assert state_shardings(state, {"w": ((4, 2), split)}, lambda shape: whole)["row"]["w"] is whole
