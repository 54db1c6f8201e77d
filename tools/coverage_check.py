"""One model type of the coverage sweep (tools/coverage.py): a tiny random checkpoint of it from
its config class, `attndsl import`, the language model (or the stack, where attndsl imports
the stack alone) compiled with `--weights` for ort-cpu, and ONNX Runtime's logits against
transformers' forward pass at B = 2 with padding, at every real token, within
1e-4 x max(1, max |ref|). The answer is a `Row`: the type, its status and detail."""

from __future__ import annotations

import json
import math
import re
import tempfile
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from coverage_configs import OUT_OF_SCOPE, config_class, tiny_config

MAX_PARAMETERS = 20_000_000  # a tiny config past this needs an override (or it is no tiny)
LENGTHS = (12, 7)  # B = 2: one full row, one padded
SUB_CONFIGS = ("vision_config", "audio_config", "speech_config", "vq_config", "encoder_config",
               "image_config", "perceiver_config", "depth_decoder_config")
# padding side other than left: transformers counts Llama 4's chunks, and OPT's learned
# positions, from each row's first real token, which a one-pass model with left padding does
# not (its decoding form does, from position_ids: docs/CHECKPOINTS.md)
PADDING = {"llama4_text": "right", "llama4": "right", "opt": "right"}
# attention implementation other than eager (Falcon's eager path adds ALiBi twice)
ATTENTION = {"falcon": "sdpa"}


@dataclass(frozen=True)
class Row:
    model_type: str
    status: str  # exact, WRONG, refused, crash, out of scope, skipped
    detail: str = ""
    genai: str = "-"


def redraw(model, seed: int) -> None:
    """Linear weights N(0, 4 / fan_in), embeddings N(0, 1), biases around 0, norm weights
    around 1, or around 0 where the model initialised them to 0 (a 1 + w norm, Gemma's), so
    that activations are O(1) and attention is far from uniform (as tests/test_hf_families)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            if p.dim() > 1:
                embedding = any(k in name for k in ("embed", "wte", "word_embeddings",
                                                    "relative_attention_bias"))
                p.copy_(noise if embedding else noise * 2 / math.sqrt(p.shape[-1]))
            elif name.endswith("weight"):  # a norm
                p.copy_(0.1 * noise + (0.0 if bool((p == 0).all()) else 1.0))
            else:
                p.copy_(0.1 * noise)


def _first_line(exc: BaseException, folder: Path) -> str:
    """The diagnostic's first line, without the temporary folder's path."""
    text = str(getattr(exc, "diagnostics", [exc])[0].message
               if getattr(exc, "diagnostics", None) else exc)
    text = text.replace(f"{folder}/config.json: ", "").replace(f"{folder}/", "")
    return text.replace(str(folder), "<folder>").strip().splitlines()[0] if text else ""


def _crash(exc: BaseException) -> str:
    frame = traceback.extract_tb(exc.__traceback__)[-1]
    where = f"{Path(frame.filename).name}:{frame.lineno}"
    said = " ".join(str(exc).split())[:200]
    return f"{type(exc).__name__}: {said} ({where})"


def _scope(model_type: str, config) -> str | None:
    """Why a type is out of scope before anything is built, or None."""
    from attndsl.families import FAMILIES

    if getattr(config, "is_encoder_decoder", False) and model_type in FAMILIES:
        return ("imported as the whole encoder-decoder, compared with its model for "
                "conditional generation (tests/test_seq2seq_families.py); the causal-LM class "
                "is its decoder alone, without the encoder its cross attention reads")
    if model_type in OUT_OF_SCOPE:
        return OUT_OF_SCOPE[model_type]
    if model_type in FAMILIES:  # attndsl imports it: run it, whatever it is
        return None
    if getattr(config, "is_encoder_decoder", False):
        return "the decoder of an encoder-decoder model (cross-attention to an encoder)"
    subs = [k for k in SUB_CONFIGS if getattr(config, k, None) is not None]
    if subs:
        text = f"{model_type}_text"
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

        sibling = f"; its language model: {text}" if text in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES \
            else ""
        return f"a wrapper of sub-models ({', '.join(subs)}{sibling})"
    return None


def _ids(vocab: int, side: str):
    rng = np.random.default_rng(3)
    n = max(LENGTHS)
    ids = rng.integers(3, vocab, size=(len(LENGTHS), n)).astype(np.int64)
    mask = np.zeros_like(ids)
    for b, k in enumerate(LENGTHS):
        if side == "left":
            mask[b, n - k:] = 1
        else:
            mask[b, :k] = 1
    return ids, mask


def _first_layer(model, depth: int):
    """Layer 0 of the model's decoder: the first ModuleList of `depth` modules."""
    import torch

    for module in model.modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) == depth:
            return module[0]
    raise LookupError("no ModuleList of num_hidden_layers layers")


