"""The typed schema behind `conf/`, and the checks Hydra's types cannot express.

Every YAML file in `conf/` is backed by a dataclass below, registered in Hydra's
ConfigStore under `schema/...`. Hydra then rejects an unknown key or a value of the
wrong type while composing, before any job starts; `validate` adds the value checks
(positive sizes, a non-empty LR grid, a usable device) and returns typed objects.

This module imports no torch, so the CLI and the sweeper can validate every job of a
sweep before launching any of them.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any, ClassVar, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf, open_dict

from lrtransfer.errors import UserError


class ConfigError(UserError, ValueError):
    """A configuration value is invalid; the message is one line meant for the user."""


# ---------------------------------------------------------------- choices
class Activation(str, Enum):
    relu = "relu"
    gelu = "gelu"
    tanh = "tanh"


class ResidualRule(str, Enum):
    """z -> skip * z + branch * block(z) over L blocks: the parameterization's own rule
    (`auto`: SP, equalized and muP use `one` unless param.depth_exponent says
    otherwise, modular `convex`), or one named rule for every parameterization."""

    auto = "auto"
    one = "one"  # skip 1, branch 1 (seed 002's ResNet-S)
    sqrt_depth = "sqrt_depth"  # skip 1, branch 1/sqrt(L) (depth-muP)
    convex = "convex"  # skip 1 - 1/L, branch 1/L (Modula)


class Schedule(str, Enum):
    constant = "constant"
    linear = "linear"
    cosine = "cosine"


class DType(str, Enum):
    """Training precision. Weights and optimizer state are float32 except under float64;
    bf16_autocast runs the forward's matmuls in bfloat16 (torch.autocast); tf32 lets
    CUDA matmuls use TensorFloat-32 (no effect on a CPU)."""

    float32 = "float32"
    float64 = "float64"
    bf16_autocast = "bf16_autocast"
    tf32 = "tf32"


class EqualizedScale(str, Enum):
    """What the He constant multiplies: the module's whole `output` (seed 001) or the `weight` only (ProGAN)."""

    output = "output"
    weight = "weight"


class ModularUpdate(str, Enum):
    normalize = "normalize"  # rescale each atom's direction to its target norm (PyTorch Modula)
    dualize = "dualize"  # orthogonalise it (Newton-Schulz), times the target (JAX Modula)


class ModularInit(str, Enum):
    orthogonal = "orthogonal"
    gaussian = "gaussian"


class NormEstimate(str, Enum):
    power = "power"  # warm-started power iteration, a few matrix-vector products a step
    exact = "exact"  # SVD: exact, slow at large widths


class DecayScaling(str, Enum):
    """How weight decay relates to the learning rate.

    `independent` (default): w <- w - wd * schedule(t) * w, so an LR sweep does not
    also sweep the decay. `lr`: w <- w - lr * wd * schedule(t) * w, as torch's AdamW.
    """

    independent = "independent"
    lr = "lr"


# ---------------------------------------------------------------- shared keys
@dataclass
class LRGrid:
    """Learning rates 2**log2_min ... 2**log2_max, log2_step octaves apart."""

    log2_min: float = -14.0
    log2_max: float = -4.0
    log2_step: float = 1.0

    def values(self) -> list[float]:
        """The grid's log2 learning rates, endpoints included."""
        n = int(math.floor((self.log2_max - self.log2_min) / self.log2_step + 1e-9)) + 1
        return [self.log2_min + i * self.log2_step for i in range(n)]


@dataclass
class Train:
    steps: int = 300
    batch_size: int = 64
    schedule: Schedule = Schedule.constant
    warmup_steps: int = 0
    # The final loss is the mean training loss over this fraction of the last steps.
    final_window: float = 0.1
    # How many points of each run's loss curve the record keeps.
    history_points: int = 100
    # A run counts as diverged when its loss is NaN/inf or exceeds this multiple of
    # its initial loss.
    diverge_factor: float = 20.0
    dtype: DType = DType.float32


