"""The onnxruntime-genai model folder (`--export genai`): genai_config.json, model.onnx and the
checkpoint's tokenizer files; and reading a decoding model back from such a folder or a file
(`attndsl generate`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .backends.exported import Exported
from .errors import UsageError
from .hf_fields import read_json
from .output import Stream
from .spec import Attention, Layer, Transformer, is_lm, reads_streams

__all__ = ["GENAI_CONFIG", "MODEL_FILE", "TOKENIZER_FILES", "check_genai", "folder_context",
           "genai_config", "genai_files", "genai_folder", "genai_model", "load_decoder",
           "stop_column", "token_ids", "token_note"]

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
    anything is built): a language model, each layer a key and a value cache of one shape."""
    if not isinstance(spec, Transformer):
        raise UsageError(f"`{spec.name}` is an attention: onnxruntime-genai runs language "
                         "models (a transformer with `vocab = N`)")
    if not is_lm(spec) or not spec.head:
        raise UsageError(f"`{spec.name}` has no vocabulary or no LM head: onnxruntime-genai "
                         "runs language models (`vocab = N`, and not `lm_head = false`)")
    if spec.cross is not None:  # (memory rows, an encoder's)
        raise UsageError(f"`{spec.name}` attends over memory rows (`cross`): onnxruntime-genai "
                         "0.18 loads no encoder-decoder but Whisper's: use --decode")
    from .mechanisms import projection_of  # (the forms build on the IR)

    unbound = next((a for a in spec.attentions
                    if getattr(projection_of(a.projection), "genai", None)), None)
    if unbound is not None:  # a projection form's own cache layout
        why = projection_of(unbound.projection).genai.format(name=unbound.name)
        raise UsageError(f"`{spec.name}`: onnxruntime-genai keeps a key and a value cache of one "
                         f"head size per layer, and {why}: use `--export onnx --decode` "
                         "and `attndsl generate`")
    # a recurrent kernel's layers carry a convolution window and a state, which
    # onnxruntime-genai's RecurrentState allocates from the model's own input shapes
    # (genai_config's past_conv_names, past_recurrent_names): only the key/value layers share
    # one size
    kinds = {_states(spec.layer_attention(i)) for i in range(spec.layers)} - {()}
    if len(kinds) > 1:
        raise UsageError(f"`{spec.name}`: onnxruntime-genai carries either recurrent states "
                         "(a window and a state per layer) or convolution windows alone, not "
                         "both in one model: use `--export onnx --decode` and `attndsl "
                         "generate`")
    lone = next((spec.layer_attention(i) for i in range(spec.layers)
                 if _states(spec.layer_attention(i)) == ("state",)), None)
    if lone is not None:  # (RecurrentState asks every recurrent layer for both)
        raise UsageError(f"`{spec.name}`: onnxruntime-genai's RecurrentState binds a "
                         "convolution window and a state per recurrent layer, and "
                         f"`{lone.name}` carries a state alone: use `--export onnx --decode` "
                         "and `attndsl generate`")
    from .ir import own_states

    own = [name for i in range(spec.layers) for name in own_states(spec, i)]
    if own:  # (states of a layer's own beside its keys and values: a convolution's inputs)
        raise UsageError(f"`{spec.name}`: onnxruntime-genai binds a key and a value cache, or a "
                         f"kernel's states, per layer; `{own[0]}` is a state beside a layer's "
                         "keys and values or states (a residual convolution's last inputs, a "
                         "`parallel` kernel's state, or a `side` block's keys and values): use "
                         "`--export onnx --decode` and `attndsl generate`")
    if spec.kv_shared_layers:  # (its last layers read an earlier layer's cache)
        raise UsageError(f"`{spec.name}`: onnxruntime-genai keeps a key and a value cache for "
                         f"every layer, and its last {spec.kv_shared_layers} layers reuse an "
                         "earlier layer's (`kv_shared_layers`): use `--export onnx --decode` and "
                         "`attndsl generate`")
    cached = _kv_attentions(spec)
    heads = {a.head_dim for a in cached} | {a.value_dim for a in cached}
    kv = {a.kv_heads for a in cached}
    q = {a.heads for a in cached}
    if len(heads) > 1 or len(kv) > 1 or len(q) > 1:
        raise UsageError(f"`{spec.name}`: onnxruntime-genai needs one head size and head count "
                         "in every layer with a key and a value cache")


def _kv_attentions(spec: Transformer) -> list[Attention]:
    """The attentions of `spec`'s layers that keep a key and a value cache (a kernel with
    `states` keeps those instead), in layer order."""
    used = dict.fromkeys(spec.layer_attention(i) for i in range(spec.layers))
    return [a for a in used if not _states(a)]


