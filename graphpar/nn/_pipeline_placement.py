"""Where a Cell runs in a pipeline: MindSpore's ``Cell.pipeline_stage`` and ``Cell.pipeline_segment`` properties,
mixed into :class:`graphpar.nn.cell.Cell` (its own module keeps ``cell.py`` to the Cell's core)."""

from __future__ import annotations


class PipelinePlacement:
    """``pipeline_stage`` / ``pipeline_segment``, checked as MindSpore checks them."""

    @property
    def pipeline_stage(self) -> int | None:
        """The pipeline stage this Cell (and every Cell below it that sets none) runs in; ``None`` when unset, as
        MindSpore's default. Read by ``graphpar.compile.pipeline.stage_split`` when ``pipeline_stages > 1``."""
        return self.__dict__.get("_pipeline_stage")

    @pipeline_stage.setter
    def pipeline_stage(self, value: int) -> None:
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"For 'Cell' {type(self).__name__}, the property 'pipeline_stage' must be int type, "
                            f"but got type : {type(value).__name__}")
        if value < 0:
            raise ValueError(f"For 'Cell' {type(self).__name__}, the property 'pipeline_stage' can not be less "
                             f"than 0, but got {value}")
        object.__setattr__(self, "_pipeline_stage", value)

    @property
    def pipeline_segment(self) -> int | None:
        """Which of its stage's virtual stages (segments) this Cell (and every Cell below it that sets none) runs
        in, with ``pipeline_config={"pipeline_interleave": True}``; ``None`` when unset (segment 0). Read by
        ``graphpar.compile.pipeline.stage_split``."""
        return self.__dict__.get("_pipeline_segment")

    @pipeline_segment.setter
    def pipeline_segment(self, value: int) -> None:
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"For 'Cell' {type(self).__name__}, the property 'pipeline_segment' must be int type, "
                            f"but got type : {type(value).__name__}")
        if value < 0:
            raise ValueError(f"For 'Cell' {type(self).__name__}, the property 'pipeline_segment' can not be less "
                             f"than 0, but got {value}")
        object.__setattr__(self, "_pipeline_segment", value)
