"""The coverage sweep's genai column (tools/coverage.py --genai): an `exact` language model
exported with `attndsl compile --export genai` (ort-cpu) and run greedily by
onnxruntime-genai on two prompts, against transformers' `generate` (as
tests/test_generation.py's `genai_generates`): `yes` where the tokens are transformers', up to
and with the folder's eos; else `no`, or `refused` / `crash` with why."""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import replace
from pathlib import Path

PROMPTS = [[5, 7, 9, 11, 2, 3, 4], [8, 1, 3]]
NEW = 8


def prompts(config) -> list[list[int]]:
    """PROMPTS with the config's pad, bos and eos ids replaced by ordinary ones:
    onnxruntime-genai reads a prompt token equal to the pad id as padding (Helium's pad id
    is 3), which no real prompt holds."""
    special = set()
    for key in ("pad_token_id", "bos_token_id", "eos_token_id"):
        value = getattr(config, key, None)
        special |= set(value) if isinstance(value, list) else {value}
    free = (i for i in range(4, 64) if i not in special)
    swap = {t: next(free) for t in sorted({t for p in PROMPTS for t in p} & special)}
    return [[swap.get(t, t) for t in p] for p in PROMPTS]


def _transformers_tokens(model) -> list[list[int]]:
    import torch

    tokens = []
    for prompt in prompts(model.config):  # one at a time: no padding to agree on
        with torch.no_grad():
            out = model.generate(input_ids=torch.tensor([prompt]), max_new_tokens=NEW,
                                 do_sample=False, pad_token_id=0, eos_token_id=None)
        tokens.append(out[0, len(prompt):].tolist())
    return tokens


def _genai_tokens(folder: Path, config) -> list[list[int]]:
    import onnxruntime_genai as og

    model = og.Model(str(folder))
    found = []
    for prompt in prompts(config):
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=len(prompt) + NEW, do_sample=False)
        generator = og.Generator(model, params)
        generator.append_tokens([prompt])
        tokens = []
        while not generator.is_done():
            generator.generate_next_token()
            tokens.append(int(generator.get_next_tokens()[0]))
        found.append(tokens)
    return found


def genai_row(row, model, folder: Path):
    """`row` with its genai column filled."""
    from attndsl.cli import main

    out = folder.parent / "genai"
    spec = folder.parent / "model.attn"
    for argv in (["import", str(folder), "-o", str(spec)],
                 ["compile", str(spec), "--export", "genai", "--weights", str(folder), "-o",
                  str(out), "--target", "ort-cpu"]):
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main(argv)
        if code != 0:
            break
    if code != 0:
        lines = [ln for ln in err.getvalue().splitlines() if ln.strip()]
        said = next((ln for ln in lines if "error" in ln), lines[0] if lines else f"exit {code}")
        said = said.replace(f"{folder.parent}/", "").strip()
        return replace(row, genai=f"refused: {said}" if code == 2 else f"crash: {said}")
    try:
        target = next(p.parent for p in out.rglob("genai_config.json"))
        eos = json.loads((target / "genai_config.json").read_text())["model"]["eos_token_id"]
        eos = set(eos) if isinstance(eos, list) else {eos}
        got = _genai_tokens(target, model.config)
    except Exception as exc:
        return replace(row, genai=f"crash: {type(exc).__name__}: {exc}"[:200])
    want = _transformers_tokens(model)
    for tokens, expected in zip(got, want, strict=True):
        cut = next((i + 1 for i, t in enumerate(expected) if t in eos), len(expected))
        if tokens != expected[:cut]:
            return replace(row, genai="no (tokens differ)")
    return replace(row, genai="yes")