def _states(a: Attention) -> tuple[str, ...]:
    """The decoding states of `a`'s kernel in place of a key and a value cache, or ()."""
    from .mechanisms import kernel_fact

    return kernel_fact(a.kernel, "states")


# onnxruntime-genai's RecurrentState binds these per layer i whose kernel carries the states
# `conv` and `state` (its defaults are past_key_values.%d.conv_state / .recurrent_state;
# attndsl's decoding model keeps its own names, as `attndsl generate` and `--decode` use them,
# and the config names them instead)
_STATE_NAMES = {"inputs": {"past_conv_names": "past_key_values.%d.conv",
                           "past_recurrent_names": "past_key_values.%d.state"},
                "outputs": {"present_conv_names": "present.%d.conv",
                            "present_recurrent_names": "present.%d.state"}}


def genai_config(spec: Transformer, *, context_length: int, eos: Sequence[int] = (0,),
                 bos: int | None = None, pad: int = 0, filename: str = MODEL_FILE,
                 in_place: bool = False, vocab: int | None = None) -> dict:
    """onnxruntime-genai's genai_config.json for the decoding model of `spec` (checked against
    onnxruntime-genai 0.18). `in_place`: the runtime binds one max_length buffer per cache as
    both past and present (past_present_share_buffer true); else the cache grows. Either way
    sliding windows live in the model (GroupQueryAttention's local_window_size, or its masks)
    and the runtime keeps every key: no sliding_window section, which would make the runtime
    trim a cache the model still indexes. `vocab`: the logits' width (the spec's, or one more
    with a stop column, `stop_column`)."""
    check_genai(spec)  # so every key/value layer has the first one's head size and counts
    eos_ids = list(eos)
    # the key/value layers' sizes (with none, every layer recurrent, the runtime reads none)
    first = next(iter(_kv_attentions(spec)), spec.attention)
    recurrent = any(_states(spec.layer_attention(i)) for i in range(spec.layers))
    config = {
        "model": {
            "bos_token_id": bos if bos is not None else (eos_ids or [pad])[0],
            "context_length": context_length,
            "decoder": {
                "session_options": {"log_id": "onnxruntime-genai", "provider_options": []},
                "filename": filename,
                "head_size": first.head_dim,
                "hidden_size": spec.d_model,
                "inputs": {"input_ids": "input_ids", "attention_mask": "attention_mask",
                           "position_ids": "position_ids",
                           "past_key_names": "past_key_values.%d.key",
                           "past_value_names": "past_key_values.%d.value"},
                "outputs": {"logits": "logits", "present_key_names": "present.%d.key",
                            "present_value_names": "present.%d.value"},
                "num_attention_heads": first.heads,
                "num_hidden_layers": spec.layers,
                "num_key_value_heads": first.kv_heads,
            },
            "eos_token_id": eos_ids[0] if len(eos_ids) == 1 else eos_ids,
            "pad_token_id": pad,
            "type": "decoder",
            "vocab_size": vocab or spec.vocab,
        },
        "search": {
            "diversity_penalty": 0.0, "do_sample": False, "early_stopping": True,
            "length_penalty": 1.0, "max_length": context_length, "min_length": 0,
            "no_repeat_ngram_size": 0, "num_beams": 1, "num_return_sequences": 1,
            "past_present_share_buffer": in_place, "repetition_penalty": 1.0,
            "temperature": 1.0, "top_k": 1, "top_p": 1.0,
        },
    }
    if reads_streams(spec):  # position_ids [3, B, S]: a multimodal-RoPE text model's type
        config["model"].update(_multimodal_text(recurrent, vocab or spec.vocab))
    kinds = [_states(spec.layer_attention(i)) for i in range(spec.layers)]
    if ("conv",) in kinds:  # a convolution's window alone: onnxruntime-genai's
        # ConvKeyValueCache, which decoder.layer_types turns on (every layer not
        # full_attention carries past_conv_names' state, its shape the model input's)
        decoder = config["model"]["decoder"]
        decoder["layer_types"] = ["conv" if k else "full_attention" for k in kinds]
        decoder["inputs"]["past_conv_names"] = _STATE_NAMES["inputs"]["past_conv_names"]
        decoder["outputs"]["present_conv_names"] = _STATE_NAMES["outputs"]["present_conv_names"]
    elif recurrent:  # recurrent layers: their window and state, by attndsl's names
        for side, names in _STATE_NAMES.items():
            config["model"]["decoder"][side].update(names)
    return config


