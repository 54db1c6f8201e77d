"""Corrupted and hostile checkpoints (issue 30, item 6): a seeded set of damaged
model.safetensors files, sharded indexes and pytorch_model.bin files given to `attndsl compile
--weights`. Each ends in exit 0 (the damage left a readable checkpoint of the right tensors) or
exit 2 naming the file, never exit 3; and a failed compile leaves the previous output as it
was. 80 cases by default, 2,000 with --deep."""

from __future__ import annotations

import io
import json
import random
import shutil
import struct
from pathlib import Path

import pytest
import torch

from attndsl.cli import main

from .test_hf_families import CASES, _model, redraw

_SAFETENSORS = ("truncate", "flip_header", "flip_length", "dtype", "shape", "offsets", "drop",
                "extra", "empty", "zero_length", "flip_data")
_INDEX = ("shard_missing", "shard_type", "shard_outside", "index_not_a_map", "index_nested",
          "shard_deleted")
_BIN = ("bin_truncate", "bin_flip", "bin_not_a_state_dict")
KINDS = _SAFETENSORS + _INDEX + _BIN


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> dict:
    """A tiny Qwen2 checkpoint saved three ways, its imported spec and a good compile of it."""
    root = tmp_path_factory.mktemp("hostile_checkpoint")
    make, side, *_ = CASES["qwen2"]
    model = _model(make()).eval()
    redraw(model, 5, unit_offset=False)
    model.save_pretrained(root / "single")
    model.save_pretrained(root / "shards", max_shard_size="40KB")
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    spec = root / "spec.attn"
    assert main(["import", str(root / "single"), "-o", str(spec), "--padding", side,
                 "--head", "none"]) == 0
    return {"root": root, "spec": spec, "bin": buffer.getvalue(),
            "safetensors": (root / "single" / "model.safetensors").read_bytes(),
            "index": json.loads((root / "shards" / "model.safetensors.index.json").read_text())}


def _damaged_safetensors(data: bytes, rng: random.Random, kind: str) -> bytes:
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    names = sorted(k for k in header if k != "__metadata__")
    if kind == "truncate":
        return data[:rng.randrange(len(data))]
    if kind in ("flip_header", "flip_length", "flip_data"):
        start, stop = {"flip_header": (8, 8 + n), "flip_length": (0, 8),
                       "flip_data": (8 + n, len(data))}[kind]
        damaged = bytearray(data)
        damaged[rng.randrange(start, stop)] = rng.randrange(256)
        return bytes(damaged)
    if kind == "empty":
        return b""
    if kind == "zero_length":
        return struct.pack("<Q", 0) + data[8:]
    name = rng.choice(names)
    if kind == "dtype":
        header[name]["dtype"] = rng.choice(["I64", "BOOL", "F16", "BF16", "F64", "U8", "X", 3])
    elif kind == "shape":
        header[name]["shape"] = rng.choice([[], [1], [10**12, 10**12], [-1, 3], "x", [2.5]])
    elif kind == "offsets":
        header[name]["data_offsets"] = rng.choice([[0, 10**15], [5, 3], [-1, 4], [0], "x"])
    elif kind == "drop":
        del header[name]
    else:  # extra
        header["junk.weight"] = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data[8 + n:]


def _damage(case: dict, folder: Path, rng: random.Random, kind: str) -> None:
    """`folder`: a copy of the checkpoint with the damage `kind` done to it."""
    root = case["root"]
    if kind in _SAFETENSORS:
        shutil.copytree(root / "single", folder)
        (folder / "model.safetensors").write_bytes(
            _damaged_safetensors(case["safetensors"], rng, kind))
    elif kind in _INDEX:
        shutil.copytree(root / "shards", folder)
        index = json.loads(json.dumps(case["index"]))
        name = rng.choice(sorted(index["weight_map"]))
        text = None
        if kind == "shard_missing":
            index["weight_map"][name] = "absent.safetensors"
        elif kind == "shard_type":
            index["weight_map"][name] = rng.choice([3, None, [1], {"a": 1}])
        elif kind == "shard_outside":
            index["weight_map"][name] = rng.choice(
                ["../single/model.safetensors", "/etc/passwd", "config.json", "."])
        elif kind == "index_not_a_map":
            index = rng.choice([[], 3, "x", {"weight_map": 5}, {}])
        elif kind == "index_nested":
            text = "[" * 100_000 + "]" * 100_000
        else:  # shard_deleted
            (folder / sorted(set(index["weight_map"].values()))[0]).unlink()
        (folder / "model.safetensors.index.json").write_text(text or json.dumps(index))
    else:
        folder.mkdir()
        shutil.copy(root / "single" / "config.json", folder)
        data = case["bin"]
        if kind == "bin_truncate":
            data = data[:rng.randrange(len(data))]
        elif kind == "bin_flip":
            damaged = bytearray(data)
            for _ in range(5):
                damaged[rng.randrange(len(damaged))] = rng.randrange(256)
            data = bytes(damaged)
        else:
            buffer = io.BytesIO()
            torch.save(rng.choice([[1, 2], {"a": 3}, torch.zeros(3), {"x": {"y": torch.zeros(2)}},
                                   {3: torch.zeros(2)}]), buffer)
            data = buffer.getvalue()
        (folder / "pytorch_model.bin").write_bytes(data)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "damage_seed" in metafunc.fixturenames:
        count = 2000 if metafunc.config.getoption("--deep") else 80
        metafunc.parametrize("damage_seed", range(count))


def test_a_damaged_checkpoint_is_loaded_or_refused(checkpoint, tmp_path, capsys,
                                                   damage_seed: int) -> None:
    """Before the fix, an index naming a shard with a number, null or list, an index that is
    not an object, one nested 100,000 deep and a pytorch_model.bin holding something other than
    a state dict ended in "internal error" (exit 3); an index could name any file on the disk."""
    rng = random.Random(damage_seed)
    kind = KINDS[damage_seed % len(KINDS)]
    folder = tmp_path / "damaged"
    _damage(checkpoint, folder, rng, kind)
    out = tmp_path / "out"
    args = ["compile", str(checkpoint["spec"]), "--export", "onnx", "--target", "ort-cpu",
            "-o", str(out)]
    assert main([*args, "--weights", str(checkpoint["root"] / "single")]) == 0
    good = (out / "qwen2.onnx").read_bytes()
    capsys.readouterr()
    code = main([*args, "--weights", str(folder)])
    err = capsys.readouterr().err
    assert code in (0, 2) and "internal error" not in err, f"{kind}: {err}"
    if code == 2:
        assert str(folder) in err, err
        assert (out / "qwen2.onnx").read_bytes() == good  # the good output is kept
    index = folder / "model.safetensors.index.json"
    if kind == "shard_outside" and "config.json" not in index.read_text():
        assert code == 2 and "expected the name of a shard file" in err, err  # outside, or "."
