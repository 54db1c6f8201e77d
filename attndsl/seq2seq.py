"""Encoder-decoder models (a decoder stack with `encoder = e`, docs/LANGUAGE.md, Transformer):
the encoder as a layer of its own (`Seq2Seq.encoder`: source token ids in, the memory out,
its weights the model's `encoder.*` and its shared `embed_tokens.weight`), and greedy generation
(`generate_seq2seq`: the encoder once over right-padded sources, then the decoding decoder
from the start token, the memory fed on its first call)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .errors import UsageError
from .spec import encoder_of

__all__ = ["Seq2Seq", "check_model", "encoder_weights", "generate_files", "generate_model",
           "generate_seq2seq"]

PREFIX = "encoder."  # the encoder's tensors among its model's


def encoder_weights(model: Mapping[str, Any], tokens: bool = True) -> Mapping[str, Any]:
    """The encoder's tensors by its own names, from its model's (`encoder.*`, and with
    `tokens` the model's token embedding, which the encoder shares), each read when asked for
    (`weights.Weights`)."""
    from .weights import Weights

    names = {name[len(PREFIX):]: name for name in model if name.startswith(PREFIX)}
    if tokens:
        names["embed_tokens.weight"] = "embed_tokens.weight"
    shape = model.shape if isinstance(model, Weights) else lambda n: tuple(np.shape(model[n]))
    return Weights({ours: lambda theirs=theirs: model[theirs] for ours, theirs in names.items()},
                   {ours: shape(theirs) for ours, theirs in names.items()})


class Seq2Seq:
    """What `api.Layer` holds for encoder-decoder models: its encoder as a layer of its own
    (`encoder`; such a layer's `model` is the model whose weights it reads, through
    `encoder_weights`), and generation from source ids (`generate`)."""

    model: Any = None  # an encoder's model (api.Layer)

    def encoder(self):
        """An encoder-decoder model's encoder as a layer of its own (`spec.encoder_of`):
        source token ids (and key_lengths) in, the memory its decoder reads out; its
        exports, torch module and verification read the model's weights."""
        check_model(self)
        layer = type(self)(encoder_of(self.spec), self.source)
        layer.model = self
        return layer

    def generate(self, prompt_ids: Any, max_new: int = 32, **options: Any):
        """Greedy new tokens of this language model for prompts of token ids, in ONNX
        Runtime (`decoding.generate_layer`: its options); of an encoder-decoder model, for
        source token ids (`generate_model`) -> decoding.Generation."""
        if getattr(self.spec, "encoder", None) is not None:
            return generate_model(self, prompt_ids, max_new, **options)
        from .decoding import generate_layer

        return generate_layer(self, prompt_ids, max_new, **options)


def generate_seq2seq(encoder, decoder, sources: Any, max_new: int, start: int, *,
                     eos: Sequence[int] = (), pad: int = 0):
    """Greedy target tokens for source token ids: the encoder's ONNX Runtime session over
    the sources right-padded (key_lengths their lengths, where it reads them), or over
    hidden states [B, S, d] as they are (an encoder that reads `x`), then the decoding
    decoder's (`decoding.generate`) from `start` for every row, the memory and its lengths
    (memory_lengths) on its first call -> decoding.Generation (new tokens only)."""
    from .decoding import generate, padded

    names = {i.name for i in encoder.get_inputs()}
    if "x" not in names and "key_lengths" not in names and len({len(s) for s in sources}) > 1:
        raise UsageError("the encoder's masks hide no padding (no `padding`): sources of "
                         "different lengths in one batch would attend its padding; generate "
                         "them one at a time, or add `padding` to the encoder's mask")
    if "x" in names:  # (Whisper's: its stem's output)
        states = np.asarray(sources, np.float32)
        lengths = np.full(len(states), states.shape[1], np.int64)
        memory = encoder.run(None, {"x": states, **({"key_lengths": lengths}
                                                    if "key_lengths" in names else {})})[0]
    else:
        ids, mask = padded(sources, pad, side="right")
        lengths = mask.sum(-1).astype(np.int64)
        memory = encoder.run(None, {"input_ids": ids, **(
            {"key_lengths": lengths} if "key_lengths" in names else {})})[0]
    decoding = {i.name for i in decoder.get_inputs()}
    feed = {"memory": memory, **({"memory_lengths": lengths}
                                 if "memory_lengths" in decoding else {})}
    return generate(decoder, [[start]] * len(sources), max_new, eos=eos, pad=pad,
                    memory=feed)


def generate_model(layer, source_ids: Any, max_new: int = 32, *,
                   eos: Sequence[int] = (), weights=None, seed: int = 0,
                   target: str | None = None, dtype: str = "float32", provider: str = "cpu"):
    """`Layer.generate` of an encoder-decoder model: its encoder and decoding decoder built
    in memory (from `weights` or `seed`, for `target`, default ort-cpu), then
    `generate_seq2seq` from its `decoder_start`."""
    from .backends import runtime
    from .decoding import padded
    from .targets import DEFAULT_TARGET
    from .usage import check_token_ids

    if layer.spec.encoder_input == "states":  # hidden states [B, S, d] (or [S, d])
        source_ids = np.asarray(source_ids, np.float32)
        source_ids = source_ids[None] if source_ids.ndim == 2 else source_ids
        d = layer.spec.encoder.d_model
        if source_ids.ndim != 3 or source_ids.shape[-1] != d or 0 in source_ids.shape:
            raise UsageError(f"`{layer.name}`'s encoder reads hidden states [batch, length, "
                             f"{d}]; found an array of shape {list(source_ids.shape)}")
    else:
        if len(source_ids) and np.ndim(source_ids[0]) == 0:  # one source, not a batch
            source_ids = [source_ids]
        padded(source_ids)  # UsageError for no source or an empty one: before the build
        check_token_ids(source_ids, layer.spec.encoder.vocab or layer.spec.vocab, "the sources")
    runtime.require(provider)
    options = dict(target=target or DEFAULT_TARGET, seed=seed, weights=weights, dtype=dtype)
    encoder = runtime.make_session(layer.encoder().onnx_model(**options), provider)
    decoder = runtime.make_session(layer.decoder_model(**options), provider)
    return generate_seq2seq(encoder, decoder, source_ids, max_new, layer.spec.decoder_start,
                            eos=eos)


def check_model(layer) -> None:
    """UsageError unless `layer` is an encoder-decoder model."""
    spec = layer.spec
    if getattr(spec, "encoder", None) is None:
        raise UsageError(f"`{layer.name}` is not an encoder-decoder model (a decoder stack "
                         "with `encoder = ...`)")


def generate_files(decoder, path: Path, encoder_file: str | None,
                   sources: Sequence[Sequence[int]], max_new: int, eos: Sequence[int],
                   provider: str):
    """`attndsl generate` of an encoder-decoder's decoding decoder (the session `decoder`,
    read from `path`): its encoder from `encoder_file`, else <layer>.encoder.onnx beside it;
    its start token from the spec its metadata holds."""
    from .backends import runtime
    from .run import spec_of

    spec = spec_of(decoder)
    if spec is None:
        raise UsageError(f"{path}: a decoder over memory rows that attndsl did not write: "
                         "generate does not know its encoder or start token")
    layer = spec.name
    if getattr(spec, "encoder", None) is None:
        raise UsageError(f"{path}: `{layer}` attends over memory rows but has no `encoder`: "
                         "generate feeds token ids, and its memory has no source\n  = help: "
                         "run its steps through ONNX Runtime, `memory` on the first call "
                         "(docs/LANGUAGE.md, Decoding), or give the stack `encoder = ...`")
    found = Path(encoder_file) if encoder_file else path.with_name(f"{layer}.encoder.onnx")
    if not found.is_file():
        raise UsageError(f"{found}: no such file (the encoder of `{layer}`)\n  = help: "
                         f"compile it with `attndsl compile SPEC --name {layer} --export onnx`, "
                         "or give it with --encoder")
    encoder = runtime.make_session(found, provider)
    if any(i.name == "x" for i in encoder.get_inputs()):
        raise UsageError(f"{found}: this encoder reads hidden states (`encoder_input = "
                         "states`), not token ids: generate with the Python API, "
                         "`layer.generate(states)`")
    if encoder.get_modelmeta().custom_metadata_map.get("attndsl.form") != "encoder":
        raise UsageError(f"{found}: not an encoder attndsl wrote (its metadata says no "
                         "`attndsl.form = encoder`)")
    return generate_seq2seq(encoder, decoder, sources, max_new,
                            getattr(spec, "decoder_start", 0), eos=eos)
