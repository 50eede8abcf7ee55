"""Placeholder until the dump writers land."""


def maybe_dump_begin(graph, plan):
    return None
