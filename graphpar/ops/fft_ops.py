"""MindSpore's FFT family (``mindspore.ops.auto_generate``: ``FFT`` ... ``IHFFTN``, ``FFTShift``/``IFFTShift``,
``DCT``/``IDCT``/``DCTN``/``IDCTN``) as primitives, with MindSpore's call arguments and defaults:

* ``FFT()(input, n=None, dim=-1, norm=None)`` and likewise ``IFFT``, ``RFFT``, ``IRFFT``, ``HFFT``, ``IHFFT``;
* ``FFT2()(input, s=None, dim=(-2, -1), norm=None)``, the ``*2`` ops;
* ``FFTN()(input, s=None, dim=None, norm=None)``, the ``*N`` ops (dim None: every dim, or the last ``len(s)``);
* ``FFTShift()(input, dim=None)``, ``IFFTShift`` (dim None: every dim);
* ``DCT()(x, type=2, n=None, axis=-1, norm=None)``, ``IDCT``; ``DCTN()(x, type=2, s=None, axes=None, norm=None)``.

``norm`` is ``"backward"`` (None), ``"forward"`` or ``"ortho"``, in any case. Outputs as MindSpore documents them:
the complex transforms of a real or integer input return complex64 (complex128 from float64), ``IRFFT*``/``HFFT*``
return the real dtype, ``RFFT*``/``IHFFT*`` the complex one, DCTs the input's float type (complex stays complex: a
DCT is real-linear). Only DCT type 2 exists in MindSpore; other types are refused. Gradients are JAX's.

Sharding follows MindSpore's FFTBase: one strategy entry; the transformed dims cannot be split, the others can
(``graphpar.planner.rules.fft_rules``, whose :func:`transformed_axes` both the rule and these ops read).
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import jax.scipy.fft as jsfft

from graphpar.ops.primitive import Primitive
from graphpar.planner.rules.fft_rules import transformed_axes

_NORMS = ("backward", "forward", "ortho")
_SWAP = {"backward": "forward", "forward": "backward", "ortho": "ortho"}


def _norm(kind: str, norm: Any) -> str:
    if norm is None:
        return "backward"
    if not isinstance(norm, str) or norm.lower() not in _NORMS:
        raise ValueError(f"{kind}: norm must be None or one of 'backward', 'forward', 'ortho' (any case), "
                         f"got {norm!r}")
    return norm.lower()


def _sizes(kind: str, sizes: Any, axes: tuple[int, ...]) -> tuple[int, ...] | None:
    if sizes is None:
        return None
    sizes = (sizes,) if isinstance(sizes, int) else tuple(sizes)
    if len(sizes) != len(axes):
        raise ValueError(f"{kind}: the sizes {sizes} and the dims {axes} must have the same length")
    if any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in sizes):
        raise ValueError(f"{kind}: every transform size must be an int >= 1, got {sizes}")
    return sizes


def _complex(x):
    """A complex input as is; a real or integer one as complex64 (complex128 from float64), as MindSpore does."""
    if jnp.iscomplexobj(x):
        return x
    return x.astype(jnp.complex128 if x.dtype == jnp.float64 else jnp.complex64)


def _real(x):
    """A real floating input as is; an integer or bool one as float32."""
    if jnp.iscomplexobj(x):
        raise TypeError(f"this transform takes a real input, got {x.dtype}")
    return x if jnp.issubdtype(x.dtype, jnp.floating) else x.astype(jnp.float32)


class _FFTBase(Primitive):
    """One primitive of the family: its ``_fn(x, sizes, axes, norm)`` on the resolved arguments."""

    input_names = ("input",)

    def compute(self, x, sizes=None, dim=None, norm=None):
        x = jnp.asarray(x)
        axes = transformed_axes(self.name, x.ndim, {1: sizes, 2: dim})
        return type(self)._fn(x, _sizes(self.name, sizes, axes), axes, _norm(self.name, norm))

    @staticmethod
    def _fn(x, sizes, axes, norm):
        raise NotImplementedError


def _forward(x, sizes, axes, norm):
    return jnp.fft.fftn(_complex(x), s=sizes, axes=axes, norm=norm)


def _inverse(x, sizes, axes, norm):
    return jnp.fft.ifftn(_complex(x), s=sizes, axes=axes, norm=norm)


def _r2c(x, sizes, axes, norm):
    return jnp.fft.rfftn(_real(x), s=sizes, axes=axes, norm=norm)


def _c2r(x, sizes, axes, norm):
    return jnp.fft.irfftn(_complex(x), s=sizes, axes=axes, norm=norm)


def _hermitian(x, sizes, axes, norm):
    """hfftn: the inverse of ihfftn, ``irfftn(conj(x))`` with the norm's direction swapped."""
    return jnp.fft.irfftn(jnp.conj(_complex(x)), s=sizes, axes=axes, norm=_SWAP[norm])


