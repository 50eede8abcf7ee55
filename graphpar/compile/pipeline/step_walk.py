"""One pipelined step's walk over the schedule: each action's stage program, and the moves of its results.

Every process walks the same global schedule (``Built.ticks``) in the same order. An action of a stage (a chunk,
with virtual stages) this process owns runs that chunk's program: ``F`` the forward, ``B`` the backward (or, when
the schedule has ``W`` actions, only the input gradient, ``backward_input``), ``W`` the weight gradient
(``backward_weight``). What an action sends (activations forward, their gradients back) moves at the same point of
the schedule in every process (``transfer.Links.move``: a ``device_put`` within a process and between two chunks of
one device group, a small collective program between processes), so the collectives of any two processes are
issued in one order. A process that owns neither end of a move skips it; the counts and the transfer log are the
same in every process (moves between two chunks of one device group are not transfers and are not counted).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from graphpar.compile.pipeline.build import Built, Stage
from graphpar.compile.pipeline.schedule import Action, splits_backward
from graphpar.compile.pipeline.stage_programs import is_float
from graphpar.compile.pipeline.step_record import ActionTiming, log_entry, residual_bytes

Call = Callable[..., Any]  # (stage, program kind, *args) -> the program's outputs


@dataclass
class PipelineStats:
    """What the runtime measured: activation-sized tensors moved between stages (forward activations and their
    gradients) in the last step and in all steps, and the most micro-batches of residuals (and their bytes on one
    device) each stage held at once."""

    steps: int = 0
    transfers_last_step: int = 0
    transfers_total: int = 0
    peak_live_micro_batches: list[int] = field(default_factory=list)
    peak_residual_bytes: list[int] = field(default_factory=list)
    transfer_log: list[dict[str, Any]] = field(default_factory=list)  # the first step's transfers, for the dumps
    shared_sums_last_step: int = 0  # gradient sums over the copies of stage-shared Parameters, in the last step


class StepWalk:
    """The working values of one step while its schedule is walked: ``pv``/``rv`` (``{(chunk, index): value}`` of
    the parameters and state of the chunks this process owns, updated in place), each owned chunk's micro-batches
    ``data``, and what the walk produces: the loss of every micro-batch, each chunk's accumulated gradients, the
    transfers it moved and (``first``: the first step) their log."""

    def __init__(self, built: Built, call: Call, pv: dict[tuple[int, int], Any], rv: dict[tuple[int, int], Any],
                 data: list[Any], stats: PipelineStats, first: bool):
        self.built, self.call, self.pv, self.rv, self.data = built, call, pv, rv, data
        self.stats, self.first = stats, first
        self.layout, self.split_bwd = built.virtual, splits_backward(built.orders)
        self.dests: dict[int, list[int]] = {}
        self.source: dict[int, int] = {}
        for t in built.split.transfers:
            self.dests.setdefault(t.value, []).append(t.dst)
            self.source[t.value] = t.src
        self.inbox: dict[tuple[int, int, int], Any] = {}  # (value, receiving chunk, micro) -> the activation
        self.ct_box: dict[tuple[int, int], list[Any]] = {}  # (value, micro) -> its gradient's parts
        self.residual: dict[tuple[int, int], Any] = {}  # (chunk, micro) -> the forward's VJP, until its backward
        self.pending_ct: dict[tuple[int, int], list[Any]] = {}  # a split backward's output cotangent, B until W
        self.grads: list[Any] = [None] * len(built.stages)
        self.losses: list[Any] = []
        self.moved = 0
        self.log: list[dict[str, Any]] = []

    def run(self, timings: list[ActionTiming] | None, drain: Callable[[], None]) -> None:
        """Every action of the schedule in order; with ``timings`` (a traced step) each one alone, waited for
        (``drain``) and timed."""
        for tick in self.built.ticks:
            for a in tick:
                started, cpu = time.perf_counter(), time.process_time()
                chunk = self.layout.chunk(a.stage, a.segment)
                st = self.built.stages[chunk]
                if a.kind == "F":
                    self._forward(a, chunk, st)
                elif a.kind == "W":
                    self._weight(a, chunk, st)
                else:
                    self._backward(a, chunk, st)
                if timings is not None:
                    drain()
                    timings.append(ActionTiming(a, started, time.perf_counter(), time.process_time() - cpu))

    def _forward(self, a: Action, chunk: int, st: Stage) -> None:
        sg = st.sg
        sent: list[Any] = [None] * len(sg.sent)
        if st.owned:
            recv = [self.inbox.pop((v, chunk, a.micro)) for v in sg.received]
            args = ([self.pv[(chunk, i)] for i in sg.params], [self.rv[(chunk, i)] for i in sg.rest],
                    self.data[chunk][a.micro], recv)
            sent, loss, new_rest, kept = self.call(st, "forward", *args)
            self.rv.update({(chunk, j): value for j, value in zip(sg.rest_out, new_rest)})
            self.residual[(chunk, a.micro)] = st.residuals.join(kept, args[0])  # the parameters' own arrays in it
            if loss is not None:
                self.losses.append(loss)
            self._measure(a.stage)
        for v, x in zip(sg.sent, sent):
            for d in self.dests[v]:
                placed = self._move("forward", a.micro, chunk, d, v, x)
                if placed is not None:
                    self.inbox[(v, d, a.micro)] = placed

    def _backward(self, a: Action, chunk: int, st: Stage) -> None:
        sg = st.sg
        drecv: list[Any] = [None] * len(sg.received)
        if st.owned:
            ct = []
            for v in sg.sent:
                parts = self.ct_box.pop((v, a.micro))
                ct.append(parts[0] if len(parts) == 1 else sum(parts[1:], parts[0]))
            if self.grads[chunk] is None:
                self.grads[chunk] = self.call(st, "zeros", [self.pv[(chunk, i)] for i in sg.params])
            if self.split_bwd:  # the input gradient now; the weight gradient at this micro-batch's W
                self.pending_ct[(chunk, a.micro)] = ct
                drecv = self.call(st, "backward_input", self.residual[(chunk, a.micro)], ct)
            else:
                vjp = self.residual.pop((chunk, a.micro))
                self.grads[chunk], drecv = self.call(st, "backward", vjp, ct, self.grads[chunk])
                del vjp
        floats = [v for v in sg.received if is_float(self.built.graph.values[v])]
        for v, d in zip(floats, drecv):
            placed = self._move("backward", a.micro, chunk, self.source[v], v, d)
            if placed is not None:
                self.ct_box.setdefault((v, a.micro), []).append(placed)

    def _weight(self, a: Action, chunk: int, st: Stage) -> None:
        if not st.owned:
            return
        vjp, ct = self.residual.pop((chunk, a.micro)), self.pending_ct.pop((chunk, a.micro))
        if st.sg.params:
            self.grads[chunk] = self.call(st, "backward_weight", vjp, ct, self.grads[chunk])
        del vjp

    def _move(self, direction: str, micro: int, src: int, dst: int, v: int, x: Any) -> Any:
        """``x`` (None where this process does not run chunk ``src``) from chunk ``src`` to chunk ``dst``: the
        value on ``dst``'s devices, or None where this process does not run ``dst``."""
        built, stages = self.built, self.built.stages
        value = built.graph.values[v]
        placed = built.links.move((src, dst, v), x, stages[src].value_sh[v], stages[dst].value_sh[v], value.shape,
                                  value.dtype)
        if self.layout.place(src)[0] != self.layout.place(dst)[0]:  # not between two chunks of one device group
            self.moved += 1
            shown = placed if placed is not None else x
            if self.first and shown is not None:
                self.log.append(log_entry(direction, micro, src, dst, v, built.graph, shown))
        return placed

    def _measure(self, stage: int) -> None:
        """The live residual buffers of ``stage``'s devices (all its chunks): how many micro-batch chunks, and
        their bytes on one device (``step_record.residual_bytes``)."""
        place = self.layout.place
        held = [vjp for (c, _), vjp in self.residual.items() if place(c)[0] == stage]
        nbytes = residual_bytes(held, [x for (c, _), x in self.pv.items() if place(c)[0] == stage])
        stats = self.stats
        stats.peak_live_micro_batches[stage] = max(stats.peak_live_micro_batches[stage], len(held))
        stats.peak_residual_bytes[stage] = max(stats.peak_residual_bytes[stage], nbytes)
