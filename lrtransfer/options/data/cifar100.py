"""data=cifar100: 50,000 training and 10,000 test colour images (3 x 32 x 32), 100 (fine) classes.

torchvision's layout: `<data.root>/cifar-100-python/` holding `train` and `test`
(the extracted `cifar-100-python.tar.gz`).
"""

from lrtransfer.options.data.cifar10 import cifar_set
from lrtransfer.options.data.images import ImageDataOptions

CIFAR100 = cifar_set(
    "CIFAR-100", "CIFAR100", "cifar-100-python.tar.gz", "cifar-100-python",
    ("train",), "test", label_key="fine_labels", classes=100,
)  # fmt: skip
ensure_files, build = CIFAR100.ensure_files, CIFAR100.build
OPTIONS = ImageDataOptions
