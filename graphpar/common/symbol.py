"""MindSpore's ``Symbol``: what is known of one dynamic dimension of a ``Tensor(shape=[Symbol(divisor=8), 64])``.

A plain dynamic dimension (``None``) takes any size. A ``Symbol`` says more: the size is ``divisor * N + remainder``
(``N >= 1``), at least ``min``, at most ``max`` (when ``max > min``), and with ``unique`` every dimension given this
one object has the same size. graphpar carries it three ways (``graphpar.common.placeholder``):

* into the symbolic trace: the dimension is ``divisor*k + remainder`` over a JAX symbol ``k`` (one per unique
  Symbol object, else one per dimension) with ``min`` / ``max`` as JAX shape constraints, so every op's dimension
  derived from it knows what divides it;
* into the plan: a strategy may split such a dimension only into parts that divide what is known to divide it
  (MindSpore's ``CheckLayoutAndDivisor`` / the divisor shapes its ``CheckStrategy`` reads,
  ``frontend/parallel/dynamic_shape``), refused by name otherwise;
* into each call: a size that breaks the Symbol is refused by name (``InputSignatureError``).

Arguments are checked as MindSpore checks them (``TypeError`` for a non-int / non-bool, ``ValueError`` for a
``min`` or ``divisor`` below 1, a ``remainder`` outside ``[0, divisor)``).
"""

from __future__ import annotations


class Symbol:
    """``Symbol(max=0, min=1, divisor=1, remainder=0, unique=False)``: one dynamic dimension's known facts (module
    docstring). Compared by identity: ``unique`` ties the dimensions that share this very object."""

    __slots__ = ("max", "min", "divisor", "remainder", "unique", "id")

    def __init__(self, max: int = 0, min: int = 1, divisor: int = 1, remainder: int = 0,  # noqa: A002
                 unique: bool = False):
        for name, value in (("max", max), ("min", min), ("divisor", divisor), ("remainder", remainder)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"For 'Symbol', the argument '{name}' must be int, but got {type(value)}")
        if not isinstance(unique, bool):
            raise TypeError(f"For 'Symbol', the argument 'unique' must be bool, but got {type(unique)}")
        if min <= 0:
            raise ValueError(f"For 'Symbol', the 'min' value should be positive, but got {min}")
        if divisor <= 0:
            raise ValueError(f"For 'Symbol', the 'divisor' value should be positive, but got {divisor}")
        if remainder < 0 or remainder >= divisor:
            raise ValueError(f"For 'Symbol', the 'remainder' value should be in the range '[0, {divisor})', but "
                             f"got {remainder}")
        self.max, self.min, self.divisor, self.remainder, self.unique = max, min, divisor, remainder, unique
        self.id = id(self)

    @property
    def lower(self) -> int:
        """The least size: ``divisor * 1 + remainder`` (``N >= 1``) or ``min``, whichever is larger."""
        return self.min if self.min > self.divisor + self.remainder else self.divisor + self.remainder

    @property
    def upper(self) -> int | None:
        """The largest size, or None: ``max`` counts only when it is larger than ``min`` (as MindSpore reads it)."""
        return self.max if self.max > self.min else None

    def admits(self, size: int) -> str | None:
        """Why ``size`` cannot be this dimension's size, or None when it can."""
        if (size - self.remainder) % self.divisor:
            return f"{size} is not {self.divisor} * N + {self.remainder}"
        if size < self.lower:
            return f"{size} is below its least size {self.lower}"
        if self.upper is not None and size > self.upper:
            return f"{size} is above its max {self.upper}"
        return None

    def scaled(self, factor: int) -> "Symbol":
        """The Symbol of ``factor`` times this dimension (a rank's part stacked ``factor`` times into the global
        shape, as MindSpore's ``ParallelSymbolInfo`` scales divisor and remainder by the dataset split)."""
        return Symbol(max=self.max * factor if self.upper is not None else 0, min=self.min * factor,
                      divisor=self.divisor * factor, remainder=self.remainder * factor, unique=self.unique)

    def to_dict(self) -> dict[str, int]:
        """MindSpore's summary: the entries that differ from a plain dynamic dimension."""
        res = {}
        if self.upper is not None:
            res["max"] = self.max
        if self.min > self.divisor + self.remainder:
            res["min"] = self.min
        if self.divisor != 1:
            res["divisor"] = self.divisor
        if self.remainder != 0:
            res["remainder"] = self.remainder
        if self.unique:
            res["id"] = self.id
        return res

    def __str__(self) -> str:
        return str(self.to_dict())

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v}" for k, v in self.to_dict().items() if k != "id")
        return f"Symbol({args}{', unique=True' if self.unique else ''})"
