"""MindSpore's distributed-training tutorials (ResNet-50 on CIFAR-10, data or auto parallel) ported to graphpar.

The training code is the tutorials': their ``create_dataset``, their ``SoftmaxCrossEntropyExpand`` (kept
verbatim in ``graphpar.models``),
``resnet50(batch_size, num_classes)``, ``Momentum(0.01, 0.9)``, 10 epochs in sink mode with ``LossMonitor``. The
changes: the imports (``graphpar`` for ``mindspore``), ``init()`` without a backend name, and command-line options
for what the tutorials hard-code (parallel mode, image size, architecture, epoch length) so it also runs on a CPU.

    python examples/make_cifar_like.py --out /tmp/cifar --train 2000 --test 200
    python examples/resnet50_cifar10.py --data-path /tmp/cifar/cifar-10-batches-bin --image-size 32 \\
        --arch resnet18 --steps-per-epoch 5 --epochs 2

8 simulated CPU devices unless XLA_FLAGS says otherwise; on GPUs: ``--device-target GPU --image-size 224`` (the
tutorials' setting), one process driving all local GPUs, or ``graphpar launch`` / ``mpirun`` for several hosts.
See docs/models.md.
"""

import argparse
import os

# 8 simulated CPU devices unless the caller chose otherwise (must be set before JAX starts).
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import graphpar as ms  # noqa: E402
import graphpar.dataset as ds  # noqa: E402
import graphpar.dataset.transforms as transforms  # noqa: E402
import graphpar.dataset.vision as vision  # noqa: E402
import graphpar.nn as nn  # noqa: E402
from graphpar import train  # noqa: E402
from graphpar.communication import get_group_size, get_rank, init  # noqa: E402
from graphpar.models import SoftmaxCrossEntropyExpand, resnet18, resnet50  # noqa: E402


def create_dataset(data_path, repeat_num=1, batch_size=32, image_size=224):
    """Create training dataset (the tutorials' function; the resize target is a parameter here)."""
    resize_height = image_size
    resize_width = image_size
    rescale = 1.0 / 255.0
    shift = 0.0

    # get rank_id and rank_size
    rank_size = get_group_size()
    rank_id = get_rank()
    data_set = ds.Cifar10Dataset(data_path, num_shards=rank_size, shard_id=rank_id)

    # define map operations
    random_crop_op = vision.RandomCrop((32, 32), (4, 4, 4, 4))
    random_horizontal_op = vision.RandomHorizontalFlip()
    resize_op = vision.Resize((resize_height, resize_width))
    rescale_op = vision.Rescale(rescale, shift)
    normalize_op = vision.Normalize((0.4465, 0.4822, 0.4914), (0.2010, 0.1994, 0.2023))
    changeswap_op = vision.HWC2CHW()
    type_cast_op = transforms.TypeCast(ms.int32)

    c_trans = [random_crop_op, random_horizontal_op]
    c_trans += [resize_op, rescale_op, normalize_op, changeswap_op]

    # apply map operations on images
    data_set = data_set.map(operations=type_cast_op, input_columns="label")
    data_set = data_set.map(operations=c_trans, input_columns="image")

    # apply shuffle operations
    data_set = data_set.shuffle(buffer_size=10)

    # apply batch operations
    data_set = data_set.batch(batch_size=batch_size, drop_remainder=True)

    # apply repeat operations
    data_set = data_set.repeat(repeat_num)

    return data_set


def train_resnet_with_cifar10(args):
    """Start the training (the tutorials' ``test_train_cifar`` / ``train_resnet50_with_cifar10``)."""
    loss_cb = train.LossMonitor()
    dataset = create_dataset(args.data_path, batch_size=args.batch_size, image_size=args.image_size)
    if args.steps_per_epoch:
        dataset = dataset.take(args.steps_per_epoch)
    batch_size = args.batch_size
    num_classes = 10
    if args.arch == "resnet50":
        net = resnet50(batch_size, num_classes, width=args.width)
    else:
        net = resnet18(num_classes, width=args.width)
    loss = SoftmaxCrossEntropyExpand(sparse=True)
    opt = nn.Momentum(filter(lambda x: x.requires_grad, net.get_parameters()), 0.01, 0.9)
    model = train.Model(net, loss_fn=loss, optimizer=opt)
    model.train(args.epochs, dataset, callbacks=[loss_cb], dataset_sink_mode=True)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="ResNet on CIFAR-10 (MindSpore's distributed-training tutorial)")
    parser.add_argument("--data-path", default=os.getenv("DATA_PATH"),
                        help="the cifar-10-batches-bin folder (default: $DATA_PATH, as the tutorials)")
    parser.add_argument("--parallel-mode", choices=("data", "auto"), default="data",
                        help="data: DATA_PARALLEL (tutorial 001); auto: AUTO_PARALLEL (tutorials 000/003)")
    parser.add_argument("--image-size", type=int, default=224, help="resize target (224 as the tutorials; 32 on CPU)")
    parser.add_argument("--arch", choices=("resnet50", "resnet18"), default="resnet50")
    parser.add_argument("--width", type=float, default=1.0, help="channel multiplier (1.0: the real network)")
    parser.add_argument("--batch-size", type=int, default=32, help="per-device batch size")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--steps-per-epoch", type=int, default=0, help="cut each epoch to this many steps (0: all)")
    parser.add_argument("--device-target", default="CPU", choices=("CPU", "GPU", "TPU"))
    args = parser.parse_args(argv)
    if not args.data_path:
        parser.error("give --data-path or set DATA_PATH to the cifar-10-batches-bin folder "
                     "(python examples/make_cifar_like.py writes a small one)")
    return args


def main(argv=None):
    args = parse_args(argv)
    mode = ms.ParallelMode.DATA_PARALLEL if args.parallel_mode == "data" else ms.ParallelMode.AUTO_PARALLEL
    ms.set_context(mode=ms.GRAPH_MODE, device_target=args.device_target)
    ms.set_auto_parallel_context(parallel_mode=mode, gradients_mean=True)
    init()
    train_resnet_with_cifar10(args)


if __name__ == "__main__":
    main()
