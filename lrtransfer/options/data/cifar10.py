"""data=cifar10: 50,000 training and 10,000 test colour images (3 x 32 x 32), 10 classes.

torchvision's layout: `<data.root>/cifar-10-batches-py/` holding `data_batch_1` ..
`data_batch_5` and `test_batch` (the extracted `cifar-10-python.tar.gz`).
"""

from functools import partial

from lrtransfer.options.data.formats import read_cifar
from lrtransfer.options.data.images import ImageDataOptions, ImageSet


def cifar_set(title, torchvision, archive, folder, train, test, label_key, classes) -> ImageSet:
    """A CIFAR dataset: pickled batches of 3 x 32 x 32 images, in `folder` once `archive` is extracted."""
    return ImageSet(
        title, folder, train, (test,), partial(read_cifar, label_key=label_key), (3, 32, 32), classes,
        torchvision=torchvision, how=f"extract {archive} (www.cs.toronto.edu/~kriz/cifar.html) in {{root}}",
    )  # fmt: skip


CIFAR10 = cifar_set(
    "CIFAR-10", "CIFAR10", "cifar-10-python.tar.gz", "cifar-10-batches-py",
    tuple(f"data_batch_{i}" for i in range(1, 6)), "test_batch", label_key="labels", classes=10,
)  # fmt: skip
ensure_files, build = CIFAR10.ensure_files, CIFAR10.build
OPTIONS = ImageDataOptions