def _reference(model, ids, mask, lm: bool, depth: int):
    """(the input the spec takes, transformers' output): token ids and logits for a language
    model; for a stack, the hidden states entering layer 0 and the base model's last ones."""
    import torch

    t_ids, t_mask = torch.from_numpy(ids), torch.from_numpy(mask)
    with torch.no_grad():
        if lm:
            return ids, model(input_ids=t_ids, attention_mask=t_mask).logits.float().numpy()
        seen = {}
        def keep(module, args, kwargs) -> None:
            seen.setdefault("x", kwargs.get("hidden_states", args[0] if args else None))

        hook = _first_layer(model, depth).register_forward_pre_hook(keep, with_kwargs=True)
        try:
            out = model.base_model(input_ids=t_ids, attention_mask=t_mask).last_hidden_state
        finally:
            hook.remove()
        return seen["x"].float().numpy(), out.float().numpy()


def _compare(ours: np.ndarray, ref: np.ndarray, mask: np.ndarray) -> tuple[float, float]:
    real = mask.astype(bool)
    if ours.shape[-1] == ref.shape[-1] + 1:  # a checkpoint without eos: the stop column
        ours = ours[..., :-1]
    err = float(np.abs(ours[real] - ref[real]).max())
    return err, max(1.0, float(np.abs(ref[real]).max()))


def check(model_type: str, genai: bool = False) -> Row:
    """The coverage row of one model type (nothing downloads)."""
    import torch
    import transformers as tf

    warnings.filterwarnings("ignore")
    tf.logging.set_verbosity_error()
    tf.logging.disable_progress_bar()
    torch.manual_seed(0)
    try:
        config_class(model_type)
    except Exception as exc:
        return Row(model_type, "out of scope", f"no config class in transformers ({exc})")
    try:
        config = tiny_config(model_type)
    except Exception as exc:
        try:  # (a type out of scope by name needs no config: Gemma 4's assistant has none)
            why = OUT_OF_SCOPE.get(model_type) or _scope(model_type, config_class(model_type)())
        except Exception:  # no default config either
            why = None
        if why:
            return Row(model_type, "out of scope", why)
        return Row(model_type, "skipped", f"tiny config: {_crash(exc)}")
    why = _scope(model_type, config)
    if why:
        return Row(model_type, "out of scope", why)
    attention = ATTENTION.get(model_type, "eager")
    try:
        with torch.device("meta"):
            count = sum(p.numel() for p in tf.AutoModelForCausalLM.from_config(
                config, attn_implementation=attention).parameters())
        if count > MAX_PARAMETERS:
            return Row(model_type, "skipped", f"the tiny config still has {count:,} parameters")
        model = tf.AutoModelForCausalLM.from_config(config, dtype=torch.float32,
                                                    attn_implementation=attention).eval()
        redraw(model, 7)
    except Exception as exc:
        return Row(model_type, "skipped", f"transformers builds no model: {_crash(exc)}")
    with tempfile.TemporaryDirectory(prefix=f"coverage-{model_type}-") as tmp:
        folder = Path(tmp) / "hf"
        try:
            model.save_pretrained(folder)
        except Exception as exc:
            return Row(model_type, "skipped", f"save_pretrained: {_crash(exc)}")
        return _import_and_compare(model_type, model, config, folder, genai)


def _import(folder: Path, side: str):
    """(padding side, program) as `attndsl import --padding SIDE`; right padding where the
    family is an encoder or attndsl refuses left padding for it."""
    import attndsl
    from attndsl.errors import SpecError
    from attndsl.families import FAMILIES
    from attndsl.hf_import import import_config

    family = FAMILIES.get(json.loads((folder / "config.json").read_text()).get("model_type"))
    if family is not None and family.encoder:
        side = "right"
    try:
        return side, attndsl.loads(import_config(folder, side, "auto"), "coverage.attn")
    except SpecError as exc:
        if side == "left" and "padding" in str(exc):
            return "right", attndsl.loads(import_config(folder, "right", "auto"),
                                          "coverage.attn")
        raise


