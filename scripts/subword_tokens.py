"""Subword token files of the embedded default text, for the subword studies (docs/datasets.md).

Trains a byte-level BPE (GPT-2's kind of tokenizer) of `--vocab` tokens on the embedded
text (CPython's pydoc topics, what data=text reads) with the `tokenizers` library,
locally, and writes nanoGPT's layout into OUT_DIR:

    train.bin, val.bin   uint16 token ids, little-endian (nanoGPT's prepare.py layout)
    meta.pkl             {"vocab_size": N}: a plain dict, as nanoGPT's character sets keep theirs
    tokenizer.json       the tokenizer, to decode or re-tokenize with

The held-out text is the same characters data=text holds out at `--seq-len` and
`--eval-size` (its last eval_size * seq_len + 1 characters), tokenized on its own as
nanoGPT tokenizes its validation split, so the two studies are scored on the same text.
Nothing is downloaded. Usage:

    python scripts/subword_tokens.py OUT_DIR [--vocab 4096] [--seq-len 64] [--eval-size 256]
"""

from __future__ import annotations

import argparse
import hashlib
import pickle
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer, models, pre_tokenizers, trainers, decoders

from lrtransfer.options.data.text import default_text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--seq-len", type=int, default=64, help="data=text's data.seq_len whose held-out characters to hold out")
    ap.add_argument("--eval-size", type=int, default=256, help="data=text's data.eval_size, likewise")
    args = ap.parse_args()

    text = default_text()
    held = args.eval_size * args.seq_len + 1  # data=text's held-out characters (text.split_sizes)
    train_text, val_text = text[:-held], text[-held:]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=args.vocab, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(text.split("\n\n"), trainer)  # the whole text, as data=text's characters are

    args.out.mkdir(parents=True, exist_ok=True)
    vocab = tok.get_vocab_size(with_added_tokens=True)
    for name, part in (("train", train_text), ("val", val_text)):
        ids = np.array(tok.encode(part).ids, dtype="<u2")
        assert tok.decode(ids.tolist()) == part, f"{name}: the tokenizer does not round-trip"
        ids.tofile(args.out / f"{name}.bin")
        digest = hashlib.sha1(ids.tobytes()).hexdigest()[:12]
        print(f"{name}.bin: {len(ids)} tokens of {len(part)} characters ({len(part) / len(ids):.3f} per token), "
              f"sha1 {digest}")
    with open(args.out / "meta.pkl", "wb") as f:
        pickle.dump({"vocab_size": vocab}, f)
    tok.save(str(args.out / "tokenizer.json"))
    print(f"vocabulary: {vocab} tokens (byte-level BPE trained on {len(text)} characters); written to {args.out}")


if __name__ == "__main__":
    main()
