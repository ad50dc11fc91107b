"""data=fashion_mnist: 60,000 training and 10,000 test greyscale clothing images (1 x 28 x 28), 10 classes.

torchvision's layout: `<data.root>/FashionMNIST/raw/`, with the same four IDX file
names as MNIST (gzipped or not).
"""

from lrtransfer.options.data.mnist import idx_set
from lrtransfer.options.data.images import ImageDataOptions

FASHION_MNIST = idx_set("Fashion-MNIST", "FashionMNIST", "github.com/zalandoresearch/fashion-mnist; ")
ensure_files, build = FASHION_MNIST.ensure_files, FASHION_MNIST.build
OPTIONS = ImageDataOptions
