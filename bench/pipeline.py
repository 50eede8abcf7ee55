"""Images per second of the seeds' CIFAR pipeline on graphpar.dataset, against a plain numpy loop.

The pipeline is tutorials 000/001/003's ``create_dataset``: TypeCast on the label; RandomCrop(32, pad 4),
RandomHorizontalFlip, Resize, Rescale, Normalize, HWC2CHW on the image; shuffle; batch 32. The baseline does the
same arithmetic in one hand-written numpy loop with no pipeline around it (what a user would write without a data
library). Figures are steady state: the time to start worker processes is reported separately. Nothing here
asserts on speed.

    python -c "from bench.pipeline import bench_pipeline; print(bench_pipeline())"
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np

_MEAN = np.array((0.4465, 0.4822, 0.4914), np.float32)
_STD = np.array((0.2010, 0.1994, 0.2023), np.float32)


class SyntheticCifar:
    """A random-accessible source of ``n`` random 32x32 RGB images and labels (module level: it pickles)."""

    def __init__(self, n: int, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.images = rng.integers(0, 256, size=(n, 32, 32, 3), dtype=np.uint8)
        self.labels = rng.integers(0, 10, size=n).astype(np.uint32)

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        return self.images[i], self.labels[i]


def _pipeline(source: SyntheticCifar, size: int, workers: int, batch_size: int) -> Any:
    import graphpar.dataset as ds
    from graphpar import dtype as mstype
    from graphpar.dataset import transforms, vision

    data = ds.GeneratorDataset(source, ["image", "label"], num_parallel_workers=workers)
    data = data.map(transforms.TypeCast(mstype.int32), input_columns="label")
    data = data.map([vision.RandomCrop((32, 32), (4, 4, 4, 4)), vision.RandomHorizontalFlip(),
                     vision.Resize((size, size)), vision.Rescale(1.0 / 255.0, 0.0),
                     vision.Normalize(tuple(_MEAN), tuple(_STD)), vision.HWC2CHW()], input_columns="image")
    return data.shuffle(10).batch(batch_size, drop_remainder=True)


def _bilinear_taps(n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    src = (np.arange(n_out) + 0.5) * (n_in / n_out) - 0.5
    lo = np.floor(src)
    frac = (src - lo).astype(np.float32)
    lo = lo.astype(np.int64)
    return np.clip(lo, 0, n_in - 1), np.clip(lo + 1, 0, n_in - 1), frac


def _numpy_loop(source: SyntheticCifar, size: int, batch_size: int, seed: int = 0, limit: int | None = None) -> int:
    """The same transforms written as one plain loop; returns the number of images produced."""
    rng = np.random.default_rng(seed)
    lo, hi, frac = _bilinear_taps(32, size)
    order = rng.permutation(len(source))[:limit]
    done = 0
    for start in range(0, len(order) - batch_size + 1, batch_size):
        out = np.empty((batch_size, 3, size, size), np.float32)
        labels = np.empty(batch_size, np.int32)
        for k, i in enumerate(order[start:start + batch_size]):
            image, label = source[int(i)]
            padded = np.pad(image, ((4, 4), (4, 4), (0, 0)))
            top, left = rng.integers(0, 9, size=2)
            img = padded[top:top + 32, left:left + 32].astype(np.float32)
            if rng.random() < 0.5:
                img = img[:, ::-1]
            if size != 32:
                img = img[lo] * (1 - frac)[:, None, None] + img[hi] * frac[:, None, None]
                img = img[:, lo] * (1 - frac)[None, :, None] + img[:, hi] * frac[None, :, None]
            out[k] = ((img * np.float32(1 / 255) - _MEAN) / _STD).transpose(2, 0, 1)
            labels[k] = label
        done += batch_size
    return done


def _timed_epoch(data: Any, workers: int) -> tuple[float, float]:
    """(seconds until every worker delivered a batch, steady images/s over the rest of epoch 0)."""
    start = time.perf_counter()
    it = data.iter_epoch(0)
    for _ in range(workers):  # batches come round-robin from the workers: one each means all have started
        next(it)
    ready = time.perf_counter()
    images = 0
    for batch in it:
        images += len(batch[0])
    elapsed = time.perf_counter() - ready
    it.close()
    return ready - start, images / elapsed if elapsed > 0 else float("inf")


def _epochs(data: Any) -> Any:
    """Batches of epoch 0, 1, ... without end (consecutive epochs reuse the same running stream)."""
    epoch = 0
    while True:
        current = data.iter_epoch(epoch)
        try:
            yield from current
        finally:
            current.close()
        epoch += 1


def _pipeline_rate(it: Any, images: int) -> float:
    """Images/s of ``images`` more images from a running iterator (its workers already started)."""
    start, done = time.perf_counter(), 0
    while done < images:
        done += len(next(it)[0])
    return done / (time.perf_counter() - start)


def _numpy_rate(source: SyntheticCifar, size: int, batch_size: int, images: int, seed: int) -> float:
    start = time.perf_counter()
    done = _numpy_loop(source, size, batch_size, seed=seed, limit=images)
    return done / (time.perf_counter() - start)


def bench_pipeline(n_images: int = 8192, sizes: tuple[int, ...] = (32, 224), workers: tuple[int, ...] = (1, 2),
                   batch_size: int = 32, rounds: int = 5) -> dict[str, Any]:
    """Images/s of the pipeline per (size, workers) and of the numpy loop per size, with ratios.

    Each round times the numpy loop and the running pipeline back to back on the same number of images (1/16 of
    ``n_images`` at 224x224), alternating which goes first (rounds of 2,048 32x32 images, ~0.15 s, put a third of
    the 1-worker ratios below 1.0 and others at 1.3 on a quiet machine; 8,192 keep them within ~0.1); the ratio is the median of the per-round ratios, so a
    busy machine slows both sides alike. Start-up (until every worker delivered a batch) is reported apart.
    Returns ``{"size_32": {"numpy_loop_img_s": ..., "pipeline_w1_img_s": ..., "pipeline_w1_vs_numpy": ...,
    "pipeline_w1_startup_s": ...}, ...}``.
    """
    source = SyntheticCifar(n_images)
    results: dict[str, Any] = {"n_images": n_images, "batch_size": batch_size, "rounds": rounds}
    for size in sizes:
        per_round = n_images if size <= 64 else n_images // 16
        row: dict[str, float] = {}
        numpy_rates: list[float] = []
        for w in workers:
            data = _pipeline(source, size, w, batch_size)
            started = time.perf_counter()
            it = _epochs(data)
            for _ in range(w):  # batches come round-robin from the workers: one each means all have started
                next(it)
            row[f"pipeline_w{w}_startup_s"] = round(time.perf_counter() - started, 2)
            rates, ratios = [], []
            for r in range(rounds):
                if r % 2:
                    p = _pipeline_rate(it, per_round)
                    n = _numpy_rate(source, size, batch_size, per_round, seed=r)
                else:
                    n = _numpy_rate(source, size, batch_size, per_round, seed=r)
                    p = _pipeline_rate(it, per_round)
                rates.append(p), numpy_rates.append(n), ratios.append(p / n)
            it.close()
            row[f"pipeline_w{w}_img_s"] = round(statistics.median(rates), 1)
            row[f"pipeline_w{w}_vs_numpy"] = round(statistics.median(ratios), 2)
        row["numpy_loop_img_s"] = round(statistics.median(numpy_rates), 1)
        results[f"size_{size}"] = row
    return results


if __name__ == "__main__":
    import json

    print(json.dumps(bench_pipeline(), indent=2))
