"""``ir.free_variables.reach``: the walk both ``graphpar.jit`` (a step's Cells and Parameters) and a traced
``if``/``while`` (what a branch may write) use to find the state a Python function reaches through its free
variables, as MindSpore's graph compiler resolves names."""

import numpy as np

import graphpar as ms
from graphpar import nn
from graphpar.compile.functional.discover import reachable_state
from graphpar.ir.control_flow.merge import reachable_slots
from graphpar.ir.free_variables import bindings_hold, reach

net = nn.Dense(2, 2)


class Trainer:
    """A plain object holding a Cell: reached through a bound method of it."""

    def __init__(self):
        self.head = nn.Dense(2, 1)

    def step(self):
        return self.head


def is_cell(obj):
    return isinstance(obj, nn.Cell)


def test_closures_globals_and_defaults_are_followed_in_the_order_the_code_names_them():
    extra = ms.Parameter(np.zeros(2, np.float32), name="extra")
    other = nn.Dense(2, 3)

    def step(x, scale=[other]):  # a default argument holding a Cell
        return net(x) * extra  # a global Cell, a closure Parameter

    cells, loose, bindings = reachable_state(step)
    assert cells == [net, other] and loose == [extra]
    assert bindings_hold(bindings)
    scope = step.__globals__
    scope["net"] = nn.Dense(2, 2)  # the global rebound: the step now reaches another network
    try:
        assert not bindings_hold(bindings)
    finally:
        scope["net"] = cells[0]


def test_a_bound_method_leads_into_its_objects_attributes_or_to_the_object_itself():
    trainer = Trainer()
    # a step's state (graphpar.jit): the plain object's attributes are reached, so its Cell is found
    assert reach([trainer.step], is_cell, method_attributes=True).objects == (trainer.head,)
    # a branch's state (a traced if): the object itself, which, being a plain object, is not entered
    assert reach([trainer.step], is_cell, method_attributes=False).objects == ()
    # a Cell's own method: its whole tree is one piece of a branch's state, every Parameter a slot
    labels = {slot.label for slot in reachable_slots([trainer.head.construct])}
    assert labels == {f"Parameter '{p.name}'" for p in trainer.head.get_parameters()}