@dataclass
class Engine:
    """How a job runs; none of it changes what is computed, so it is not part of a job's identity."""

    device: str = "auto"  # auto | cpu | cuda | cuda:N
    threads: int = 0  # 0: OMP_NUM_THREADS when a launcher set it, else every core
    batched: bool = True  # train a job's runs as one ensemble; false: one run at a time
    # Runs per ensemble: 0 = as many as fit in max_memory_gb (estimated), N = at most N.
    chunk: int = 0
    max_memory_gb: float = 4.0
    progress: bool = True
    # Save the training state at most this often (seconds; 0: never), and when a stop
    # is requested; a re-run of an unfinished job resumes from it.
    checkpoint_s: float = 300.0


# ---------------------------------------------------------------- group options
# What one example of a task is (see lrtransfer/data/__init__.py). A data option's
# schema declares its kind as `INPUTS`, a model's schema the kinds it can read as
# `READS` (both default to vectors), so a model that cannot read the data is
# refused before anything loads.
VECTOR, IMAGE, TOKENS, SIGNAL = "vector", "image", "tokens", "signal"
INPUT_KINDS = {VECTOR: "feature vectors", IMAGE: "images", TOKENS: "token sequences", SIGNAL: "1-D signals"}


def location(default: Any) -> Any:
    """A field that says where something is, not what is computed: it is no part of a job's identity."""
    return field(default=default, metadata={"location": True})


@dataclass
class MLPConfig:
    MIN_DEPTH: ClassVar[int] = 2  # an input and an output layer
    READS: ClassVar[tuple[str, ...]] = (VECTOR, IMAGE, SIGNAL)  # images and signals are flattened

    name: str = "mlp"
    activation: Activation = Activation.relu
    bias: bool = True


@dataclass
class ResNetConfig:
    """ResNet-S (seed 002): MM(Res(...Res(MM_in(x)))), Res(z) = z + sigma(MM_1(sigma(MM_2(z))))."""

    MIN_DEPTH: ClassVar[int] = 1  # residual blocks
    READS: ClassVar[tuple[str, ...]] = (VECTOR, IMAGE, SIGNAL)  # images and signals are flattened

    name: str = "resnet"
    activation: Activation = Activation.relu
    bias: bool = True
    layer_norm: bool = False  # LN (learnable gain and bias) at the start of every block
    residual: ResidualRule = ResidualRule.auto


@dataclass
class CNNConfig:
    """Conv stem, depth - 1 more conv layers of `width` channels, global average pooling, linear readout."""

    MIN_DEPTH: ClassVar[int] = 1  # conv layers, the stem included
    READS: ClassVar[tuple[str, ...]] = (IMAGE,)

    name: str = "cnn"
    activation: Activation = Activation.relu
    bias: bool = True
    kernel_size: int = 3
    pool: int = 2  # average-pool the stem's output by pool x pool (0: keep the full resolution)

    def check(self) -> None:
        _conv_checks(self)


@dataclass
class ResNetCNNConfig(CNNConfig):
    """Conv stem, `depth` residual blocks of two convs (Res of seed 002 with convolutions), pooling, readout."""

    name: str = "resnet_cnn"  # depth counts residual blocks
    residual: ResidualRule = ResidualRule.auto


@dataclass
class CNN1DConfig:
    """Conv1D layers of `width` channels (seed 002, eq. 7.50), the first `pool_layers` each halving
    the length by average pooling, then the flattened features into a linear readout (MNIST-1D's CNN)."""

    MIN_DEPTH: ClassVar[int] = 1  # conv layers
    READS: ClassVar[tuple[str, ...]] = (SIGNAL,)

    name: str = "cnn1d"
    activation: Activation = Activation.relu
    bias: bool = True
    kernel_size: int = 5
    pool_layers: int = 3  # how many conv layers (from the first) halve the length: 40 -> 5 for 3

    def check(self) -> None:
        _odd_kernel(self.kernel_size)
        if self.pool_layers < 0:
            raise ConfigError(f"model.pool_layers must be >= 0 (0: no pooling), got {self.pool_layers}")

    def check_with(self, cfg: Config) -> None:
        length = getattr(cfg.data, "final_seq_length", None)
        halvings = min(cfg.depth, self.pool_layers)
        if length is not None and length >> halvings < 1:
            raise ConfigError(
                f"model=cnn1d halves the signal's length {halvings} times (depth={cfg.depth}, "
                f"model.pool_layers={self.pool_layers}), but data.final_seq_length={length} leaves nothing; "
                f"use a smaller model.pool_layers or a longer signal"
            )


