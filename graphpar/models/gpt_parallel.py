"""The strategies of ``graphpar.models.gpt`` under sequence and context parallel, in one value.

MindFormers (MindSpore 2.x's large-model suite) selects these in its parallel config, and so does ``GPT``:

- ``use_seq_parallel`` — Megatron's sequence parallel. The regions between the tensor-parallel matmuls (LayerNorm,
  residual Add, and the embedding and the logits) keep the token dimension split over the model-parallel devices as
  well as the data-parallel ones (``(dp * mp, 1)`` instead of ``(dp, 1)``). The column-parallel matmul that enters
  attention or the feed-forward wants whole rows (``(dp, 1)``), so XLA all-gathers them; the row-parallel matmul
  that leaves it is given ``out_strategy=((dp * mp, 1),)``, so its partial sums are reduce-scattered onto the
  rows instead of all-reduced. The activations of those regions are 1/mp as big; the wire bytes are Megatron's
  (an all-gather and a reduce-scatter cost what the all-reduce did, where XLA forms the reduce-scatter: GPU/TPU
  do, XLA:CPU compiles the all-reduce and a slice).
- ``context_parallel`` (cp) with ``context_parallel_algo`` — the sequence split ``cp`` ways everywhere, attention
  included (it needs ``use_flash_attention``, as MindFormers' does): ``"colossalai_cp"`` (ring attention: the
  ``FlashAttentionScore`` strategy splits its sequence dimension, the key/value blocks travel round the cp group
  as collective-permutes) or ``"ulysses_cp"`` (the ``FlashAttentionScore`` strategy splits the heads ``mp * cp``
  ways: XLA's all-to-alls move the sequence-split query/key/value to head-split and the output back).

The model keeps MindSpore's 2-D ``(batch * seq, hidden)`` activations, so "the token dimension" is rows: with one
sequence per data-parallel rank a row split is a sequence split; with more, a device's rows hold whole sequences
and context parallel's reshape into heads redistributes them (sequence parallel only gathers them, either way).
"""

from __future__ import annotations

from dataclasses import dataclass

from graphpar.planner.layout import Layout

CP_ALGOS = ("colossalai_cp", "ulysses_cp")

Strategy = tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class GPTParallel:
    """``dp`` x ``cp`` x ``mp`` devices; ``seq_parallel``: Megatron's sequence parallel over ``mp``;
    ``flash``: attention is one ``FlashAttentionScore`` op (else MindSpore transformer's BatchMatMul/Softmax)."""

    dp: int
    mp: int
    cp: int = 1
    seq_parallel: bool = False
    algo: str = "colossalai_cp"
    flash: bool = False

    def __post_init__(self):
        if self.algo not in CP_ALGOS:
            raise ValueError(f"GPT(context_parallel_algo={self.algo!r}): valid: {', '.join(map(repr, CP_ALGOS))}")
        if self.cp < 1:
            raise ValueError(f"GPT(context_parallel={self.cp}): must be a positive int")
        if self.cp > 1 and not self.flash:
            raise ValueError(f"GPT(context_parallel={self.cp}): context parallel splits the attention's sequence, "
                             f"which needs use_flash_attention=True (as MindFormers requires)")

    @property
    def rows(self) -> int:
        """The split of the token rows in the matmuls' regions (data and context parallel)."""
        return self.dp * self.cp

    @property
    def norm_rows(self) -> int:
        """The split of the token rows in the LayerNorm/residual regions: ``rows``, times mp with sequence parallel."""
        return self.rows * (self.mp if self.seq_parallel else 1)

    def column(self) -> tuple[Strategy, Strategy]:
        """(matmul, bias add) of a column-parallel Linear: whole rows in (an all-gather under sequence parallel)."""
        return ((self.rows, 1), (self.mp, 1)), ((self.rows, self.mp), (self.mp,))

    def row(self) -> tuple[Strategy, Strategy | None, Strategy]:
        """(matmul, its out_strategy, bias add) of a row-parallel Linear: under sequence parallel the output is
        scattered onto the rows (``out_strategy``), a reduce-scatter instead of an all-reduce."""
        out = ((self.norm_rows, 1),) if self.seq_parallel else None
        return ((self.rows, self.mp), (1, self.mp)), out, ((self.norm_rows, 1), (1,))

    def norm(self) -> Strategy:
        return ((self.norm_rows, 1), (1,), (1,))

    def residual(self) -> Strategy:
        return ((self.norm_rows, 1), (self.norm_rows, 1))

    def embedding(self) -> tuple[Strategy, Strategy]:
        """(Gather of the ids (batch, seq), Add of the position embedding): sequence split as the first LayerNorm's
        rows are (cp, times mp under sequence parallel)."""
        seq = self.norm_rows // self.dp
        return ((1, 1), (self.dp, seq)), ((self.dp, seq, 1), (1, seq, 1))

    def _layout(self) -> Layout:
        """The device matrix (dp, cp, mp), as the matmuls' row-major strategies lay the devices out: context
        parallel's strategies are written as layouts, so each split names its axis (a tuple strategy would put the
        axes in each op's own dimension order, and the attention's heads-before-sequence order would swap them)."""
        return Layout((self.dp, self.cp, self.mp), ("dp", "cp", "mp"))

    def heads(self) -> Strategy:
        """Transpose of (batch, seq, heads, head_dim) into heads: sequence split cp ways, heads mp ways."""
        if self.cp == 1:
            return ((self.dp, 1, self.mp, 1),)
        return (self._layout()("dp", "cp", "mp", "None"),)

    def flash_attention(self) -> Strategy:
        """FlashAttentionScore (BNSD): ring attention splits the sequence over cp; Ulysses the heads over mp and
        then cp (each device's heads a slice of its sequence-split heads: an all-to-all inside each cp group)."""
        if self.cp == 1:
            return ((self.dp, self.mp, 1, 1),) * 3
        if self.algo == "ulysses_cp":
            return (self._layout()("dp", ("mp", "cp"), "None", "None"),) * 3
        return (self._layout()("dp", "mp", "cp", "None"),) * 3

    def merge(self) -> Strategy:
        """Transpose of the attention's output (batch, heads, seq, head_dim) back to sequence-major."""
        if self.cp == 1:
            return ((self.dp, self.mp, 1, 1),)
        return (self._layout()("dp", "mp", "cp", "None"),)

    def logits(self) -> Strategy:
        return ((self.norm_rows, 1), (1, 1))
