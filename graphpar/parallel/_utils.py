"""MindSpore's ``mindspore.parallel._utils`` helpers that its tests import."""


def _reset_op_id() -> None:
    """MindSpore resets its process-wide node counter so that the ``-opN`` numbers of the next compiled graph start
    at 0. graphpar numbers each planned graph's ops from 0 already (``compile.plans.op_strategies``): there is no
    counter to reset, and a ported call changes nothing."""
