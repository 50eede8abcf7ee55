"""The parallel passes, each a pure function ``(Graph, PlanContext) -> Graph`` (see ``pipeline.py``)."""