@dataclass
class TransformerConfig:
    """A GPT-style decoder: token + position embeddings, `depth` pre-norm blocks
    z + attn(LN(z)), z + mlp(LN(z)) (causal self-attention, `heads` heads of width / heads),
    a final LN and a linear head predicting the next token at every position."""

    MIN_DEPTH: ClassVar[int] = 1  # transformer blocks (each an attention and an MLP residual branch)
    READS: ClassVar[tuple[str, ...]] = (TOKENS,)
    BLOCKS_MASS: ClassVar[float] = 5.0  # param=modular's default trunk mass: Modula's GPT

    name: str = "transformer"
    heads: int = 4  # fixed number of heads: d_head = width / heads grows with the width
    mlp_ratio: int = 4  # MLP hidden width = mlp_ratio * width
    activation: Activation = Activation.gelu
    bias: bool = True
    residual: ResidualRule = ResidualRule.auto

    def check(self) -> None:
        _positive("model.heads", self.heads)
        _positive("model.mlp_ratio", self.mlp_ratio)

    def check_with(self, cfg: Config) -> None:
        if cfg.width % self.heads != 0:
            valid = ", ".join(str(self.heads * i) for i in (1, 2, 4, 8, 16))
            raise ConfigError(
                f"width={cfg.width} is not divisible by model.heads={self.heads} (d_head = width / heads); "
                f"valid widths: multiples of {self.heads} ({valid}, ...), or a model.heads dividing {cfg.width}"
            )


def _odd_kernel(k: int) -> None:
    if not (k > 0 and k % 2 == 1):
        raise ConfigError(f"model.kernel_size must be a positive odd number (same-size padding), got {k}")


def _conv_checks(model) -> None:
    _odd_kernel(model.kernel_size)
    if model.pool < 0:
        raise ConfigError(f"model.pool must be >= 0 (0: no pooling), got {model.pool}")


@dataclass
class StandardParam:
    name: str = "standard"


@dataclass
class EqualizedParam:
    name: str = "equalized"
    gain: float = math.sqrt(2.0)  # c = gain * sqrt(1 / fan_in)
    scale: EqualizedScale = EqualizedScale.output

    def check(self) -> None:
        _positive("param.gain", self.gain)


@dataclass
class MupParam:
    name: str = "mup"
    base_width: int = 128  # muP equals SP at this width (with readout_zero_init=false)
    readout_zero_init: bool = True
    output_mult: float = 1.0
    zero_query: bool = True  # attention queries start at zero (for transformers)
    depth_exponent: float = 0.0  # residual branches x L^-depth_exponent (0.5: depth-muP); 0: width only

    def check(self) -> None:
        _positive("param.base_width", self.base_width)
        _positive("param.output_mult", self.output_mult)
        if not self.depth_exponent >= 0:
            raise ConfigError(f"param.depth_exponent must be >= 0, got {self.depth_exponent!r}")


@dataclass
class ModularParam:
    name: str = "modular"
    update: ModularUpdate = ModularUpdate.normalize
    init: ModularInit = ModularInit.orthogonal
    norm_estimate: NormEstimate = NormEstimate.power
    power_iters: int = 1  # power iterations per step (warm-started)
    ns_steps: int = 8  # Newton-Schulz quintic steps of `dualize` (then 4 polishing steps)
    bias_mass: float = 0.1  # a Linear's bias : weight mass ratio (its share of the atom's target)
    # total mass of a residual trunk (`Parameterization.residual_stack`); conf/param/modular.yaml
    # defaults it to the model's own (`model_default`: transformer 5, as Modula's GPT; others 1)
    blocks_mass: float = 1.0

    def check(self) -> None:
        for key in ("power_iters", "ns_steps", "blocks_mass"):
            _positive(f"param.{key}", getattr(self, key))
        if not self.bias_mass >= 0:
            raise ConfigError(f"param.bias_mass must be >= 0, got {self.bias_mass!r}")