def _ihermitian(x, sizes, axes, norm):
    """ihfftn: ``conj(rfftn(x))`` with the norm's direction swapped (a real input's half inverse spectrum)."""
    return jnp.conj(jnp.fft.rfftn(_real(x), s=sizes, axes=axes, norm=_SWAP[norm]))


def _family(name: str, fn, doc: str) -> type:
    return type(name, (_FFTBase,), {"_fn": staticmethod(fn), "__doc__": doc, "__module__": __name__,
                                    "__qualname__": name})


_DOC1 = "``{0}()(input, n=None, dim=-1, norm=None)``: the {1} of ``input`` along one dim."
_DOC2 = "``{0}()(input, s=None, dim=(-2, -1), norm=None)``: the 2-D {1} of ``input``."
_DOCN = "``{0}()(input, s=None, dim=None, norm=None)``: the N-D {1} of ``input`` (dim None: every dim)."
_WHAT = {"FFT": ("discrete Fourier transform", _forward),
         "IFFT": ("inverse discrete Fourier transform", _inverse),
         "RFFT": ("Fourier transform of a real input (the non-negative frequencies)", _r2c),
         "IRFFT": ("inverse of RFFT (a real output)", _c2r),
         "HFFT": ("Fourier transform of a Hermitian-symmetric input (a real output)", _hermitian),
         "IHFFT": ("inverse of HFFT (a real input's one-sided inverse spectrum)", _ihermitian)}

FFT = _family("FFT", _WHAT["FFT"][1], _DOC1.format("FFT", _WHAT["FFT"][0]))
IFFT = _family("IFFT", _WHAT["IFFT"][1], _DOC1.format("IFFT", _WHAT["IFFT"][0]))
RFFT = _family("RFFT", _r2c, _DOC1.format("RFFT", _WHAT["RFFT"][0]))
IRFFT = _family("IRFFT", _c2r, _DOC1.format("IRFFT", _WHAT["IRFFT"][0]))
HFFT = _family("HFFT", _hermitian, _DOC1.format("HFFT", _WHAT["HFFT"][0]))
IHFFT = _family("IHFFT", _ihermitian, _DOC1.format("IHFFT", _WHAT["IHFFT"][0]))
FFT2 = _family("FFT2", _WHAT["FFT"][1], _DOC2.format("FFT2", _WHAT["FFT"][0]))
IFFT2 = _family("IFFT2", _WHAT["IFFT"][1], _DOC2.format("IFFT2", _WHAT["IFFT"][0]))
RFFT2 = _family("RFFT2", _r2c, _DOC2.format("RFFT2", _WHAT["RFFT"][0]))
IRFFT2 = _family("IRFFT2", _c2r, _DOC2.format("IRFFT2", _WHAT["IRFFT"][0]))
HFFT2 = _family("HFFT2", _hermitian, _DOC2.format("HFFT2", _WHAT["HFFT"][0]))
IHFFT2 = _family("IHFFT2", _ihermitian, _DOC2.format("IHFFT2", _WHAT["IHFFT"][0]))
FFTN = _family("FFTN", _WHAT["FFT"][1], _DOCN.format("FFTN", _WHAT["FFT"][0]))
IFFTN = _family("IFFTN", _WHAT["IFFT"][1], _DOCN.format("IFFTN", _WHAT["IFFT"][0]))
RFFTN = _family("RFFTN", _r2c, _DOCN.format("RFFTN", _WHAT["RFFT"][0]))
IRFFTN = _family("IRFFTN", _c2r, _DOCN.format("IRFFTN", _WHAT["IRFFT"][0]))
HFFTN = _family("HFFTN", _hermitian, _DOCN.format("HFFTN", _WHAT["HFFT"][0]))
IHFFTN = _family("IHFFTN", _ihermitian, _DOCN.format("IHFFTN", _WHAT["IHFFT"][0]))


