"""What each pipeline schedule the runtime runs costs the stage search: its length in stage-times, the
micro-batches each device group holds at once, the transfers each group makes, and which chunk counts it runs.

The figures are those of the runtime's own schedule tables (``compile.pipeline.schedule`` and
``schedule_virtual``, one layer above the planner, so they are not imported here): tests/search/
test_stage_schedules.py builds those tables for many stage counts ``p``, chunk counts ``v`` and micro-batch counts
``m`` and checks every figure below against them (the idle time with ``schedule_cost``'s timeline under several
forward : backward ratios, the in-flight counts with ``peak_in_flight`` and a per-segment walk).

* ``1f1b`` and ``gpipe``, one chunk per group: the step takes ``m + p - 1`` stage-times (the fill and the drain
  each ``p - 1`` forwards / backwards); group ``s`` holds ``min(p - s, m)`` micro-batches under 1F1B, ``m`` under
  GPipe.
* interleaved 1F1B (``pipeline_interleave=True``, ``pipeline_scheduler="1f1b"``, ``v`` chunks per group; group
  ``s`` holds chunks ``s, s + p, ..., s + (v - 1) p``): group ``s`` runs ``2 (p - s - 1) + (v - 1) p`` warm-up
  forwards, so it holds ``min(2 (p - s - 1) + (v - 1) p + 1, v m)`` chunk-activations, each ``1 / v`` of the
  group's layers. Its timeline is ``m + (p - 1) / v`` stage-times whatever the forward : backward ratio (the
  runtime's table measured: the fill and drain shrink by ``v``; bubble ``(p - 1) / (v m + p - 1)``, MindFormers'
  figure). The first chunk (the embedding's) holds ``min(m, 2 p)`` micro-batches on group 0, the last (the
  head's) one on group ``p - 1``. Every chunk boundary is a transfer: group ``s`` sends / receives across
  ``2 v - [s = 0] - [s = p - 1]`` boundaries per micro-batch (``v`` times 1F1B's). The runtime runs micro-batches in
  rounds of ``p`` (``m`` a multiple of ``p``) and every chunk needs at least one layer.

``zero_bubble_v`` is not searched: its runtime orders are list-scheduled for ``F = B = W`` and under the real
ratio their idle time grows with ``m`` (the runtime's timeline at ``p = 8``, ``m = 32``, ``F : B : W = 1 : 2 : 2``:
5.1 stage-times, more than interleaved 1F1B's 3.5), and its ``W`` repeats the chunk's activation-gradient chain
(``compile.pipeline.stage_programs``), so pricing it needs a timeline simulation per shape, which is too slow for a
search over thousands of shapes.
"""

from __future__ import annotations

from collections.abc import Iterator

CHUNKS = (2, 3, 4)  # chunks per device group searched for interleaved 1F1B (besides 1)


def schedule_options(stages: int, micro_batches: int, n_layers: int,
                     schedules: tuple[str, ...]) -> Iterator[tuple[str, int]]:
    """``(schedule, chunks per group)`` the runtime runs for this pipeline, in a fixed order: each schedule with
    one chunk, then interleaved 1F1B with each of :data:`CHUNKS` that the runtime accepts (``stages > 1``,
    micro-batches a multiple of the stage count, at least one layer per chunk)."""
    for schedule in schedules:
        yield schedule, 1
        if schedule != "1f1b" or stages < 2 or micro_batches % stages:
            continue
        for v in CHUNKS:
            if stages * v <= n_layers:
                yield schedule, v


def pipeline_length(stages: int, chunks: int, micro_batches: int) -> float:
    """The step's pipelined part in stage-times (one stage-time: the slowest group's forward + backward of one
    micro-batch through all its chunks)."""
    return micro_batches + (stages - 1) / chunks


def bubble(stages: int, chunks: int, micro_batches: int) -> float:
    """The idle share of the pipelined part: ``(p - 1) / (v m + p - 1)``."""
    return (stages - 1) / (chunks * micro_batches + stages - 1)


def chunk_in_flight(schedule: str, stages: int, chunks: int, micro_batches: int, stage: int) -> int:
    """The most chunk-activations (one micro-batch through one of its chunks) group ``stage`` holds at once."""
    if schedule == "gpipe":
        return micro_batches * chunks
    if chunks == 1:
        return min(stages - stage, micro_batches)
    return min(2 * (stages - stage - 1) + (chunks - 1) * stages + 1, chunks * micro_batches)


def layer_in_flight(schedule: str, stages: int, chunks: int, micro_batches: int, stage: int) -> float:
    """Micro-batches of the whole group's layers held at once: the chunk-activations over ``chunks`` (each is
    ``1 / chunks`` of the layers; exact when the chunks split the group's layers evenly)."""
    return chunk_in_flight(schedule, stages, chunks, micro_batches, stage) / chunks


def edge_in_flight(schedule: str, stages: int, chunks: int, micro_batches: int, first: bool) -> int:
    """Micro-batches the first chunk (on group 0, ``first``) or the last (on group ``p - 1``) holds at once: what
    the embedding / the head keep."""
    if schedule == "gpipe":
        return micro_batches
    if chunks == 1:
        return min(stages, micro_batches) if first else 1
    return min(micro_batches, 2 * stages) if first else 1


def boundary_crossings(stages: int, chunks: int, stage: int) -> int:
    """Chunk boundaries group ``stage`` sends or receives across per micro-batch (an activation forward, its
    gradient back)."""
    if stages < 2:
        return 0
    return 2 * chunks - (stage == 0) - (stage == stages - 1)


def chunk_layers(layers: tuple[int, ...], chunks: int) -> list[tuple[int, int, int]]:
    """``(group, segment, layers)`` of every chunk in model order: chunk ``c`` is segment ``c // p`` of group
    ``c % p`` (the runtime's interleaved layout); group ``s``'s ``layers[s]`` layers are split as evenly as they
    go, the extra ones on its later segments (which hold fewer micro-batches)."""
    out = []
    for segment in range(chunks):
        for group, n in enumerate(layers):
            out.append((group, segment, n // chunks + (segment >= chunks - n % chunks)))
    return out
