"""Adam along the run axis in one pass over memory: `along.c`, compiled on first use.

Where each run of an ensemble has its own beta1, beta2 or epsilon, PyTorch's fused Adam
kernel (one setting a call) does not apply, and its operations take eight passes over
memory where the kernel takes one: on a CPU that made a random search's optimizer step 2 to 4
times the fused one's (docs/tuning.md, "Speed"). `along.c` is that step as one loop, each run at
its own values. It is compiled with the system's C compiler into the user's cache folder
($XDG_CACHE_HOME/lrtransfer or ~/.cache/lrtransfer, `native/`), once per source, compiler and
machine, and loaded with ctypes; without a compiler, on another platform, on a GPU, or with
LRTRANSFER_NATIVE=0, PyTorch's operations do the same arithmetic (`kernels`). Numbers agree
with them to the last bit or two (a test says how far).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch
from torch import Tensor

from lrtransfer.errors import ConfigError
from lrtransfer.options.data.cache import cache_folder

SOURCE = Path(__file__).with_name("along.c")
# -ffp-contract=off: each multiply and add rounds on its own, as PyTorch's operations do;
# -fno-math-errno lets sqrt vectorise (it never sets errno for the non-negative v here)
FLAGS = ["-O3", "-ffp-contract=off", "-fno-math-errno", "-fPIC", "-shared"]
NATIVE_CPU = ["-march=native"]  # the machine's vector units; dropped where the compiler refuses it

_library: ctypes.CDLL | None = None
_tried = False


def enabled() -> bool:
    """LRTRANSFER_NATIVE: 1 (or unset) to use the compiled pass where it can be had, 0 never."""
    value = os.environ.get("LRTRANSFER_NATIVE", "1").strip()
    if value not in ("0", "1"):
        raise ConfigError(f"LRTRANSFER_NATIVE={value!r} is not one of 0 (PyTorch's operations only) or 1 "
                          "(the compiled pass where it can be had, the default)")
    return value == "1"


def library() -> ctypes.CDLL | None:
    """The compiled kernels, or None where they cannot be had (no compiler, a failed build)."""
    global _library, _tried
    if not _tried:
        _tried = True
        try:
            _library = _load(_build())
        except (OSError, subprocess.SubprocessError, ValueError):
            _library = None
    return _library


def _build() -> Path:
    cc = shutil.which(os.environ.get("CC", "cc"))
    if cc is None:
        raise OSError("no C compiler")
    source = SOURCE.read_bytes()
    key = hashlib.sha256(source + cc.encode() + " ".join(FLAGS + NATIVE_CPU).encode()
                         + platform.machine().encode() + platform.node().encode()).hexdigest()[:16]
    folder = cache_folder(None) / "native"  # the user's cache folder, as a task's
    target = folder / f"along-{key}.so"
    if target.exists():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    # built under a temporary name and renamed: two jobs building at once each load a whole file
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=folder)
    os.close(fd)
    try:
        for extra in (NATIVE_CPU, []):
            done = subprocess.run([cc, *FLAGS, *extra, str(SOURCE), "-o", tmp, "-lm"], capture_output=True, timeout=120,
                                  check=False)
            if done.returncode == 0:
                os.replace(tmp, target)
                return target
        raise OSError(f"{cc} could not compile {SOURCE.name}: {done.stderr.decode(errors='replace')[:200]}")
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _load(path: Path) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(path))
    for name in ("adam_along_f32", "adam_along_f64"):
        fn = getattr(lib, name)
        fn.restype = None
        fn.argtypes = [ctypes.c_int64, ctypes.c_int64] + [ctypes.c_void_p] * 10
    return lib


_KERNELS = {torch.float32: "adam_along_f32", torch.float64: "adam_along_f64"}


def usable(*tensors: Tensor) -> bool:
    """Whether the compiled pass can take these (K, ...) tensors: contiguous, on the CPU, all
    float32 or all float64, and the kernels built."""
    dtype = tensors[0].dtype
    return (enabled() and dtype in _KERNELS
            and all(t.device.type == "cpu" and t.dtype == dtype and t.is_contiguous() for t in tensors)
            and library() is not None)


def adam_along_(w: Tensor | None, g: Tensor, m: Tensor, v: Tensor, out: Tensor | None,
                w1: Tensor, w2: Tensor, scale: Tensor, shift: Tensor, keep: Tensor | None) -> None:
    """One pass of `along.c` over (K, ...) tensors (`usable`); the coefficients each (K,), contiguous,
    in the tensors' dtype. out given: Adam's direction is written there and w is not read;
    else w is updated in place."""
    fn = getattr(library(), _KERNELS[g.dtype])
    ptr = lambda t: None if t is None else t.data_ptr()
    fn(g.shape[0], g[0].numel(), ptr(w), ptr(g), ptr(m), ptr(v), ptr(out),
       ptr(w1), ptr(w2), ptr(scale), ptr(shift), ptr(keep))
