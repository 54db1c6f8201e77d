"""The onnxruntime-genai model folder (`--export genai`): genai_config.json, model.onnx and the
checkpoint's tokenizer files; and reading a decoding model back from such a folder or a file
(`attndsl generate`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from .errors import UsageError
from .hf_fields import read_json
from .spec import DeltaRule, Layer, Transformer, is_lm

__all__ = ["GENAI_CONFIG", "MODEL_FILE", "TOKENIZER_FILES", "check_genai", "folder_context",
           "genai_config", "genai_files", "load_decoder"]

GENAI_CONFIG = "genai_config.json"
MODEL_FILE = "model.onnx"


def load_decoder(path: Path) -> tuple[Path, dict]:
    """(the model file, the genai config or {}) of a decoding .onnx or a genai folder."""
    if path.is_dir():
        config_file = path / GENAI_CONFIG
        if not config_file.is_file():
            raise UsageError(f"{path}: no {GENAI_CONFIG}; give a folder written by "
                             "`attndsl compile --export genai` or a decoding .onnx file")
        config = read_json(config_file, "genai config")
        try:
            model = path / config["model"]["decoder"]["filename"]
        except (KeyError, TypeError) as exc:
            raise UsageError(f"{config_file}: not a readable genai config ({exc})") from None
        if not model.is_file():
            raise UsageError(f"{model}: no such file (named by {config_file})")
        return model, config
    if not path.is_file():
        raise UsageError(f"{path}: no such file or folder")
    return path, {}


def check_genai(spec: Layer) -> None:
    """UsageError unless onnxruntime-genai can run the decoding model of `spec` (asked before
    anything is built): a language model whose layers each keep a key and a value cache of
    one head size and head count."""
    if not isinstance(spec, Transformer):
        raise UsageError(f"`{spec.name}` is an attention: onnxruntime-genai runs language "
                         "models (a transformer with `vocab = N`)")
    if not is_lm(spec):
        raise UsageError(f"`{spec.name}` has no vocabulary: onnxruntime-genai runs language "
                         "models (add `vocab = N` to the transformer)")
    latent = next((a for a in spec.attentions if a.latent is not None), None)
    if latent is not None:
        raise UsageError(f"`{spec.name}`: onnxruntime-genai keeps a key and a value cache of one "
                         f"head size per layer, and latent attention (`{latent.name}`) caches "
                         "one latent row per token, no values: use `--export onnx --decode` "
                         "and `attndsl generate`")
    delta = next((a for a in spec.attentions if isinstance(a.kernel, DeltaRule)), None)
    if delta is not None:
        raise UsageError(f"`{spec.name}`: onnxruntime-genai keeps a key and a value cache per "
                         f"layer, and the delta rule (`{delta.name}`) carries a state and a "
                         "convolution window: use `--export onnx --decode` and `attndsl "
                         "generate`")
    heads = {a.head_dim for a in spec.attentions} | {a.value_dim for a in spec.attentions}
    kv = {a.kv_heads for a in spec.attentions}
    q = {a.heads for a in spec.attentions}
    if len(heads) > 1 or len(kv) > 1 or len(q) > 1:
        raise UsageError(f"`{spec.name}`: onnxruntime-genai needs one head size and head count "
                         "in every layer")


def genai_config(spec: Transformer, *, context_length: int, eos: Sequence[int] = (),
                 bos: int | None = None, pad: int = 0, filename: str = MODEL_FILE,
                 in_place: bool = False) -> dict:
    """onnxruntime-genai's genai_config.json for the decoding model of `spec` (checked against
    onnxruntime-genai 0.18). `in_place`: the runtime binds one max_length buffer per cache as
    both past and present (past_present_share_buffer true); else the cache grows. Either way
    sliding windows live in the model (GroupQueryAttention's local_window_size, or its masks)
    and the runtime keeps every key: no sliding_window section, which would make the runtime
    trim a cache the model still indexes."""
    check_genai(spec)  # so every layer has the first one's head size and counts
    eos_ids = list(eos) or [0]
    return {
        "model": {
            "bos_token_id": bos if bos is not None else eos_ids[0],
            "context_length": context_length,
            "decoder": {
                "session_options": {"log_id": "onnxruntime-genai", "provider_options": []},
                "filename": filename,
                "head_size": spec.attention.head_dim,
                "hidden_size": spec.d_model,
                "inputs": {"input_ids": "input_ids", "attention_mask": "attention_mask",
                           "position_ids": "position_ids",
                           "past_key_names": "past_key_values.%d.key",
                           "past_value_names": "past_key_values.%d.value"},
                "outputs": {"logits": "logits", "present_key_names": "present.%d.key",
                            "present_value_names": "present.%d.value"},
                "num_attention_heads": spec.attention.heads,
                "num_hidden_layers": spec.layers,
                "num_key_value_heads": spec.attention.kv_heads,
            },
            "eos_token_id": eos_ids if len(eos_ids) > 1 else eos_ids[0],
            "pad_token_id": pad,
            "type": "decoder",
            "vocab_size": spec.vocab,
        },
        "search": {
            "diversity_penalty": 0.0, "do_sample": False, "early_stopping": True,
            "length_penalty": 1.0, "max_length": context_length, "min_length": 0,
            "no_repeat_ngram_size": 0, "num_beams": 1, "num_return_sequences": 1,
            "past_present_share_buffer": in_place, "repetition_penalty": 1.0,
            "temperature": 1.0, "top_k": 1, "top_p": 1.0,
        },
    }


def genai_files(spec: Layer, model: dict[str, bytes], *, in_place: bool,
                weights: str | None = None,
                context_length: int | None = None,
                eos: Sequence[int] | None = None) -> dict[str, bytes]:
    """The files of an onnxruntime-genai folder: genai_config.json, `model` (model.onnx, and
    model.onnx.data over 2 GB; `in_place`: its cache layout, `Layer.decoder_layout`) and the
    checkpoint's tokenizer files, those of TOKENIZER_FILES it has, so that
    `og.Tokenizer(model)` works. Token ids and the context length come from the arguments,
    else from the Hugging Face checkpoint `weights` names (its config.json: eos_token_id,
    bos_token_id, pad_token_id, max_position_embeddings), else eos 0 and 4096."""
    if not isinstance(spec, Transformer):
        raise UsageError(f"`{spec.name}` is an attention: onnxruntime-genai runs language "
                         "models (a transformer with `vocab = N`)")
    hf = _hf_config(weights)
    found = hf.get("eos_token_id")
    hf_eos = found if isinstance(found, list) else [] if found is None else [found]
    ids = {"eos": list(eos) if eos is not None else hf_eos, "bos": hf.get("bos_token_id"),
           "pad": hf.get("pad_token_id") or 0}
    for what, value in ids.items():
        for token in value if isinstance(value, list) else [value]:
            if isinstance(token, int) and not 0 <= token < spec.vocab:
                came = "--eos" if what == "eos" and eos is not None else \
                    f"{what}_token_id in config.json"
                raise UsageError(f"{came}: token {token} is not in the vocabulary of `{spec.name}`"
                                 f" (0 to {spec.vocab - 1}); onnxruntime-genai refuses the "
                                 "folder: give the checkpoint's real token ids"
                                 + ("" if what != "eos" else " or pass --eos"))
    config = genai_config(
        spec, context_length=folder_context(weights, context_length),
        eos=ids["eos"], bos=ids["bos"], pad=ids["pad"], in_place=in_place)
    text = json.dumps(config, indent=4, sort_keys=True) + "\n"
    return {GENAI_CONFIG: text.encode(), **model, **_tokenizer_files(weights)}


# What a Hugging Face tokenizer is saved as (fast: tokenizer.json; BPE: vocab.json, merges.txt;
# SentencePiece: tokenizer.model; WordPiece: vocab.txt) and the settings beside it, all of
# which onnxruntime-genai's Tokenizer (onnxruntime-extensions) reads from the model folder
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "added_tokens.json", "vocab.json", "merges.txt", "tokenizer.model",
                   "vocab.txt", "chat_template.jinja", "chat_template.json")


def _tokenizer_files(weights: str | None) -> dict[str, bytes]:
    """The tokenizer files of the checkpoint folder `weights` names (those it has)."""
    if weights is None:
        return {}
    path = Path(weights)
    folder = path if path.is_dir() else path.parent
    files = {}
    for name in TOKENIZER_FILES:
        try:
            files[name] = (folder / name).read_bytes()
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise UsageError(f"{folder / name}: cannot read: {exc.strerror or exc}") from None
    return files


def folder_context(weights: str | None, given: int | None = None) -> int:
    """A folder's context length: `given` (--context-length), else the checkpoint's
    max_position_embeddings, else 4096."""
    return given or _hf_config(weights).get("max_position_embeddings") or 4096


def _hf_config(weights: str | None) -> dict:
    """A Hugging Face checkpoint's config.json (text_config for Gemma 3), or {}."""
    if weights is None:
        return {}
    path = Path(weights)
    folder = path if path.is_dir() else path.parent
    if not (folder / "config.json").is_file():
        return {}
    cfg = read_json(folder / "config.json", "config.json")
    if not isinstance(cfg, dict):
        return {}
    if isinstance(cfg.get("text_config"), dict):
        cfg = {**cfg["text_config"], **{k: v for k, v in cfg.items() if k.endswith("token_id")}}
    return cfg

