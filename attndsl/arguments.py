"""The command line's grammar: every subcommand, its options and their types (numbers are
range-checked here, so a bad value is a usage error, exit 2, before any work)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from . import __version__
from .api import DEFAULT_OUTPUT_DIR
from .cli_parser import Parser, did_you_mean
from .dtypes import DTYPES
from .errors import UsageError
from .show import MAX_SHOW_LENGTH
from .spec import MAX_LENGTH
from .targets import (
    CPU_TARGET,
    CUDA_TARGET,
    DEFAULT_TARGET,
    PORTABLE_TARGET,
    TARGETS,
    TORCH_PLAN,
    TRITON_TARGET,
    get,
    names,
)
from .usage import HEADS, PADDINGS

__all__ = ["MAX_VERIFY_LENGTH", "build_parser", "compile_options", "quantization"]


def _allow_unused(parser: argparse.ArgumentParser, parsed: argparse.Namespace) -> None:
    """--allow-unused-weights goes with --weights, and the weights say it to their reader."""
    if getattr(parsed, "allow_unused_weights", False):
        if not parsed.weights:
            parser.error("--allow-unused-weights goes with --weights")
        from .checkpoints import allow_unused_weights

        parsed.weights = allow_unused_weights(
            parsed.weights, lambda message: print(f"warning: {message}", file=sys.stderr))


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="attndsl", description="Declarative attention layers for ONNX Runtime.")
    p.finish = _allow_unused
    p.add_argument("--version", action="version", version=f"attndsl {__version__}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=Parser)

    c = sub.add_parser("check", help="check spec files; print diagnostics")
    c.add_argument("files", nargs="+", metavar="FILE",
                   help=".attn spec files; each is checked on its own (exit 2 if any fails)")

    f = sub.add_parser("fmt", help="format spec files canonically (in place)")
    f.add_argument("files", nargs="+", metavar="FILE",
                   help=".attn spec files, each rewritten in place unless --check or --diff")
    f.add_argument("--check", action="store_true", help="exit 1 if a file is not formatted")
    f.add_argument("--diff", action="store_true", help="print a diff instead of writing")
    k = sub.add_parser("compile", help="export layers to ONNX or a torch.export program")
    k.add_argument("file", help="the .attn spec file")
    k.add_argument("--name", help="the layer to compile (default: every layer in the file)")
    k.add_argument("-q", "--quiet", action="store_true", help="no progress bar on stderr")
    k.add_argument("--export", required=True, choices=("onnx", "torch", "triton", "genai"),
                   help="triton: a model repository DIR/<layer>/{config.pbtxt,1/model.onnx}; "
                        "genai: an onnxruntime-genai folder DIR/<layer>/{genai_config.json,"
                        "model.onnx} (a decoding language model)")
    k.add_argument("--decode", action="store_true",
                   help="with --export onnx or triton: the decoding form (KV caches in and "
                        "out, docs/LANGUAGE.md, Decoding); triton: DIR/<layer>_decode/")
    k.add_argument("--bounded-cache", action="store_true",
                   help="with --decode: a window's (or chunk's) layer keeps only the keys later "
                        "queries can see, so its cache stops growing (standard ops)")
    k.add_argument("--context-length", type=_LENGTH, default=None,
                   help="genai (and --decode): the longest sequence a model holds: its "
                        "rotary tables are folded for it, longer calls refused (genai default: "
                        "the checkpoint's max_position_embeddings, else 4096; --decode: none)")
    k.add_argument("--eos", type=_ints(0, 1 << 24), default=None,
                   help="genai: end-of-sequence token ids (default: the checkpoint's "
                        "config.json, else its generation_config.json, else none; 0 without "
                        "a checkpoint)")
    k.add_argument("-o", "--output", default=str(DEFAULT_OUTPUT_DIR), metavar="DIR",
                   help="output folder (default: exported/)")
    k.add_argument("--target", default=None, choices=TARGETS,
                   help=f"default {DEFAULT_TARGET} ({TRITON_TARGET} for triton); "
                        f"{PORTABLE_TARGET} = dense standard ops only")
    k.add_argument("--dtype", default="float32", choices=DTYPES,
                   help="weights, inputs and outputs (softmax is float32); bfloat16 needs "
                        f"--target {CUDA_TARGET} or {PORTABLE_TARGET}")
    k.add_argument("--seed", type=_SEED, default=None,
                   help="draws the weights when there is no --weights (default 0)")
    k.add_argument("--weights", help=".safetensors file or torch state dict, tensors named as in "
                                      "docs/LANGUAGE.md (Weights); or a Hugging Face checkpoint "
                                      "folder (docs/CHECKPOINTS.md)")
    k.add_argument("--allow-unused-weights", action="store_true",
                   help="with --weights: leave out (with a warning naming them) tensors the "
                        "spec does not use, which are refused otherwise")
    _quantize_options(k)

    im = sub.add_parser("import", help="write the spec of a Hugging Face model's config.json")
    im.add_argument("source", help="a checkpoint folder or its config.json")
    im.add_argument("-o", "--output", metavar="FILE", help="the .attn file (default: stdout)")
    im.add_argument("--padding", default="auto", choices=PADDINGS,
                    help="key padding mask (runtime input key_lengths); auto: right for "
                         "encoders (bert, t5), none for decoders")
    im.add_argument("--head", default="auto", choices=HEADS,
                    help="lm: token embedding and LM head too (a language model that "
                         "generates); none: the stack alone; auto: lm where attndsl can")

    v = sub.add_parser("verify", help="compare reference, torch and ONNX Runtime")
    v.add_argument("file", help="the .attn spec file")
    v.add_argument("--name", help="the layer to verify (default: every layer)")
    v.add_argument("--lengths", type=_ints(1, MAX_VERIFY_LENGTH), default=(),
                   help="the lengths to check, comma-separated, instead of those chosen from "
                        "the spec (default: 1, primes, the first prime past every window, "
                        "chunk and block, and both sides of every by_length threshold n: n and "
                        "n+1; each printed with its reason)")
    v.add_argument("--batches", type=_ints(1, 64), default=(1, 3), help="default 1,3")
    v.add_argument("--providers", type=_word_list, default=("cpu",), help="cpu,cuda")
    v.add_argument("--targets", "--target", type=_targets, default=None,
                   help="comma-separated, default all: " + ",".join(TARGETS) + " (on the CUDA "
                        f"provider: {names(provider='cuda', sep=',')})")
    v.add_argument("--seed", type=_SEED, default=0,
                   help="draws the inputs, and the weights when there is no --weights (default 0)")
    v.add_argument("--weights", help="as compile's --weights: the layer's weights (default: "
                                      "drawn from --seed)")
    v.add_argument("--allow-unused-weights", action="store_true",
                   help="with --weights: leave out (with a warning naming them) tensors the "
                        "spec does not use, which are refused otherwise")
    v.add_argument("--dtype", default="float32", choices=DTYPES,
                   help="tolerance 1e-4 (float32) or 2e-2 (float16, bfloat16) x max(1, |ref|)")
    _quantize_options(v)
    v.add_argument("--json", action="store_true", help="machine-readable report on stdout")
    v.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    v.add_argument("--save-inputs", metavar="P.json",
                   help="the random inputs, in Polygraphy's JSON format (one per shape)")
    v.add_argument("--save-outputs", metavar="P.json",
                   help="every backend's outputs as Polygraphy RunResults")

    bn = sub.add_parser("bench", help="latency, peak memory and FLOP/s per backend; "
                                      "generation speed with --decode")
    bn.add_argument("file", help="a spec; with --decode, a Hugging Face checkpoint folder")
    bn.add_argument("--decode", action="store_true",
                    help="generation: first-token latency and ms/token of attndsl's decoding "
                         "model against onnxruntime-genai's builder and transformers")
    bn.add_argument("--prompts", type=_ints(1, MAX_LENGTH), default=(128, 2048),
                    help="--decode: prompt lengths (default 128,2048)")
    bn.add_argument("--new", type=_count(2, 4096), default=64,
                    help="--decode: new tokens per generation (default 64)")
    bn.add_argument("--threads", type=_count(1, 256), default=2,
                    help="--decode: intra-op threads of every backend (default 2)")
    bn.add_argument("--baselines", type=_word_list, default=("genai", "transformers"),
                    help="--decode: genai,transformers (those installed run)")
    bn.add_argument("--precisions", type=_word_list, default=("fp32",),
                    help="--decode: fp32,int8,int4: attndsl's model (--quantize) and the "
                         "builder's at each (default fp32)")
    bn.add_argument("--name", help="the layer to measure (default: every layer in the file)")
    bn.add_argument("--lengths", type=_ints(1, MAX_LENGTH), default=(1024, 4096, 8192),
                    help="sequence lengths L, comma-separated (default 1024,4096,8192)")
    bn.add_argument("--batch", type=_BATCH, default=1, help="batch size B (default 1)")
    bn.add_argument("--targets", "--target", type=_targets, default=_BENCH_TARGETS,
                    help="comma-separated, of " + ",".join(TARGETS) + " (default "
                         + ",".join(_BENCH_TARGETS) + ": the dense baseline and the default "
                         "plan); the torch modules always run")
    bn.add_argument("--providers", type=_word_list, default=("cpu",),
                    help="ONNX Runtime providers, cpu,cuda (default cpu)")
    bn.add_argument("--dtype", default="float32", choices=DTYPES,
                    help="weights, inputs and outputs (default float32)")
    bn.add_argument("--repeat", type=_count(1, 10_000), default=None,
                    help="timed runs after a warm-up (default 5, at least 5; --decode: "
                         "generations per backend, default 3)")
    bn.add_argument("--json", action="store_true", help="machine-readable rows on stdout")
    bn.add_argument("--markdown", action="store_true", help="a Markdown table with the machine")
    bn.add_argument("--plot", metavar="P.svg|P.png", help="latency against length, log-log "
                    "(.svg: labelled axes and legend; .png: the lines, colours printed)")
    bn.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")

    sub.add_parser("lsp", help="the language server for editors, over stdin/stdout "
                   "(needs attndsl[editor])")

    sh = sub.add_parser("show", help="draw a layer's mask (terminal grid, PNG)")
    sh.add_argument("file", help="the .attn spec file")
    sh.add_argument("--name", help="the layer to draw (default: every layer in the file)")
    sh.add_argument("--length", type=_SHOW_LENGTH, default=None,
                    help=f"queries (rows), 1 to {MAX_SHOW_LENGTH} (default: the first prime past "
                         "the mask's longest window, chunk or span, as verify picks, else 24)")
    sh.add_argument("--memory-length", type=_SHOW_LENGTH, default=None,
                    help="keys for cross attention")
    sh.add_argument("--png", help="also write a PNG: one panel per head where biases differ")
    sh.add_argument("--svg", help="also write an SVG: the PNG's panels with axes (query / key "
                    "index), a legend and, for biases, a colour bar")

    e = sub.add_parser("explain", help="print the graph IR and the planner's choices")
    e.add_argument("file", help="the .attn spec file")
    e.add_argument("--name", help="the layer to explain (default: every layer in the file)")
    e.add_argument("--target", default=DEFAULT_TARGET, choices=(*TARGETS, TORCH_PLAN),
                   help="torch: how the torch module (to_torch) runs each attention")
    e.add_argument("--dtype", default="float32", choices=DTYPES,
                   help=f"the plan depends on it on {CUDA_TARGET}")
    e.add_argument("--decode", action="store_true",
                   help="the decoding form (KV caches) and its cache layout")
    e.add_argument("--bounded-cache", action="store_true",
                   help="with --decode: windows keep only the keys later queries can see")
    e.add_argument("--context-length", type=_LENGTH, default=None,
                   help="with --decode: the longest sequence, as compile's (GroupQueryAttention's "
                        "rotary tables folded for it)")
    _quantize_options(e)

    g = sub.add_parser("generate", help="greedy decoding with ONNX Runtime from token ids")
    g.add_argument("model", help="a decoding .onnx (compile --decode) or a genai folder")
    g.add_argument("--prompt-ids", type=_ints(0, 1 << 24), action="append", required=True,
                   help="comma-separated token ids; repeat for a batch (left-padded); an "
                        "encoder-decoder's source ids")
    g.add_argument("--encoder", default=None,
                   help="an encoder-decoder's encoder .onnx (default: <layer>.encoder.onnx "
                        "beside the model)")
    g.add_argument("--max-new", type=_count(1, MAX_LENGTH), default=32,
                   help="new tokens per prompt (default 32)")
    g.add_argument("--provider", default="cpu", choices=("cpu", "cuda"),
                   help="ONNX Runtime's execution provider (default cpu)")
    g.add_argument("--eos", type=_ints(0, 1 << 24), default=None,
                   help="stop tokens (default: the genai folder's eos_token_id; none for a "
                        "file, or where the folder's is [])")
    g.add_argument("--json", action="store_true", help="tokens and timings as JSON")
    g.add_argument("-q", "--quiet", action="store_true", help="no progress bar on stderr")

    cp = sub.add_parser("check-placement",
                        help="which nodes of ONNX models a provider has no kernel for")
    cp.add_argument("models", nargs="+", metavar="MODEL", help=".onnx files (any tool's)")
    cp.add_argument("--provider", default="cuda", choices=("cpu", "cuda"),
                    help="ONNX Runtime's execution provider (default cuda)")
    cp.add_argument("--json", action="store_true", help="the findings as JSON")

    r = sub.add_parser("run", help="run an exported .onnx model in ONNX Runtime")
    r.add_argument("model", help="an exported .onnx model")
    r.add_argument("--inputs", help=".npz with arrays named as the model's inputs")
    r.add_argument("--provider", default="cpu", choices=("cpu", "cuda"),
                   help="ONNX Runtime's execution provider (default cpu)")
    r.add_argument("--batch", type=_BATCH, default=1,
                   help="B of the random inputs, without --inputs (default 1)")
    r.add_argument("--length", type=_LENGTH, default=16,
                   help="L of the random inputs, without --inputs (default 16)")
    r.add_argument("--memory-length", type=_LENGTH, default=None, help="S (default: --length)")
    r.add_argument("--seed", type=_SEED, default=0, help="seed for random inputs")
    r.add_argument("--output", help="write the outputs to this .npz")
    return p


def _quantize_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quantize", choices=("int4", "int8"), default=None,
                   help="weights of every projection, MLP and the LM head as MatMulNBits "
                        "blocks, the token embedding as GatherBlockQuantized "
                        f"(docs/QUANTIZATION.md; {CPU_TARGET}, {CUDA_TARGET})")
    # None, not the default, so that one given without --quantize is refused, not ignored
    p.add_argument("--quant-block", type=int, default=None,
                   help="with --quantize: inputs per scale, 16, 32 (default), 64, 128 or 256")
    p.add_argument("--quant-asymmetric", action="store_true",
                   help="with --quantize: a zero point per block (default: symmetric, zero "
                        "point 2^(bits-1))")
    p.add_argument("--quant-accuracy", type=int, default=None,
                   help="with --quantize: MatMulNBits' accuracy_level, 0 to 4 (default 4 on "
                        f"{CPU_TARGET}: activations quantized to int8 per block; 0 on "
                        f"{CUDA_TARGET})")


def compile_options(args: argparse.Namespace):
    """compile's options that go together, checked (UsageError) before anything is built:
    (the target, its default by export; the quantization or None). Sets `args.seed` to its
    default where it was not given."""
    if args.decode and args.export not in ("onnx", "triton"):
        raise UsageError("--decode goes with --export onnx or triton (--export genai always "
                         "decodes)")
    if args.bounded_cache and not args.decode:
        raise UsageError("--bounded-cache goes with --decode: onnxruntime-genai "
                         "allocates every present at the full length, so a genai folder keeps "
                         "full caches")
    if args.weights and args.seed is not None:  # weights from a file: no seed draws anything
        raise UsageError("--seed draws random weights; with --weights nothing is drawn: drop one")
    args.seed = 0 if args.seed is None else args.seed  # the default, once checked
    target = args.target or (TRITON_TARGET if args.export == "triton" else DEFAULT_TARGET)
    return target, quantization(args, target)


def quantization(args: argparse.Namespace, target: str | None = None):
    """The `--quantize` options as a quantize.Quantization (checked against the target and
    dtype, UsageError), or None. `target` (verify: the first of --targets, else DEFAULT_TARGET)
    chooses the default accuracy_level."""
    from .quantize import Quantization, check_quantization

    if args.quantize is None:
        given = [flag for flag, value in (("--quant-block", args.quant_block),
                                          ("--quant-asymmetric", args.quant_asymmetric or None),
                                          ("--quant-accuracy", args.quant_accuracy))
                 if value is not None]
        if given:  # it would change nothing: say so rather than export a float model silently
            raise UsageError(f"{' and '.join(given)} only shape{'s' * (len(given) == 1)} a "
                             "quantized export: add --quantize int4 or int8, or drop "
                             f"{'it' if len(given) == 1 else 'them'}")
        return None
    if getattr(args, "export", None) == "torch":
        raise UsageError("--quantize writes ONNX Runtime's MatMulNBits: it goes with --export "
                         "onnx, genai or triton")
    target = target or (args.targets[0] if getattr(args, "targets", None) else DEFAULT_TARGET)
    accuracy = args.quant_accuracy
    if accuracy is None:
        accuracy = 4 if get(target).provider == "cpu" else 0  # int8 activations pay on CPUs
    block = Quantization.block if args.quant_block is None else args.quant_block
    q = Quantization(int(args.quantize[3:]), block, not args.quant_asymmetric, accuracy)
    check_quantization(q, target, args.dtype)
    return q


def _count(lo: int, hi: int) -> Callable[[str], int]:
    """An argparse type: one integer in [lo, hi]."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"expected an integer in [{lo}, {hi}], got {text}")
        return value

    parse.__name__ = "integer"  # argparse names the type in its messages
    return parse


