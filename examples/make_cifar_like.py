"""Write a small, learnable dataset in the real CIFAR-10 binary format, so ResNet training can be tried offline.

    python examples/make_cifar_like.py --out data --train 5000 --test 1000
    # then: graphpar.dataset.Cifar10Dataset("data/cifar-10-batches-bin", usage="train")

Each class has its own foreground colour and shape (square, disc, bars, stripes, ring, cross...) drawn at a random
position and size over a noisy background, so a small network learns it in a few epochs but not in one step.
Files: ``cifar-10-batches-bin/data_batch_1..5.bin``, ``test_batch.bin`` (3073-byte records: label byte, then
1024 R, 1024 G, 1024 B bytes) and ``batches.meta.txt`` with the class names.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

CLASSES = ["red_square", "green_disc", "blue_hbar", "yellow_vbar", "magenta_diag", "cyan_ring", "orange_cross",
           "white_checker", "purple_triangle", "lime_frame"]
_COLOURS = np.array([[220, 40, 40], [40, 200, 60], [50, 80, 230], [230, 220, 40], [210, 50, 200], [40, 210, 220],
                     [245, 140, 30], [235, 235, 235], [130, 50, 180], [150, 240, 60]], dtype=np.float32)


def _mask(label: int, rng: np.random.Generator) -> np.ndarray:
    """Where class ``label``'s shape covers a 32x32 image (random centre and size)."""
    y, x = np.mgrid[0:32, 0:32].astype(np.float32)
    cy, cx = rng.uniform(11, 21, size=2)
    r = rng.uniform(6, 10)
    dy, dx = y - cy, x - cx
    shapes = [
        (np.abs(dy) < r) & (np.abs(dx) < r),
        dy ** 2 + dx ** 2 < r ** 2,
        np.abs(dy) < r / 3,
        np.abs(dx) < r / 3,
        ((x + y).astype(int) // 4) % 2 == 0,
        np.abs(np.sqrt(dy ** 2 + dx ** 2) - r) < 2,
        (np.abs(dy) < 2) | (np.abs(dx) < 2),
        ((x.astype(int) // 4 + y.astype(int) // 4) % 2) == 0,
        (dy > -r) & (np.abs(dx) < (dy + r) / 2),
        ((np.abs(dy) < r) & (np.abs(dx) < r)) & ~((np.abs(dy) < r - 3) & (np.abs(dx) < r - 3)),
    ]
    return shapes[label]


def make_images(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` images (N, 32, 32, 3) uint8 and labels (N,) uint8, classes balanced."""
    rng = np.random.default_rng(seed)
    labels = np.arange(n) % len(CLASSES)
    rng.shuffle(labels)
    images = np.empty((n, 32, 32, 3), np.uint8)
    for i, label in enumerate(labels):
        background = rng.uniform(20, 110, size=3) + rng.normal(0, 18, size=(32, 32, 3))
        colour = _COLOURS[label] * rng.uniform(0.75, 1.0) + rng.normal(0, 12, size=(32, 32, 3))
        img = np.where(_mask(int(label), rng)[:, :, None], colour, background)
        images[i] = np.clip(img, 0, 255).astype(np.uint8)
    return images, labels.astype(np.uint8)


def records(images: np.ndarray, labels: np.ndarray) -> bytes:
    """CIFAR-10 binary records: label byte, then the R, G and B planes (row-major)."""
    planes = images.transpose(0, 3, 1, 2).reshape(len(images), 3072)
    return np.concatenate([labels[:, None], planes], axis=1).astype(np.uint8).tobytes()


def write(out: Path, train: int, test: int, seed: int = 0) -> Path:
    folder = out / "cifar-10-batches-bin"
    folder.mkdir(parents=True, exist_ok=True)
    images, labels = make_images(train, seed)
    for k, part in enumerate(np.array_split(np.arange(train), 5), start=1):
        (folder / f"data_batch_{k}.bin").write_bytes(records(images[part], labels[part]))
    images, labels = make_images(test, seed + 1)
    (folder / "test_batch.bin").write_bytes(records(images, labels))
    (folder / "batches.meta.txt").write_text("\n".join(CLASSES) + "\n")
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("cifar-like"), help="folder to write into")
    parser.add_argument("--train", type=int, default=5000, help="training images (split over 5 batch files)")
    parser.add_argument("--test", type=int, default=1000, help="test images")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    folder = write(args.out, args.train, args.test, args.seed)
    print(f"wrote {args.train} training and {args.test} test images in CIFAR-10 binary format to {folder}")


if __name__ == "__main__":
    main()
