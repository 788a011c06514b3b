"""Loads a TorchLean checkpoint into PyTorch, the way a PyTorch user would.

Usage: load_checkpoint.py CHECKPOINT IN HIDDEN OUT INPUT_JSON [RESAVED]

Reads CHECKPOINT with `safetensors.torch.load_file`, sets aside the tensors under
`optimizer.` (optimizer state, which a model does not hold), and loads the rest with
`load_state_dict(strict=True)` into `torch.nn.Sequential(Linear(IN, HIDDEN), ReLU(),
Linear(HIDDEN, OUT))` -- any missing, unexpected or mis-shaped name fails here. Prints one
JSON object on stdout:

  {"tensors": {name: {"dtype": "float32", "shape": [...], "values": [...]}},  # every tensor
   "metadata": {...},            # the file's string metadata
   "checksum_by_zlib": "crc32:…", # torchlean.checksum recomputed here with zlib (null if none)
   "state_dict": [names...],     # the model's own state_dict names, in its order
   "output": [...]}              # the model applied to INPUT_JSON (a list of IN numbers)

Values are printed with Python's float repr, which round-trips float32 and float64 exactly.
With RESAVED, also writes the model's state_dict (plus the set-aside optimizer tensors and the
same metadata, less torchlean.checksum, which describes the bytes torchlean wrote and not these)
back with `safetensors.torch.save_file`, for the reader to load.

Used by crates/train/tests/checkpoint.rs (the interpreter comes from TORCHLEAN_PYTHON).
"""

import json
import sys
import zlib

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file


CHECKSUM_KEY = "torchlean.checksum"


def checksum_by_zlib(path: str, metadata: dict) -> "str | None":
    """torchlean.checksum as documented in crates/train/src/checkpoint.rs: zlib.crc32 of the
    whole file with the checksum's own 8 hex digits read as zeros."""
    stored = metadata.get(CHECKSUM_KEY)
    if stored is None:
        return None
    with open(path, "rb") as f:
        data = f.read()
    entry = json.dumps({CHECKSUM_KEY: stored}, separators=(",", ":"))[1:-1].encode()
    zeroed = entry[: -9] + b"00000000" + entry[-1:]
    return "crc32:%08x" % zlib.crc32(data.replace(entry, zeroed, 1))


def main() -> None:
    path, n_in, n_hidden, n_out, x = sys.argv[1:6]
    resaved = sys.argv[6] if len(sys.argv) > 6 else None
    tensors = load_file(path)
    with safe_open(path, framework="pt") as f:
        metadata = f.metadata() or {}
    params = {k: v for k, v in tensors.items() if not k.startswith("optimizer.")}
    model = torch.nn.Sequential(
        torch.nn.Linear(int(n_in), int(n_hidden)),
        torch.nn.ReLU(),
        torch.nn.Linear(int(n_hidden), int(n_out)),
    )
    model.load_state_dict(params, strict=True)
    with torch.no_grad():
        out = model(torch.tensor(json.loads(x), dtype=torch.float32))
    report = {
        "tensors": {
            k: {
                "dtype": str(v.dtype).removeprefix("torch."),
                "shape": list(v.shape),
                "values": v.flatten().tolist(),
            }
            for k, v in sorted(tensors.items())
        },
        "metadata": metadata,
        "checksum_by_zlib": checksum_by_zlib(path, metadata),
        "state_dict": list(model.state_dict().keys()),
        "output": out.tolist(),
    }
    if resaved:
        back = {k: v.contiguous() for k, v in model.state_dict().items()}
        back.update({k: v for k, v in tensors.items() if k.startswith("optimizer.")})
        kept = {k: v for k, v in metadata.items() if k != CHECKSUM_KEY}
        save_file(back, resaved, metadata=kept)
    json.dump(report, sys.stdout)
    print()


if __name__ == "__main__":
    main()
