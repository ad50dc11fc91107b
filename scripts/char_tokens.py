"""The embedded default text (CPython's pydoc topics, what data=text reads) as a character-level
dataset in nanoGPT's layout, as its data/shakespeare_char/prepare.py makes one:

    train.bin, val.bin   uint16 character ids (the first 90% of the text, the last 10%)
    meta.pkl             {"vocab_size": N, "itos": {id: char}, "stoi": {char: id}}

Nothing is downloaded. Usage (nanoGPT reads data/<name>/ under its working folder):

    python scripts/char_tokens.py NANOGPT_COPY/data/lrt_char
"""

from __future__ import annotations

import argparse
import hashlib
import pickle
from pathlib import Path

import numpy as np

from lrtransfer.options.data.text import default_text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    args = ap.parse_args()
    text = default_text()
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    split = int(0.9 * len(text))
    args.out.mkdir(parents=True, exist_ok=True)
    for name, part in (("train", text[:split]), ("val", text[split:])):
        ids = np.array([stoi[c] for c in part], dtype="<u2")
        ids.tofile(args.out / f"{name}.bin")
        print(f"{name}.bin: {len(ids):,} characters, sha1 {hashlib.sha1(ids.tobytes()).hexdigest()[:12]}")
    with open(args.out / "meta.pkl", "wb") as f:
        pickle.dump({"vocab_size": len(chars), "itos": dict(enumerate(chars)), "stoi": stoi}, f)
    print(f"meta.pkl: vocab_size {len(chars)}")


if __name__ == "__main__":
    main()