def _import_and_compare(model_type: str, model, config, folder: Path, genai: bool) -> Row:
    status, detail, program = _attempt(model_type, model, config, folder)
    if status == "refused" and "is not one attndsl imports" in detail:
        detail += _as_base(model_type, model, config, folder)
    row = Row(model_type, status, detail)
    if genai and status == "exact" and getattr(program[1].spec, "vocab", None) is not None:
        from coverage_genai import genai_row

        return genai_row(row, model, folder)
    return row


def _attempt(model_type: str, model, config, folder: Path):
    """(status, detail, (program, top layer) or None) of the checkpoint in `folder`."""
    import onnxruntime as ort

    from attndsl.errors import ExportError, SpecError, UsageError

    try:
        side, program = _import(folder, PADDING.get(model_type, "left"))
        layer = program[next(n for n in program if hasattr(program[n].spec, "layers"))]
        lm = getattr(layer.spec, "vocab", None) is not None
        data = layer.onnx_bytes(target="ort-cpu", weights=folder)
    except (SpecError, UsageError, ExportError) as exc:
        return "refused", _first_line(exc, folder), None
    except Exception as exc:
        return "crash", _crash(exc), None
    ids, mask = _ids(config.vocab_size if lm else getattr(config, "vocab_size", 97), side)
    try:
        x, ref = _reference(model, ids, mask, lm, layer.spec.layers)
    except Exception as exc:
        return "skipped", f"transformers' forward: {_crash(exc)}", None
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    try:
        session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
        names = {i.name for i in session.get_inputs()}
        # (multimodal RoPE's three streams: transformers' positions without position_ids,
        # 0 .. L-1 in each)
        B, L = mask.shape
        feed = {"input_ids" if lm else "x": x, "key_lengths": mask.sum(1).astype(np.int64),
                "position_ids": np.broadcast_to(np.arange(L), (3, B, L)).astype(np.int64)}
        ours = session.run(None, {k: v for k, v in feed.items() if k in names})[0]
    except Exception as exc:
        return "crash", f"ONNX Runtime: {_crash(exc)}", None
    err, scale = _compare(ours, ref, mask)
    what = "" if lm else "the stack alone (no LM head); "
    detail = f"{what}{side} padding; max error {err / scale:.0e} x max(1, max|ref|)"
    return ("exact" if err <= 1e-4 * scale else "WRONG"), detail, (program, layer)


def bases(model_type: str) -> list[str]:
    """The families attndsl imports that transformers builds `model_type` on: the model types
    its modular file imports from, in order (transformers' own statement of what it reuses)."""
    import transformers

    from attndsl.families import FAMILIES

    folder = Path(transformers.__file__).parent / "models" / model_type.replace("-", "_")
    found: list[str] = []
    for path in sorted(folder.glob("modular_*.py")):
        for name in re.findall(r"^from \.\.(\w+)\.", path.read_text(), re.MULTILINE):
            for known in (name, f"{name}_text"):
                if known in FAMILIES and known not in found and known != model_type:
                    found.append(known)
    return found


def _as_base(model_type: str, model, config, folder: Path) -> str:
    """What reading the checkpoint as a family attndsl imports that transformers builds it on
    gives (the first exact one, else the first refusal, which names a field or tensor that
    family lacks, else "differs"): what importing the type would take. Empty where
    transformers builds it on none."""
    cfg = json.loads((folder / "config.json").read_text())
    found = []
    for base in bases(model_type)[:3]:
        (folder / "config.json").write_text(json.dumps({**cfg, "model_type": base}))
        try:
            status, detail, _ = _attempt(model_type, model, config, folder)
        finally:
            (folder / "config.json").write_text(json.dumps(cfg))
        found.append((("exact", "refused").index(status) if status in ("exact", "refused")
                      else 2, base, status, detail.replace("<folder>: ", "")))
    if not found:
        return ""
    _, base, status, detail = min(found, key=lambda f: f[0])
    said = {"exact": f"exact ({detail})", "refused": f"refused: {detail}",
            "WRONG": "its logits differ"}.get(status, f"{status}: {detail}")
    return f"; read as `{base}` (transformers builds it on {base}): {said}"