def _multimodal_text(recurrent: bool, vocab: int) -> dict:
    """The model section's entries for a model reading three position streams:
    onnxruntime-genai 0.18 passes position_ids [3, B, S] (a text token's three streams equal
    to its position) only to its multimodal text types (qwen2_5_vl_text, qwen3_vl_text,
    qwen3_5_text, qwen3_5_moe_text; `decoder` passes [B, S]); Qwen3.5's for recurrent layers,
    Qwen2.5-VL's else. Those types look for image and video tokens in the prompt, which a
    text-only model has none of: their ids are set past the vocabulary (the defaults, 0,
    are real token ids)."""
    return {"type": "qwen3_5_text" if recurrent else "qwen2_5_vl_text",
            "image_token_id": vocab, "video_token_id": vocab + 1,
            "vision_start_token_id": vocab + 2}


def genai_files(spec: Layer, model: Exported, *, in_place: bool, weights: str | None = None,
                context_length: int | None = None,
                eos: Sequence[int] | None = None) -> dict[str, bytes | Stream]:
    """The files of an onnxruntime-genai folder: genai_config.json, `model` (model.onnx, and
    model.onnx.data over 2 GB; `in_place`: its cache layout, `Layer.decoder_layout`) and the
    checkpoint's tokenizer files, those of TOKENIZER_FILES it has, so that
    `og.Tokenizer(model)` works. Token ids and the context length come from the arguments,
    else from the Hugging Face checkpoint `weights` names (`token_ids`; its
    max_position_embeddings), else 4096. Where the checkpoint names no eos, `model` is
    `genai_model`'s, with a stop column: onnxruntime-genai cannot run without an eos (it
    replaces an empty one by pad_token_id), so the folder's eos is a logits column no search
    ever picks."""
    if not isinstance(spec, Transformer):
        raise UsageError(f"`{spec.name}` is an attention: onnxruntime-genai runs language "
                         "models (a transformer with `vocab = N`)")
    ids = token_ids(spec, weights, eos)
    vocab, bos = spec.vocab, ids["bos"] if ids["bos"] is not None else (ids["eos"] or
                                                                         [ids["pad"]])[0]
    if not ids["eos"]:  # the model is `genai_model`'s: with its stop column
        vocab = spec.vocab + 1
    config = genai_config(
        spec, context_length=folder_context(weights, context_length),
        eos=ids["eos"] or [spec.vocab], bos=bos, pad=ids["pad"], in_place=in_place,
        vocab=vocab)
    text = json.dumps(config, indent=4, sort_keys=True) + "\n"
    return {GENAI_CONFIG: text.encode(), **model.streams(MODEL_FILE),
            **_tokenizer_files(weights)}


def genai_folder(layer: Any, *, target: str, weights: str | None = None, seed: int = 0,
                 dtype: str = "float32", quantize: Any = None, bounded: bool = False,
                 context_length: int | None = None,
                 eos: Sequence[int] | None = None) -> tuple[Exported, dict[str, bytes | Stream]]:
    """The onnxruntime-genai folder of a language model `layer` (`api.Layer`): its decoding
    model (as `genai_model` makes it; its `summary` once written) and the folder's files
    (`genai_files`), nothing written yet. The options are `compile --export genai`'s."""
    check_genai(layer.spec)  # before the model is built
    model = layer.decoder_model(target=target, seed=seed, weights=weights, dtype=dtype,
                                quantize=quantize, bounded=bounded,
                                max_length=folder_context(weights, context_length))
    model = genai_model(layer.spec, model, weights, eos)
    in_place = layer.decoder_layout(target=target, dtype=dtype) == "in_place"
    return model, genai_files(layer.spec, model, in_place=in_place, weights=weights,
                              context_length=context_length, eos=eos)


STOP_COLUMN = "attndsl.stop_column"  # the metadata naming a stop column's token id


def genai_model(spec: Transformer, model: Exported, weights: str | None,
                eos: Sequence[int] | None = None) -> Exported:
    """The decoding model as a genai folder holds it: with a stop column (`stop_column`)
    where the checkpoint names no eos, else as it is."""
    return model if token_ids(spec, weights, eos)["eos"] else stop_column(model)


