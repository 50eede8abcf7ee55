"""MindSpore's FFT family (``ops.auto_generate.FFT`` ... ``IDCTN``): each against numpy/scipy, and MindSpore's
FFTBase sharding rule: the transformed dims cannot be split, every other dim can."""

import numpy as np
import pytest
import scipy.fft

import graphpar as ms
from graphpar import Tensor
from graphpar.errors import StrategyError
from graphpar.ops import auto_generate as P
from tests.planner.helpers import sharded

RNG = np.random.default_rng(0)
X = (RNG.standard_normal((4, 6, 8)) + 1j * RNG.standard_normal((4, 6, 8))).astype(np.complex64)
R = RNG.standard_normal((4, 6, 8)).astype(np.float32)


def _close(got, want, dtype=None):
    got = np.asarray(got)
    if dtype is not None:
        assert got.dtype == dtype, (got.dtype, dtype)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("op, args, want", [
    (P.FFT, (None, -1, None), lambda x: np.fft.fft(x)),
    (P.IFFT, (5, 0, "ortho"), lambda x: np.fft.ifft(x, 5, 0, "ortho")),
    (P.FFT2, ((4, 4), (0, 2), "forward"), lambda x: np.fft.fft2(x, (4, 4), (0, 2), "forward")),
    (P.IFFT2, (None, (-2, -1), None), lambda x: np.fft.ifft2(x)),
    (P.FFTN, (None, None, "BACKWARD"), lambda x: np.fft.fftn(x)),
    (P.IFFTN, ((3, 4), None, None), lambda x: np.fft.ifftn(x, (3, 4), (1, 2))),
])
def test_complex_transforms_match_numpy(op, args, want):
    _close(op()(Tensor(X), *args), want(X), np.complex64)


@pytest.mark.parametrize("op, args, want", [
    (P.RFFT, (None, -1, None), lambda x: np.fft.rfft(x)),
    (P.RFFT2, ((6, 6), (-2, -1), "ortho"), lambda x: np.fft.rfft2(x, (6, 6), norm="ortho")),
    (P.RFFTN, (None, None, None), lambda x: np.fft.rfftn(x)),
    (P.IHFFT, (None, 1, None), lambda x: np.fft.ihfft(x, axis=1)),
    (P.IHFFT2, (None, (-2, -1), None), lambda x: scipy.fft.ihfft2(x)),
    (P.IHFFTN, (None, (0, 2), "forward"), lambda x: scipy.fft.ihfftn(x, axes=(0, 2), norm="forward")),
])
def test_real_to_complex_transforms_match_numpy(op, args, want):
    _close(op()(Tensor(R), *args), want(R), np.complex64)


@pytest.mark.parametrize("op, args, want", [
    (P.IRFFT, (8, -1, None), lambda x: np.fft.irfft(x, 8)),
    (P.IRFFT2, (None, (-2, -1), "ortho"), lambda x: np.fft.irfft2(x, norm="ortho")),
    (P.IRFFTN, ((4, 6, 8), None, None), lambda x: np.fft.irfftn(x, (4, 6, 8), (0, 1, 2))),
    (P.HFFT, (None, 0, None), lambda x: np.fft.hfft(x, axis=0)),
    (P.HFFT2, ((6, 8), (-2, -1), "forward"), lambda x: scipy.fft.hfft2(x, (6, 8), norm="forward")),
    (P.HFFTN, (None, None, "ortho"), lambda x: scipy.fft.hfftn(x, norm="ortho")),
])
def test_complex_to_real_transforms_match_numpy(op, args, want):
    _close(op()(Tensor(X), *args), want(X), np.float32)


def test_shifts_and_real_inputs_become_complex64():
    _close(P.FFTShift()(Tensor(R)), np.fft.fftshift(R))
    _close(P.IFFTShift()(Tensor(R), (0, 1)), np.fft.ifftshift(R, (0, 1)))
    _close(P.FFT()(Tensor(np.arange(8, dtype=np.int32))), np.fft.fft(np.arange(8)), np.complex64)


@pytest.mark.parametrize("norm", [None, "ortho", "forward"])
def test_dct_family_matches_scipy(norm):
    _close(P.DCT()(Tensor(R), 2, None, -1, norm), scipy.fft.dct(R, 2, None, -1, norm), np.float32)
    _close(P.IDCT()(Tensor(R), 2, 6, 1, norm), scipy.fft.idct(R, 2, 6, 1, norm))
    _close(P.DCTN()(Tensor(R), 2, None, (0, 2), norm), scipy.fft.dctn(R, 2, None, (0, 2), norm))
    _close(P.IDCTN()(Tensor(R), 2, None, None, norm), scipy.fft.idctn(R, 2, None, None, norm))
    # a DCT is real-linear: a complex input transforms its real and imaginary parts
    want = scipy.fft.dct(X.real, norm=norm) + 1j * scipy.fft.dct(X.imag, norm=norm)
    _close(P.DCT()(Tensor(X), 2, None, -1, norm), want, np.complex64)


def test_bad_arguments_are_refused_by_name():
    with pytest.raises(ValueError, match="DCT: only type 2"):
        P.DCT()(Tensor(R), 3)
    with pytest.raises(ValueError, match="FFT: norm must be"):
        P.FFT()(Tensor(X), None, -1, "sideways")
    with pytest.raises(ValueError, match=r"FFT2: dim 3 is out of range \[-3, 2\]"):
        P.FFT2()(Tensor(X), None, (0, 3))
    with pytest.raises(ValueError, match="FFTN: the sizes .* must have the same length"):
        P.FFTN()(Tensor(X), (4, 4), (0,))


def test_batch_dims_split_on_8_devices_and_the_result_is_unchanged():
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8)
    x = np.tile(X, (2, 1, 1))  # (8, 6, 8): dim 0 split 4 ways, dim 1 2 ways, the transformed dim 2 whole
    net = sharded(P.FFT(), ((4, 2, 1),), None, -1, "ortho")
    table = ms.parallel.strategies(net, Tensor(x))
    assert [v for k, v in table.items() if "FFT-op" in k] == [[[4, 2, 1]]]
    _close(net(Tensor(x)), np.fft.fft(x, norm="ortho"))


def test_splitting_a_transformed_dim_is_refused():
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8)
    net = sharded(P.RFFT2(), ((2, 2, 1),), None, (-2, -1), None)
    with pytest.raises(StrategyError, match=r"RFFT2 cannot split input dim 1"):
        ms.parallel.strategies(net, Tensor(np.tile(R, (2, 1, 1))))