@dataclass
class AdamConfig:
    name: str = "adam"
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 0.0
    decay_scaling: DecayScaling = DecayScaling.independent


@dataclass
class SGDConfig:
    name: str = "sgd"
    momentum: float = 0.9
    nesterov: bool = False
    weight_decay: float = 0.0
    decay_scaling: DecayScaling = DecayScaling.independent


@dataclass
class TeacherConfig:
    """Inputs x ~ N(0, I); labels drawn from softmax(teacher(x) / temperature)."""

    INPUTS: ClassVar[str] = VECTOR

    name: str = "teacher"
    input_dim: int = 32
    classes: int = 10
    teacher_width: int = 128
    teacher_depth: int = 2
    temperature: float = 0.5
    seed: int = 1234
    eval_size: int = 4096


@dataclass
class ImageDataConfig:
    """A labelled image dataset on disk in torchvision's layout (lrtransfer/data/images.py)."""

    INPUTS: ClassVar[str] = IMAGE

    name: str = MISSING
    root: str = location("data")  # the folder torchvision would be given as `root`
    download: bool = location(False)  # fetch missing files with torchvision; never otherwise
    train_size: Optional[int] = None  # None: the whole training split; N: a fixed random subset
    eval_size: Optional[int] = None  # None: the whole test split; N: a fixed random subset
    seed: int = 0  # which subsets
    augment: bool = False  # random crop after zero padding, and horizontal flips
    augment_pad: int = 4
    augment_flip: bool = True

    def check(self) -> None:
        for key in ("train_size", "eval_size"):
            if getattr(self, key) is not None:
                _positive(f"data.{key}", getattr(self, key))
        if self.augment_pad < 0:
            raise ConfigError(f"data.augment_pad must be >= 0, got {self.augment_pad}")


@dataclass
class TextConfig:
    """Character-level next-token prediction on a text file (lrtransfer/data/text.py)."""

    INPUTS: ClassVar[str] = TOKENS

    name: str = "text"
    path: Optional[str] = None  # a UTF-8 text file; None: the embedded default (CPython's pydoc topics)
    seq_len: int = 128  # predictions per sequence (context length)
    eval_size: int = 256  # held-out sequences, from the end of the text

    def check(self) -> None:
        _positive("data.seq_len", self.seq_len)
        _positive("data.eval_size", self.eval_size)


@dataclass
class MNIST1DConfig:
    """MNIST-1D (Greydanus 2020), generated locally by the `mnist1d` package (lrtransfer/data/mnist1d.py).

    The generation keys are the package's `get_dataset_args()`; the defaults are the benchmark's.
    """

    INPUTS: ClassVar[str] = SIGNAL

    name: str = "mnist1d"
    cache: Optional[str] = location(None)  # where generated sets are kept; None: $XDG_CACHE_HOME/lrtransfer
    num_samples: int = 5000  # train + test; num_samples // 10 per class
    train_split: float = 0.8  # the first 80% train, the rest the held-out test split
    padding_min: int = 36  # the package's padding = [padding_min, padding_max] (scalars: every config value
    padding_max: int = 60  # is a scalar, which the analysis groups by)
    scale_coeff: float = 0.4
    max_translation: int = 48
    corr_noise_scale: float = 0.25
    iid_noise_scale: float = 0.02
    shear_scale: float = 0.75
    shuffle_seq: bool = False
    final_seq_length: int = 40
    seed: int = 42  # the generator's seed (the benchmark's)
    eval_size: Optional[int] = None  # None: the whole test split; N: a fixed random subset of it

    def check(self) -> None:
        if self.num_samples < 10:
            raise ConfigError(f"data.num_samples must be >= 10 (one signal per class at least), got {self.num_samples}")
        n = self.num_samples // 10 * 10
        if not (0 < self.train_split < 1 and 0 < int(n * self.train_split) < n):
            raise ConfigError(
                f"data.train_split={self.train_split} leaves an empty split of {n} signals; use a value in (0, 1)"
            )
        _positive("data.final_seq_length", self.final_seq_length)
        _positive("data.max_translation", self.max_translation)
        if not 0 <= self.padding_min <= self.padding_max:
            raise ConfigError(
                f"data.padding_min={self.padding_min}, data.padding_max={self.padding_max}: need 0 <= min <= max"
            )
        if self.eval_size is not None:
            _positive("data.eval_size", self.eval_size)


