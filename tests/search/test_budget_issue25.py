"""Issue 25's memory case: the 8 x 1024 MLP at batch 4,096 on 8 devices under ``max_device_memory="0.13GB"``
(139.6 MB; data parallel compiles to 138.5 MB, and the search's smallest prediction was 144.6 MB, so it refused a
budget that plans meet): the search plans it, its prediction is within 10 % of the compiled program's
``memory_analysis()``, and the compiled program meets the budget."""

import graphpar as ms
from graphpar.models.mlp import mlp_data

from .helpers import compiled_memory, mlp_train


def test_a_budget_below_data_parallel_is_planned_and_met_by_the_compiled_program():
    x, y = mlp_data(4096, 1024)
    dp = compiled_memory(mlp_train("data_parallel", 8, 1024), (x, y))
    ms.set_context(max_device_memory="0.13GB")
    budget = 0.13 * 1024 ** 3
    assert dp <= budget  # a plan that fits exists: the search must not refuse the budget
    train = mlp_train(None, 8, 1024, search_mode="dynamic_programming")
    planned = train.program.plan_graph([x, y])
    predicted = planned.plan.search.memory_bytes
    compiled = compiled_memory(train, (x, y))
    print(f"data parallel compiles to {dp} B; searched: predicted {predicted:.0f} B, compiled {compiled} B "
          f"({predicted / compiled:.3f}); budget {budget:.0f} B")
    assert predicted <= budget and compiled <= budget
    assert 0.90 * compiled <= predicted <= 1.10 * compiled