class FFTShift(Primitive):
    """``FFTShift()(input, dim=None)``: rolls the zero frequency to the centre of each ``dim`` (None: every dim)."""

    input_names = ("input",)

    def compute(self, x, dim=None):
        x = jnp.asarray(x)
        return jnp.fft.fftshift(x, axes=transformed_axes(self.name, x.ndim, {1: dim}))


class IFFTShift(Primitive):
    """``IFFTShift()(input, dim=None)``: the inverse of FFTShift (they differ on odd sizes)."""

    input_names = ("input",)

    def compute(self, x, dim=None):
        x = jnp.asarray(x)
        return jnp.fft.ifftshift(x, axes=transformed_axes(self.name, x.ndim, {1: dim}))


def _dct_type(kind: str, type_: Any) -> None:
    if type_ != 2 or isinstance(type_, bool):
        raise ValueError(f"{kind}: only type 2 is supported (as in MindSpore), got type={type_!r}")


class _DCTBase(Primitive):
    """DCT-II (``inverse=False``) or its inverse on the resolved dims, real-linear on a complex input."""

    input_names = ("x",)
    _inverse = False

    def compute(self, x, type=2, sizes=None, axes=None, norm=None):  # noqa: A002 (MindSpore's argument name)
        _dct_type(self.name, type)
        x = jnp.asarray(x)
        dims = transformed_axes(self.name, x.ndim, {2: sizes, 3: axes})
        sizes = _sizes(self.name, sizes, dims)
        norm = _norm(self.name, norm)
        if jnp.iscomplexobj(x):
            return _to_complex(self._real_dct(x.real, sizes, dims, norm), self._real_dct(x.imag, sizes, dims, norm))
        return self._real_dct(_real(x), sizes, dims, norm)

    def _real_dct(self, x, sizes, dims, norm):
        fn = jsfft.idctn if self._inverse else jsfft.dctn
        out = fn(x, type=2, s=sizes, axes=dims, norm="ortho" if norm == "ortho" else None)
        if norm == "forward":  # scipy's forward norm moves the 1 / (2 n) of each dim from the inverse to the DCT
            scale = 1.0
            for d in dims:
                scale *= 2 * out.shape[d]
            out = out * scale if self._inverse else out / scale
        return out


def _to_complex(re, im):
    """``re + i im`` in the complex type of ``re``'s precision."""
    return jnp.asarray(re + 1j * im).astype(jnp.complex128 if re.dtype == jnp.float64 else jnp.complex64)


class DCT(_DCTBase):
    """``DCT()(x, type=2, n=None, axis=-1, norm=None)``: the type-2 discrete cosine transform along ``axis``."""


class IDCT(_DCTBase):
    """``IDCT()(x, type=2, n=None, axis=-1, norm=None)``: the inverse of DCT (a type-3 DCT, scaled)."""

    _inverse = True


class DCTN(_DCTBase):
    """``DCTN()(x, type=2, s=None, axes=None, norm=None)``: the N-D type-2 DCT (axes None: every dim)."""


class IDCTN(_DCTBase):
    """``IDCTN()(x, type=2, s=None, axes=None, norm=None)``: the inverse of DCTN."""

    _inverse = True
