"""``Model``: MindSpore's high-level train/eval/predict API.

``Model(network, loss_fn, optimizer, metrics)`` wraps the network into ``WithLossCell`` and ``TrainOneStepCell``
(whose compiled program does the work). ``train`` feeds global batches (``train.feeding``), runs the callbacks with
MindSpore's callback parameters, and in sink mode runs ``sink_size`` steps per device call.
"""

from __future__ import annotations

from typing import Any

from graphpar import _context
from graphpar._logging import notice_once
from graphpar.checkpoint import resume as resuming
from graphpar.communication import get_group_size
from graphpar.compile.plans.global_batch import to_host
from graphpar.compile.functional.per_rank import PerRankForward, forward_program
from graphpar.compile.runtime.forward import ForwardProgram
from graphpar.compile.runtime.program import TrainProgram
from graphpar.errors import CellError, api_boundary
from graphpar.nn.cell import Cell
from graphpar.nn.optim.optimizer import Optimizer
from graphpar.nn.wrap import TrainOneStepCell, WithEvalCell, WithLossCell
from graphpar.ops import runtime_checks
from graphpar.train.amp import build_train_network, check_level
from graphpar.train.callback._callback import CallbackList, InternalCallbackParam, RunContext
from graphpar.train.callback._checkpoint import checkpoint_callbacks
from graphpar.train.callback._progress import with_progress_bar
from graphpar.train.feeding import BatchFeeder, StallWatch, prefetched, sink_calls
from graphpar.train.metrics import get_metrics
from graphpar.train.predict_batch import rank_batches
from graphpar.train.predict_layout import parameter_layouts

_PLANNED_MODES = (_context.ParallelMode.SEMI_AUTO_PARALLEL, _context.ParallelMode.AUTO_PARALLEL,
                  _context.ParallelMode.HYBRID_PARALLEL)


class _OneDevice:
    """Where a custom training Cell runs: one device, one batch per step."""

    draws, first_rank = 1, 0

    def __init__(self) -> None:
        import jax

        self.devices = jax.local_devices()[:1]


class EagerTrainProgram:
    """A user's own training Cell (``Model(train_cell)``), called once per step as MindSpore calls it. It runs as
    written, on one device; wrap a loss network in ``nn.TrainOneStepCell`` for the compiled, parallel step."""

    def __init__(self, cell: Cell):
        notice_once("eager-train-cell", f"Model.train runs the custom training Cell {type(cell).__name__} as "
                    "written, step by step on one device; nn.TrainOneStepCell(loss_net, optimizer) gives the "
                    "compiled parallel step")
        self.cell = cell
        self.plan = _OneDevice()

    def run_step(self, inputs: Any) -> Any:
        return self.cell(*inputs)

    def run_steps(self, stacked: Any) -> Any:
        import jax.numpy as jnp

        return jnp.stack([jnp.asarray(self.cell(*[x[i] for x in stacked])) for i in range(len(stacked[0]))])


