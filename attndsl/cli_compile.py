"""`attndsl compile`: a spec's layers as ONNX files, torch.export programs, Triton model
repositories or onnxruntime-genai folders, built first and written all at once (a failure
anywhere leaves no file and no new folder behind)."""

from __future__ import annotations

import argparse
import hashlib
import sys
from collections.abc import Callable
from pathlib import Path

from .api import Layer
from .arguments import compile_options
from .errors import UsageError
from .output import Outputs
from .progress import report
from .spec import is_lm, top_layers
from .targets import check_dtype_target

__all__ = ["compile_command"]


def compile_command(args: argparse.Namespace, layers_of: Callable[[], list[Layer]]) -> int:
    """`attndsl compile`: the options checked before anything is built, then `layers_of()`
    (the file's layers, or the one --name names) built and written all at once."""
    target, quantize = compile_options(args)  # checked before anything is built
    layers = layers_of()
    if args.export == "genai" and args.name is None:  # the file's language models
        layers = [la for la in layers if is_lm(la.spec) and la.spec.head]
        if not layers:
            raise UsageError(f"{args.file} has no language model (a transformer with `vocab "
                             "= N` and its LM head) for onnxruntime-genai")
    if args.weights and len(layers) > 1:  # the weights are the file's top layer's
        top = top_layers({la.name: la.spec for la in layers})
        tops = [la for la in layers if la.name in top]
        if len(tops) != 1:
            raise UsageError(f"{args.file} has {len(tops)} layers that no other layer uses "
                             f"({', '.join(la.name for la in tops)}); name the one --weights is "
                             "for with --name")
        parts = [la.name for la in layers if la is not tops[0]]  # its attentions: say so
        print(f"note: --weights holds the weights of {tops[0].name}, the layer no other uses: "
              f"compiling it alone, not its part{'s' * (len(parts) > 1)} {', '.join(parts)} "
              "(--name compiles a part; from a checkpoint folder, layer 0's)", file=sys.stderr)
        layers = tops
    if args.export != "torch":  # before anything is created
        check_dtype_target(args.dtype, target)
    out_dir = Path(args.output)
    if out_dir.exists() and not out_dir.is_dir():  # before the slow part
        raise UsageError(f"{out_dir}: exists and is not a folder")
    # Build everything first, then write it all at once: a failure anywhere leaves no file and
    # no new folder behind, and keeps what an earlier compile wrote.
    outputs = Outputs()
    written: list[str | Callable[[], str]] = []
    for i, layer in enumerate(layers):
        report(f"compiling {layer.name}", i, len(layers))
        if args.export == "torch":  # (an encoder-decoder's encoder beside its decoder)
            encoder = [layer.encoder()] if getattr(layer.spec, "encoder", None) else []
            for part in (layer, *encoder):
                data = part.torch_program_bytes(seed=args.seed, weights=args.weights,
                                                dtype=args.dtype)
                path = out_dir / f"{part.name}.pt2"
                outputs.file(path, data)
                written.append(f"wrote {path} ({len(data) / 1e6:.1f} MB, sha256 "
                               f"{hashlib.sha256(data).hexdigest()[:12]}...)")
            continue
        if args.export == "genai":
            from .genai import genai_folder, token_note

            path = out_dir / layer.name
            model, files = genai_folder(layer, target=target, seed=args.seed,
                                        weights=args.weights, dtype=args.dtype,
                                        quantize=quantize, bounded=args.bounded_cache,
                                        context_length=args.context_length, eos=args.eos)
            outputs.tree(path, files)
            what = model.summary  # said once written: a streamed file is hashed as written
            written.append(lambda path=path, what=what:
                           f"wrote {path}/genai_config.json and {path}/model.onnx {what()}")
            written.append(token_note(layer.spec, args.weights, args.eos))  # what eos it got
            del model
            continue
        model = (layer.decoder_model if args.decode else layer.onnx_model)(
            target=target, seed=args.seed, weights=args.weights, dtype=args.dtype,
            quantize=quantize, **({"bounded": args.bounded_cache,
                                   "max_length": args.context_length} if args.decode else {}))
        what = model.summary  # said once written: a streamed file is hashed as it is written
        if args.export == "triton":
            from .triton import repository_files

            name = f"{layer.name}_decode" if args.decode else layer.name  # both in one repository
            path = out_dir / name
            outputs.tree(path, repository_files(name, model.streams("model.onnx")))
            written.append(lambda path=path, what=what:
                           f"wrote {path}/config.pbtxt and {path}/1/model.onnx {what()}")
        else:  # the decoding form beside the one-pass form of the same layer, not over it
            path = out_dir / f"{layer.name}{'.decode.onnx' if args.decode else '.onnx'}"
            for name, data in model.streams(path.name).items():
                outputs.file(path.with_name(name), data)
            written.append(lambda path=path, what=what: f"wrote {path} {what()}")
            if getattr(layer.spec, "encoder", None) is not None:  # an encoder-decoder's too
                encoder = layer.encoder().onnx_model(target=target, seed=args.seed,
                                                     weights=args.weights, dtype=args.dtype,
                                                     quantize=quantize)
                path = out_dir / f"{layer.name}.encoder.onnx"
                for name, data in encoder.streams(path.name).items():
                    outputs.file(path.with_name(name), data)
                written.append(lambda path=path, what=encoder.summary: f"wrote {path} {what()}")
        del model
    outputs.commit()
    print("\n".join(line if isinstance(line, str) else line() for line in written))
    return 0