def _ints(lo: int, hi: int) -> Callable[[str], tuple[int, ...]]:
    """An argparse type: comma-separated integers, each in [lo, hi]."""
    one = _count(lo, hi)

    def parse(text: str) -> tuple[int, ...]:
        values = tuple(one(t.strip()) for t in text.split(",") if t.strip())
        if not values:
            raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}")
        return values

    parse.__name__ = "integer list"
    return parse


# The reference that verify runs is dense float64: B x H x L x S of it must fit in memory.
MAX_VERIFY_LENGTH = 2048
_SEED = _count(0, 2**63 - 1)
_BATCH = _count(1, 1 << 16)
_LENGTH = _count(1, MAX_LENGTH)
_SHOW_LENGTH = _count(1, MAX_SHOW_LENGTH)  # at least one pixel per key
# bench compares the dense baseline(s) with the default plan
_BENCH_TARGETS = (*(n for n, t in TARGETS.items() if not t.planned), DEFAULT_TARGET)


def _targets(text: str) -> tuple[str, ...]:
    targets = _word_list(text)
    unknown = [t for t in targets if t not in TARGETS]
    if unknown or not targets:
        raise argparse.ArgumentTypeError(f"unknown target {', '.join(unknown) or text!r}: "
                                         f"choose from {', '.join(TARGETS)}"
                                         + did_you_mean(unknown, list(TARGETS)))
    return targets


def _word_list(text: str) -> tuple[str, ...]:
    return tuple(t.strip() for t in text.split(",") if t.strip())