# ---------------------------------------------------------------- the whole
@dataclass
class Config:
    model: Any = MISSING
    param: Any = MISSING
    optim: Any = MISSING
    data: Any = MISSING
    name: str = "default"
    results_dir: str = "results"
    width: int = 128
    depth: int = 3
    seed: int = 0
    n_seeds: int = 1
    lr: LRGrid = field(default_factory=LRGrid)
    train: Train = field(default_factory=Train)
    engine: Engine = field(default_factory=Engine)


# Group option -> its schema. A new option adds one line here and one YAML file.
SCHEMAS: dict[str, dict[str, type]] = {
    "model": {"mlp": MLPConfig, "resnet": ResNetConfig, "cnn": CNNConfig, "resnet_cnn": ResNetCNNConfig,
              "transformer": TransformerConfig, "cnn1d": CNN1DConfig},
    "param": {"standard": StandardParam, "equalized": EqualizedParam, "mup": MupParam, "modular": ModularParam},
    "optim": {"adam": AdamConfig, "sgd": SGDConfig},
    "data": {
        "teacher": TeacherConfig,
        "cifar10": ImageDataConfig,
        "cifar100": ImageDataConfig,
        "mnist": ImageDataConfig,
        "fashion_mnist": ImageDataConfig,
        "text": TextConfig,
        "mnist1d": MNIST1DConfig,
    },
}
GROUPS = tuple(SCHEMAS)


def register() -> None:
    """Make the schemas visible to Hydra; idempotent."""
    cs = ConfigStore.instance()
    cs.store(name="lrtransfer_schema", node=Config)
    for group, options in SCHEMAS.items():
        for option, node in options.items():
            cs.store(group=f"schema/{group}", name=option, node=node)


def model_default(key: str, *, _root_: DictConfig) -> Any:
    """`${lrt_model_default:KEY}`: the value the chosen model's schema declares as its own
    default for a key of another group (a ClassVar KEY.upper(); 1.0 when it declares none).
    conf/param/modular.yaml sets `blocks_mass: ${lrt_model_default:blocks_mass}`: Modula's
    GPT tares its blocks to 5, its ResMLP to 1, and an override still wins."""
    schema = SCHEMAS["model"].get(_root_.model.name)
    return float(getattr(schema, key.upper(), 1.0))


register()
if not OmegaConf.has_resolver("lrt_model_default"):
    OmegaConf.register_new_resolver("lrt_model_default", model_default, use_cache=False)


# ---------------------------------------------------------------- value checks
def _positive(name: str, value: float) -> None:
    if not value > 0:
        raise ConfigError(f"{name} must be positive, got {value!r}")


