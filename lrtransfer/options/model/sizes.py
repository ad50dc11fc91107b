"""A token model smaller than the data (fewer logits than the data has tokens, a context shorter
than data.seq_len) fails deep inside its forward, or finds no readout; here that is one line naming
the model's field that sets the size, so that `model.vocab_key` or `model.context_key` can set it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

from torch import nn

from lrtransfer.errors import ConfigError, one_line
from lrtransfer.options.model.target import CONTEXT_KEYS, scaled_keys


def int_fields(net: nn.Module, fn: Callable, options) -> dict[str, int]:
    """The model's whole-number settings by name, to name the one a message means: its config
    object's fields (`net.config`, where nanoGPT and transformers keep it), else the target's
    keyword defaults; less the width's and depth's, which lrtransfer sets."""
    config = getattr(net, "config", None)
    if config is not None and hasattr(config, "__dict__"):
        items = list(vars(config).items())
    else:
        try:
            items = [(n, p.default) for n, p in inspect.signature(fn).parameters.items()]
        except (TypeError, ValueError):
            items = []
    ours = {*scaled_keys(options.width_key, 1), options.depth_key}
    return {k: v for k, v in items if isinstance(v, int) and not isinstance(v, bool) and not k.startswith("_")
            and k not in ours}


def _fields_of(fields: dict[str, int], sizes) -> str:
    found = [f"{k}={v}" for k, v in fields.items() if v in sizes]
    return f"its config's {', '.join(found)}" if found else "no field of its config has that value"


def check_vocabulary(target: str, layers: list, output_dim: int, fields: dict[str, int]) -> None:
    """A token model (it has an embedding table) whose logits are fewer than the data's tokens
    cannot run: one line naming both sizes and `model.vocab_key`, not "no readout found"."""
    from lrtransfer.nn import OUTPUT

    tables = [layer for layer in layers if layer.kind == "embedding"]
    made = [(layer.fan_out, layer.names["weight"]) for layer in layers if layer.role == OUTPUT and "weight" in layer.names]
    made += [(layer.fan_in, layer.tied) for layer in tables if layer.tied]
    if not tables or not made or max(made)[0] >= output_dim:
        return
    n, name = max(made)
    raise ConfigError(f"model.target={target} makes {n} logits ({name}), fewer than the data's {output_dim} tokens: "
                      f"name the field that sets its vocabulary with model.vocab_key ({_fields_of(fields, {n})}), "
                      f"and lrtransfer sets it to {output_dim}")


# What names a context length: a field (block_size, n_ctx, max_position_embeddings, a `ctx` or `seq_len`
# of a model's own) or a position table (wpe, position_embeddings, pos_emb). Other sizes below the data's
# length (BERT's type_vocab_size, a head count) are not a context, whatever their value.
CONTEXT_WORDS = ("ctx", "context", "position", "block_size", "seq_len", "seq_length", "max_len")
POSITION_WORDS = ("pos", "wpe")


def names_context(name: str, words=CONTEXT_WORDS) -> bool:
    return name in CONTEXT_KEYS or any(w in name.lower() for w in words)


def context_failure(target: str, layers: list, output_dim: int, fields: dict[str, int]) -> Callable:
    """(error, context length) -> one line when a token model failed on the data's context because
    its own is shorter (a field that names a context, or a position table, below the data's length),
    else None: the error is then said as it is."""
    tables = {layer.fan_in: layer.path for layer in layers if layer.kind == "embedding"
              and names_context(layer.path.rpartition(".")[2], CONTEXT_WORDS + POSITION_WORDS)}

    def explain(e: Exception, length: int) -> str | None:
        short = {k: v for k, v in fields.items() if v < length and names_context(k)}
        rows = sorted(r for r in tables if r < length)
        if not short and not rows:
            return None
        sizes = sorted(set(short.values()) | set(rows))
        named = {k: v for k, v in fields.items() if names_context(k)}
        where = [_fields_of(named, sizes)] + [f"{tables[r]} has {r} rows" for r in rows]
        return (f"model.target={target} fails on the data's context of {length} tokens (data.seq_len; {one_line(e)}): "
                f"its own is {' or '.join(map(str, sizes))} ({'; '.join(where)}): name the field that sets its context "
                f"with model.context_key, and lrtransfer sets it to {length}, or lower data.seq_len")

    return explain