def stop_column(model: Exported) -> Exported:
    """The decoding model with one more logits column, id V (the vocabulary's size), at the
    logits type's lowest value: greedy search never picks it and sampling gives it probability
    0 (exp(lowest - max) is 0), so the first V columns, and every token generated, are the
    model's. A folder whose checkpoint names no eos stops at V, that is never, as
    transformers' generate runs to its maximum length. Metadata `attndsl.stop_column` = V
    (`attndsl run` and `generate` take ids below V)."""
    import ml_dtypes
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    proto = model.model if model.model is not None else onnx.load_from_string(model.single)
    graph = proto.graph
    out = next(o for o in graph.output if o.name == "logits")
    kind = out.type.tensor_type.elem_type
    dims = out.type.tensor_type.shape.dim
    vocab = dims[-1].dim_value
    producer = next(n for n in graph.node if "logits" in n.output)
    producer.output[list(producer.output).index("logits")] = "logits_vocab"
    np_type = {TensorProto.BFLOAT16: ml_dtypes.bfloat16}.get(
        kind, helper.tensor_dtype_to_np_dtype(kind))
    lowest = float(ml_dtypes.finfo(np_type).min if np_type is ml_dtypes.bfloat16
                   else np.finfo(np_type).min)
    graph.node.extend([
        helper.make_node("Shape", ["logits_vocab"], ["stop_shape"], name="stop_shape", end=2),
        helper.make_node("Concat", ["stop_shape", "stop_one"], ["stop_dims"],
                         name="stop_dims", axis=0),
        helper.make_node("ConstantOfShape", ["stop_dims"], ["stop_logit"], name="stop_logit",
                         value=helper.make_tensor("stop_value", kind, [1], [lowest])),
        helper.make_node("Concat", ["logits_vocab", "stop_logit"], ["logits"],
                         name="stop_concat", axis=-1)])
    graph.initializer.append(helper.make_tensor("stop_one", TensorProto.INT64, [1], [1]))
    dims[-1].dim_value = vocab + 1
    proto.metadata_props.append(onnx.StringStringEntryProto(key=STOP_COLUMN, value=str(vocab)))
    return type(model)(proto, model.layer, model.deferred)


def token_ids(spec: Transformer, weights: str | None,
              eos: Sequence[int] | None = None) -> dict:
    """The token ids of a genai folder: {"eos": [...], "bos": int or None, "pad": int, "from":
    where eos came from}. eos: `eos` (--eos), else the checkpoint's config.json, else (null or
    absent there) its generation_config.json, which transformers' generate reads; where
    neither names one, none ([]): generation runs to its maximum length, as transformers'
    does. Without a checkpoint config, 0. UsageError for an id outside the vocabulary, which
    onnxruntime-genai refuses."""
    hf = _hf_config(weights)
    found, came = (list(eos), "--eos") if eos is not None else ([], "none")
    for name in ("config.json", "generation_config.json"):  # null, [] or [null]: none there
        if not found and eos is None:
            found = _ids(_hf_config(weights, name).get("eos_token_id"))
            came = name if found else came
    if not found and eos is None and not hf:  # no checkpoint config: 0
        found, came = [0], "default"
    ids = {"eos": found, "bos": hf.get("bos_token_id"), "pad": hf.get("pad_token_id") or 0,
           "from": came}
    for what in ("eos", "bos", "pad"):
        value = ids[what]
        for token in value if isinstance(value, list) else [value]:
            if isinstance(token, int) and not 0 <= token < spec.vocab:
                where = "--eos" if what == "eos" and came == "--eos" else \
                    f"{what}_token_id in {came if what == 'eos' else 'config.json'}"
                raise UsageError(f"{where}: token {token} is not in the vocabulary of "
                                 f"`{spec.name}` (0 to {spec.vocab - 1}); onnxruntime-genai "
                                 "refuses the folder: give the checkpoint's real token ids"
                                 + ("" if what != "eos" else " or pass --eos"))
    return ids


def _ids(value: object) -> list:
    """A config's eos_token_id as a list of ids (null entries dropped)."""
    return [v for v in (value if isinstance(value, list) else [value]) if v is not None]


def token_note(spec: Transformer, weights: str | None,
               eos: Sequence[int] | None = None) -> str:
    """What compile wrote for the token ids of a genai folder, for the terminal."""
    ids = token_ids(spec, weights, eos)
    tail = f"bos {ids['bos'] if ids['bos'] is not None else (ids['eos'] or [ids['pad']])[0]}, " \
           f"pad {ids['pad']}"
    came = {"default": "the default without a checkpoint config"}.get(ids["from"],
                                                                     f"from {ids['from']}")
    if ids["from"] != "none":
        return f"  tokens: eos {','.join(map(str, ids['eos']))} ({came}), {tail}"
    return (f"  tokens: no eos (the checkpoint's config.json and generation_config.json name "
            f"none): the folder's eos is a stop column, token {spec.vocab} (vocab_size "
            f"{spec.vocab + 1}), a logits column at the lowest float that no search picks, so "
            f"onnxruntime-genai and `attndsl generate` run to their maximum length, as "
            f"transformers' generate does (--eos names real stop tokens); {tail}")


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


def _hf_config(weights: str | None, name: str = "config.json") -> dict:
    """A Hugging Face checkpoint's config.json (text_config for Gemma 3), or its file `name`,
    or {}."""
    if weights is None:
        return {}
    path = Path(weights)
    folder = path if path.is_dir() else path.parent
    if not (folder / name).is_file():
        return {}
    cfg = read_json(folder / name, name)
    if not isinstance(cfg, dict):
        return {}
    if isinstance(cfg.get("text_config"), dict):
        cfg = {**cfg["text_config"], **{k: v for k, v in cfg.items() if k.endswith("token_id")}}
    return cfg

