"""``compile.staging.fingerprint.digest``, the executable cache's key: equal parts give equal digests in any process;
any difference of value, type, order (of a sequence) or sharding gives another; what it cannot see into is refused
by name (``Unseen``), never described by a guess."""

import enum

import jax
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from graphpar.compile.staging.fingerprint import Unseen, digest


class _Level(enum.IntEnum):
    LOW = 1


def test_values_that_differ_only_in_type_digest_differently():
    variants = [(1,), (True,), (1.0,), ("1",), (None,), [1], ((1,),), (_Level.LOW,), (np.int32(1),)]
    assert len({digest(v) for v in variants}) == len(variants)


def test_the_same_parts_built_again_digest_the_same():
    def parts():
        return {"b": (1, "x", [2.5, None]), "a": {"nested": (True, b"raw")}}, np.arange(6).reshape(2, 3)

    assert digest(*parts()) == digest(*parts())
    assert digest({"a": 1, "b": 2}) == digest({"b": 2, "a": 1})  # a dict's insertion order is no part of it
    assert digest((1, 2)) != digest((2, 1)) and digest(np.arange(3)) != digest(np.arange(3).astype(np.int8))


def test_shared_references_are_told_from_equal_copies():
    shared = [1, 2]
    assert digest((shared, shared)) != digest(([1, 2], [1, 2]))


def test_a_sharding_is_its_mesh_devices_and_spec():
    devices = np.array(jax.devices()[:8]).reshape(2, 4)
    mesh, flipped = Mesh(devices, ("d", "m")), Mesh(devices[:, ::-1], ("d", "m"))
    assert digest(NamedSharding(mesh, P("d"))) == digest(NamedSharding(Mesh(devices, ("d", "m")), P("d")))
    assert digest(NamedSharding(mesh, P("d"))) != digest(NamedSharding(mesh, P("m")))
    assert digest(NamedSharding(mesh, P("d"))) != digest(NamedSharding(flipped, P("d")))


def test_an_object_of_the_users_own_class_is_refused_by_name():
    class Mine:
        pass

    with pytest.raises(Unseen, match="Mine"):
        digest((1, {"k": Mine()}))