class Model:
    """``Model(network, loss_fn=None, optimizer=None, metrics=None, eval_network=None, amp_level="O0")``."""

    def __init__(self, network: Cell, loss_fn: Cell | None = None, optimizer: Optimizer | None = None,
                 metrics: Any = None, eval_network: Cell | None = None, eval_indexes: Any = None,
                 amp_level: str = "O0", boost_level: str = "O0", **kwargs: Any):
        if not isinstance(network, Cell):
            raise TypeError(f"Model(network): expected a Cell, got {type(network).__name__}")
        if optimizer is not None and not isinstance(optimizer, Optimizer):
            raise TypeError(f"Model(optimizer): expected a graphpar optimizer, got {type(optimizer).__name__}")
        amp_level = check_level(amp_level, "Model(amp_level)")
        if optimizer is None and amp_level != "O0":
            raise ValueError(f"Model(amp_level={amp_level!r}): mixed precision needs an optimizer (it builds the "
                             "train network); pass optimizer=... or amp_level='O0'")
        unknown = set(kwargs) - {"loss_scale_manager", "keep_batchnorm_fp32"}
        if unknown:
            raise TypeError(f"Model() got unexpected arguments {sorted(unknown)}")
        # MindSpore's _process_amp_args: O0/O3 default to keep_batchnorm_fp32=False, an explicit value wins
        self._amp_level = amp_level
        self._amp_config = dict(kwargs)
        if "keep_batchnorm_fp32" not in kwargs and amp_level in ("O0", "O3"):
            self._amp_config["keep_batchnorm_fp32"] = False
        self._network = network
        self._loss_fn = loss_fn
        self._optimizer = optimizer
        self._metrics = get_metrics(metrics)
        if optimizer is not None:
            self._train_network = self._build_train_network()
        elif loss_fn is None:
            # MindSpore: without a loss and an optimizer, the network is the training network (a custom train cell)
            self._train_network = network
        else:
            self._train_network = None
        if eval_network is not None:
            self._eval_network = eval_network
        elif loss_fn is not None:
            self._eval_network = WithEvalCell(network, loss_fn, add_cast_fp32=amp_level in ("O2", "O3"))
        else:
            self._eval_network = None
        self._eval_program: ForwardProgram | PerRankForward | None = None
        self._predict_program: ForwardProgram | PerRankForward | None = None

    def _build_train_network(self) -> TrainOneStepCell:
        if isinstance(self._network, TrainOneStepCell):
            return self._network
        return build_train_network(self._network, self._optimizer, self._loss_fn, level=self._amp_level,
                                   **self._amp_config)

    @property
    def train_network(self) -> TrainOneStepCell | None:
        return self._train_network

    @property
    def predict_network(self) -> Cell:
        return self._network

    @property
    def eval_network(self) -> Cell | None:
        return self._eval_network

    # --- training ----------------------------------------------------------------------------------------------
    def _feeder(self, dataset: Any, plan: Any, adapt: bool = False) -> BatchFeeder:
        """``adapt``: the pipeline's workers and read-ahead follow the loop's measurements (train/feeding.py)."""
        draws = 1 if _context.current_parallel().loads_full_batch else plan.draws
        return BatchFeeder(dataset, draws, plan.first_rank, get_group_size(),
                           plan.devices[0].platform if adapt else None)

    @api_boundary
    def train(self, epoch: int, train_dataset: Any, callbacks: Any = None, dataset_sink_mode: bool = False,
              sink_size: int = -1, initial_epoch: int = 0, resume: Any = False) -> None:
        """Train ``epoch`` epochs (from ``initial_epoch``) on ``train_dataset``.

        ``resume`` (graphpar): True continues from the newest complete checkpoint of the ``ModelCheckpoint``
        callbacks' directory, a path from that checkpoint; the step count, callbacks' numbering and the data position
        continue where it was saved. A restarted job (``graphpar launch --max-restarts``, ``MS_ENABLE_RECOVERY``)
        resumes by itself. See docs/checkpoints.md."""
        if self._train_network is None:
            raise ValueError("Model.train needs an optimizer: Model(network, loss_fn, optimizer), or a training "
                             "Cell that returns the loss: Model(train_cell)")
        if not isinstance(epoch, int) or epoch < 1:
            raise ValueError(f"Model.train(epoch): expected an int >= 1, got {epoch!r}")
        if not isinstance(sink_size, int) or sink_size == 0 or sink_size < -1:
            raise ValueError(f"Model.train(sink_size): expected -1 or a positive int, got {sink_size!r}")
        self._train_network.set_train(True)
        program = (self._train_network.program if isinstance(self._train_network, TrainOneStepCell)
                   else EagerTrainProgram(self._train_network))
        feeder = self._feeder(train_dataset, program.plan, adapt=not dataset_sink_mode)
        steps = feeder.steps_per_epoch()
        if steps < 1:
            raise ValueError("Model.train: the dataset yields no complete step (dataset size "
                             f"{train_dataset.get_dataset_size()} batches for {feeder.draws} device(s) per step)")
        per_call = (steps if sink_size == -1 else sink_size) if dataset_sink_mode else 1
        start_step = initial_epoch * (per_call if dataset_sink_mode else steps)
        progress = self._resume(resume, callbacks, steps)
        if progress is not None:
            start_step = progress["step"]
            initial_epoch = start_step // (per_call if dataset_sink_mode else steps)
        skip = start_step - initial_epoch * (per_call if dataset_sink_mode else steps)  # trained batches of it
        if self._optimizer is not None:
            updates = max(epoch - initial_epoch, 0) * (per_call if dataset_sink_mode else steps) - skip
            self._optimizer.warn_if_lr_runs_out(updates)
        cb = InternalCallbackParam(
            train_network=self._train_network, network=self._network, loss_fn=self._loss_fn,
            optimizer=self._optimizer, epoch_num=epoch, batch_num=steps, cur_epoch_num=initial_epoch,
            cur_step_num=start_step, net_outputs=None,
            dataset_sink_mode=dataset_sink_mode, sink_size=per_call, train_dataset=train_dataset,
            parallel_mode=_context.current_parallel().parallel_mode, device_number=len(program.plan.devices),
            mode="train", list_callback=callbacks, resumed_from=progress["checkpoint"] if progress else None)
        callback_list = CallbackList(with_progress_bar(callbacks))  # a live bar when stdout is a terminal
        run_context = RunContext(cb)
        callback_list.on_train_begin(run_context)
        place = program.place_inputs if isinstance(program, TrainProgram) else None
        # local: graphpar.dataset loads grain (and orbax through it: 0.5 s, and absl's logging setup); only
        # training needs it, so that `import graphpar` does not pay for it
        from graphpar.dataset.config import get_device_prefetch_size

        depth = get_device_prefetch_size()
        stream = None
        if dataset_sink_mode and sink_size != -1:
            stream = (feeder.forever(start_step // steps, start_step % steps) if progress is not None
                      else feeder.forever(initial_epoch))
        for ep in range(initial_epoch, epoch):
            cb.cur_epoch_num = ep + 1
            callback_list.on_train_epoch_begin(run_context)
            if dataset_sink_mode:
                source = stream if stream is not None else feeder.epoch(ep)
                batches = [next(source) for _ in range(per_call)]
                cb.train_dataset_element = batches[-1]
                callback_list.on_train_step_begin(run_context)
                # a batch of another shape (a partial last batch) runs as a call of its own (feeding.sink_calls)
                losses = [program.run_steps(stacked) for stacked in sink_calls(batches)]
                cb.cur_step_num += per_call
                cb.net_outputs = losses[-1][-1]
                runtime_checks.raise_pending()  # a failed op check of a finished step, before callbacks read
                callback_list.on_train_step_end(run_context)
            else:
                # batches reach the devices ahead of their step (train/feeding.py DevicePrefetch)
                batches = StallWatch(prefetched(feeder.epoch(ep, skip if ep == initial_epoch else 0,
                                                             read_ahead=place is None or depth <= 0), place, depth),
                                     feeder.tuner, ep + 1)
                for batch, placed in batches:
                    cb.train_dataset_element = batch
                    callback_list.on_train_step_begin(run_context)
                    cb.net_outputs = program.run_step(placed)
                    cb.cur_step_num += 1
                    runtime_checks.raise_pending()  # a failed op check of a finished step, before callbacks read
                    callback_list.on_train_step_end(run_context)
                    if run_context.get_stop_requested():
                        break
                batches.close()
                batches.report(train_dataset, ep + 1, depth)
            runtime_checks.flush()  # every step's op checks, before the epoch's callbacks (a checkpoint) run
            callback_list.on_train_epoch_end(run_context)
            if run_context.get_stop_requested():
                break
        callback_list.on_train_end(run_context)
        if not run_context.get_stop_requested():
            resuming.training_finished()

    def _resume(self, resume: Any, callbacks: Any, steps: int) -> dict | None:
        """Restore the train network from the checkpoint to resume from (if any); its training progress."""
        path = resuming.choose(resume, checkpoint_callbacks(callbacks))
        if path is None:
            return None
        progress = resuming.restore(self._train_network, path)
        if progress["batch_num"] != steps:
            notice_once(f"resume-steps:{path}", f"resume: {path} was saved with {progress['batch_num']} steps per "
                        f"epoch, this dataset gives {steps}; the data position is mapped by step count")
        return progress

    # --- evaluation and prediction -----------------------------------------------------------------------------
    @api_boundary
    def eval(self, valid_dataset: Any, callbacks: Any = None, dataset_sink_mode: bool = False) -> dict[str, float]:
        """Metrics over one pass of ``valid_dataset`` (``{"acc": 0.93, "loss": 0.21}``)."""
        if not self._metrics:
            raise ValueError("Model.eval needs metrics: Model(..., metrics={'acc'})")
        if self._eval_network is None:
            raise ValueError("Model.eval needs a loss_fn or an eval_network")
        self._eval_network.set_train(False)
        if self._eval_program is None:
            self._eval_program = forward_program(self._eval_network)
        for metric in self._metrics.values():
            metric.clear()
        feeder = self._feeder(valid_dataset, self._eval_program.plan)
        cb = InternalCallbackParam(eval_network=self._eval_network, valid_dataset=valid_dataset,
                                   metrics=self._metrics, mode="eval", batch_num=feeder.steps_per_epoch(),
                                   cur_step_num=0, cur_epoch_num=1, net_outputs=None,
                                   dataset_sink_mode=dataset_sink_mode)
        callback_list, run_context = CallbackList(callbacks), RunContext(cb)
        callback_list.on_eval_begin(run_context)
        for batch in feeder.epoch(0):
            callback_list.on_eval_step_begin(run_context)
            loss, outputs, label = self._eval_program(*batch)
            cb.net_outputs = (loss, outputs, label)
            loss, outputs, label = to_host(loss), to_host(outputs), to_host(label)
            for metric in self._metrics.values():
                if type(metric).__name__ == "Loss":
                    metric.update(loss)
                else:
                    metric.update(outputs, label)
            cb.cur_step_num += 1
            callback_list.on_eval_step_end(run_context)
        runtime_checks.flush()
        callback_list.on_eval_end(run_context)
        self._network.set_train(True)
        return {name: metric.eval() for name, metric in self._metrics.items()}

    @api_boundary
    def infer_predict_layout(self, *predict_data: Any) -> dict[str, tuple[Any, ...]]:
        """The predict network's parameter layouts for ``predict_data`` (this rank's batch, as ``predict`` takes
        it), in MindSpore's ``parameter_layout_dict`` format (``train.predict_layout``); empty outside SEMI_AUTO /
        AUTO. GRAPH_MODE only, as MindSpore's."""
        if _context.current().mode != _context.GRAPH_MODE:
            raise CellError("Model.infer_predict_layout: the layouts come from the compiled predict program, which "
                            "PYNATIVE_MODE does not build; call set_context(mode=GRAPH_MODE) first (MindSpore's "
                            "rule)")
        if _context.current_parallel().parallel_mode not in _PLANNED_MODES:
            return {}
        program = self._predict()
        return parameter_layouts(program.planned(*rank_batches(program.plan, predict_data).inputs))

    def _predict(self) -> ForwardProgram | PerRankForward:
        self._network.set_train(False)
        if self._predict_program is None:
            self._predict_program = forward_program(self._network)
        return self._predict_program

    def predict(self, *predict_data: Any) -> Any:
        """The network's output on ``predict_data`` (evaluation mode).

        As in MindSpore, in a parallel mode without ``full_batch`` the data is this rank's batch, not the global
        one: each of the ranks this process drives gets it (as ``Model.train`` feeds an unsharded dataset), the
        global batch is theirs together, and the rows of this process's first rank come back
        (``train.predict_batch``; docs/checkpoints.md §6)."""
        program = self._predict()
        batches = rank_batches(program.plan, predict_data)
        return batches.rank_rows(program(*batches.inputs))