def validate(cfg: DictConfig | Config) -> Config:
    """Return `cfg` as typed objects, or raise ConfigError naming the bad value."""
    if isinstance(cfg, DictConfig):
        if "hydra" in cfg:  # a sweep's job config: drop Hydra's own node, as Hydra does for the task
            cfg = copy.deepcopy(cfg)
            with open_dict(cfg):
                del cfg["hydra"]
        cfg = OmegaConf.to_object(cfg)  # type: ignore[assignment]
    if not isinstance(cfg, Config):
        raise ConfigError("the config does not follow lrtransfer's schema (conf/config.yaml must list lrtransfer_schema)")
    for key in ("width", "depth", "n_seeds"):
        _positive(key, getattr(cfg, key))
    min_depth = getattr(cfg.model, "MIN_DEPTH", 1)
    if cfg.depth < min_depth:
        raise ConfigError(f"depth={cfg.depth}: model={cfg.model.name} needs depth >= {min_depth}")
    _positive("train.steps", cfg.train.steps)
    _positive("train.batch_size", cfg.train.batch_size)
    _positive("train.history_points", cfg.train.history_points)
    _positive("train.diverge_factor", cfg.train.diverge_factor)
    if not 0 < cfg.train.final_window <= 1:
        raise ConfigError(f"train.final_window must be in (0, 1], got {cfg.train.final_window!r}")
    if not 0 <= cfg.train.warmup_steps < cfg.train.steps:
        raise ConfigError(
            f"train.warmup_steps must be in [0, train.steps={cfg.train.steps}), got {cfg.train.warmup_steps!r}"
        )
    lr = cfg.lr
    if not all(math.isfinite(v) for v in (lr.log2_min, lr.log2_max, lr.log2_step)):
        raise ConfigError(f"lr grid values must be finite, got {lr}")
    _positive("lr.log2_step", lr.log2_step)
    if lr.log2_min > lr.log2_max:
        raise ConfigError(
            f"empty LR grid: lr.log2_min={lr.log2_min} is above lr.log2_max={lr.log2_max}"
        )
    if cfg.engine.chunk < 0:
        raise ConfigError(f"engine.chunk must be >= 0 (0 = automatic), got {cfg.engine.chunk}")
    _positive("engine.max_memory_gb", cfg.engine.max_memory_gb)
    if cfg.engine.checkpoint_s < 0:
        raise ConfigError(f"engine.checkpoint_s must be >= 0 (0 = never), got {cfg.engine.checkpoint_s}")
    if cfg.engine.threads < 0:
        raise ConfigError(f"engine.threads must be >= 0 (0 = automatic), got {cfg.engine.threads}")
    device = cfg.engine.device
    if not (device in ("auto", "cpu", "cuda") or (device.startswith("cuda:") and device[5:].isdigit())):
        raise ConfigError(f"engine.device={device!r} is not one of: auto, cpu, cuda, cuda:N")
    if not cfg.name or "/" in cfg.name or cfg.name.startswith("."):
        raise ConfigError(f"name={cfg.name!r} must be a non-empty folder name without '/'")
    for group in GROUPS:
        node = getattr(cfg, group)
        for key, value in vars(node).items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isfinite(value):
                raise ConfigError(f"{group}.{key} must be finite, got {value!r}")
        if hasattr(node, "check"):
            node.check()
        if hasattr(node, "check_with"):  # checks that need the rest of the config (model.heads vs width)
            node.check_with(cfg)
    _check_model_reads_data(cfg)
    return cfg


def _reads(model_schema) -> tuple[str, ...]:
    return getattr(model_schema, "READS", (VECTOR,))


def _check_model_reads_data(cfg: Config) -> None:
    kind = getattr(cfg.data, "INPUTS", VECTOR)
    if kind in _reads(cfg.model):
        return
    able = [name for name, schema in SCHEMAS["model"].items() if kind in _reads(schema)]
    raise ConfigError(
        f"model={cfg.model.name} cannot read data={cfg.data.name}, which gives {INPUT_KINDS[kind]}; "
        f"models that can: {', '.join(able) if able else 'none yet'}"
    )


def semantic(cfg: DictConfig | dict) -> dict:
    """The part of a resolved config that decides what is computed: a job's identity.

    Output locations (`results_dir`, `name`), execution settings (`engine`),
    Hydra's own settings and the fields a schema marks as `location` (where a
    dataset lives, whether it may be downloaded) are left out, so the same point is
    recognised whichever launcher, device, study folder or data folder ran it.
    """
    if isinstance(cfg, DictConfig):
        cfg = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)  # type: ignore[assignment]
    out = {k: v for k, v in cfg.items() if k not in ("hydra", "results_dir", "name", "engine")}
    for group in GROUPS:
        node = out.get(group)
        schema = SCHEMAS[group].get(node.get("name")) if isinstance(node, dict) else None
        if schema is not None:
            hidden = {f.name for f in fields(schema) if f.metadata.get("location")}
            out[group] = {k: v for k, v in node.items() if k not in hidden}
    return out
