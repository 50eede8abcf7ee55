"""The pipeline's passes per mode, and the invariant check between passes (``GRAPHPAR_CHECK_PASSES``, on for the
whole test suite in tests/conftest.py): a pass that breaks the plan is caught and named, and with the check off the
pipeline runs exactly as before."""

import dataclasses

import pytest

from graphpar import _env
from graphpar.planner import planning as pipeline
from graphpar.planner.passes.context import PlanContext, PlanRequest
from graphpar.planner.passes.verify import PlanInvariantError
from graphpar.planner.strategy import MeshInfo

from .passes_helpers import in_strategies, node, provenances, quickstart

SCOPE = "Default/network-WithLossCell/_backbone-QuickstartNet"


def test_the_test_suite_runs_with_the_check_and_the_variable_turns_it_off(monkeypatch):
    assert _env.pass_checks_enabled()
    for off in ("0", ""):
        monkeypatch.setenv("GRAPHPAR_CHECK_PASSES", off)
        assert not _env.pass_checks_enabled()
    monkeypatch.delenv("GRAPHPAR_CHECK_PASSES")
    assert not _env.pass_checks_enabled()


@pytest.mark.parametrize(("mode", "search_mode", "passes"), [
    ("auto_parallel", "sharding_propagation", pipeline.SHARDING_PROPAGATION),
    ("auto_parallel", "recursive_programming", pipeline.SEARCH),
    ("auto_parallel", "dynamic_programming", pipeline.SEARCH),
    ("semi_auto_parallel", "sharding_propagation", pipeline.SEMI_AUTO),
    ("hybrid_parallel", "sharding_propagation", pipeline.SEMI_AUTO),
    ("data_parallel", "sharding_propagation", pipeline.DATA_PARALLEL),
])
def test_passes_for_each_mode(mode, search_mode, passes):
    assert pipeline.passes_for(PlanContext(MeshInfo(("m0",), (8,)), PlanRequest(8, mode, search_mode))) == passes


@pytest.mark.parametrize("parallel", [
    {"parallel_mode": "auto_parallel", "search_mode": "sharding_propagation"},
    {"parallel_mode": "auto_parallel", "search_mode": "recursive_programming"},
    {"parallel_mode": "semi_auto_parallel"},
])
def test_every_pass_of_each_pipeline_keeps_the_invariants_and_the_check_changes_nothing(monkeypatch, parallel):
    graph, ctx = quickstart(**parallel)
    checked = pipeline.plan_graph(graph, ctx.request)
    names = [name for name, _ in pipeline.passes_for(ctx)]
    assert list(checked.plan.pass_seconds) == names
    monkeypatch.setenv("GRAPHPAR_CHECK_PASSES", "0")
    graph, ctx = quickstart(**parallel)
    plain = pipeline.plan_graph(graph, ctx.request)
    assert in_strategies(plain) == in_strategies(checked) and provenances(plain) == provenances(checked)
    assert plain.plan.value_specs == checked.plan.value_specs
    assert list(plain.plan.pass_seconds) == names


def _split_twice(graph, ctx):
    """A broken pass: the ReLU's two dimensions split over the same mesh axis."""
    relu = node(graph, "relu")
    strategy = dataclasses.replace(relu.strategy, label_axes=(("d0", ("m0",)), ("d1", ("m0",))))
    return graph.with_annotations({relu.id: {"strategy": strategy}})


def _in_place(graph, ctx):
    """A broken pass: it writes into the graph it was given."""
    graph.plan = dataclasses.replace(graph.plan, value_specs={})
    return graph


def _undecide(graph, ctx):
    """A broken pass: it takes a decided strategy off."""
    return graph.with_annotations({node(graph, "relu").id: {"strategy": None, "provenance": None}})


def _stray_layout(graph, ctx):
    """A broken pass: a storage layout for a value that is no graph input."""
    out = node(graph, "relu").outputs[0]
    return graph.with_plan(value_specs={out: ((), ())})


def _no_provenance(graph, ctx):
    """A broken pass: a strategy whose origin is not recorded."""
    return graph.with_annotations({node(graph, "relu").id: {"provenance": None}})


def _with(broken, after="propagate"):
    """The quickstart's pipeline with ``broken`` run right after the pass ``after``, and no ``verify``."""
    passes = []
    for name, fn in pipeline.SHARDING_PROPAGATION:
        if name != "verify":
            passes.append((name, fn))
        if name == after:
            passes.append((broken.__name__.strip("_"), broken))
    return passes


@pytest.mark.parametrize(("broken", "message"), [
    (_split_twice, f"node %1 ReLU 'relu' ({SCOPE}) input 0: mesh axis 'm0' used twice in (('m0',), ('m0',))"),
    (_in_place, "the pass changed graph.plan of its input graph in place"),
    (_undecide, f"the pass took the strategy off node %1 ReLU 'relu' ({SCOPE})"),
    (_stray_layout, "storage layout ((), ()) recorded for %"),
    (_no_provenance, f"node %1 ReLU 'relu' ({SCOPE}) has a strategy but no provenance"),
])
def test_a_pass_that_breaks_the_plan_is_caught_and_named(broken, message):
    graph, ctx = quickstart()
    name = broken.__name__.strip("_")
    with pytest.raises(PlanInvariantError) as caught:
        pipeline.plan_graph(graph, ctx.request, _with(broken))
    assert caught.value.after_pass == name
    assert str(caught.value).startswith(f"after pass '{name}': {message}")


def test_the_check_is_opt_in(monkeypatch):
    monkeypatch.setenv("GRAPHPAR_CHECK_PASSES", "0")
    graph, ctx = quickstart()
    out = pipeline.plan_graph(graph, ctx.request, _with(_split_twice))  # nothing checks between passes, no verify
    assert node(out, "relu").strategy.label_axes == (("d0", ("m0",)), ("d1", ("m0",)))
    assert list(out.plan.pass_seconds) == [name for name, _ in _with(_split_twice)]
