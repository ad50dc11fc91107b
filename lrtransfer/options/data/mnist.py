"""data=mnist: 60,000 training and 10,000 test greyscale digits (1 x 28 x 28), 10 classes.

torchvision's layout: `<data.root>/MNIST/raw/` holding the four IDX files
`train-images-idx3-ubyte`, `train-labels-idx1-ubyte`, `t10k-images-idx3-ubyte`,
`t10k-labels-idx1-ubyte`, each gzipped (`.gz`) or not.
"""

from lrtransfer.options.data.formats import read_idx_pair
from lrtransfer.options.data.images import ImageDataOptions, ImageSet


def idx_set(title: str, torchvision: str, source: str = "") -> ImageSet:
    """An MNIST-like dataset: four IDX files of 1 x 28 x 28 images in `<torchvision class>/raw/`, 10 classes."""
    return ImageSet(
        title, f"{torchvision}/raw",
        ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"), ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
        read_idx_pair, (1, 28, 28), 10, torchvision=torchvision,
        how=f"put {title}'s four IDX files ({source}gzipped or not) in {{folder}}/",
    )  # fmt: skip


MNIST = idx_set("MNIST", "MNIST")
ensure_files, build = MNIST.ensure_files, MNIST.build
OPTIONS = ImageDataOptions
