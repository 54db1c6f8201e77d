"""The command line. Thin: parses arguments, calls the library, renders errors, sets exit codes
(0 ok, 1 verification mismatch or fmt --check difference, 2 bad spec or usage, 3 export or
runtime failure)."""

from __future__ import annotations

import argparse
import difflib
import json
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

from .api import Layer, load, read_source
from .arguments import build_parser, quantization
from .check import check
from .errors import AttnError, Diagnostic, SpecError, UsageError
from .fmt import format_module
from .output import check_writable, write_atomic
from .parser import decode, parse
from .progress import current, progress_bar, reporting
from .targets import CPU_TARGET, CUDA_TARGET, TORCH_PLAN

__all__ = ["main"]

_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {}


def command(name: str) -> Callable[[Callable[[argparse.Namespace], int]],
                                   Callable[[argparse.Namespace], int]]:
    def register(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
        _COMMANDS[name] = fn
        return fn
    return register


def _with_encoders(layers: list) -> list:
    """Each layer, then its encoder where it is an encoder-decoder model (`Layer.encoder`)."""
    return [part for layer in layers for part in (
        layer, *([layer.encoder()] if getattr(layer.spec, "encoder", None) else []))]


def _layers(path: str, name: str | None) -> list[Layer]:
    program = load(path)
    if name is not None:
        return [program[name]]
    if not len(program):
        raise UsageError(f"{path}: defines no attention or transformer")
    return [program[n] for n in program]


@command("check")
def _check(args: argparse.Namespace) -> int:
    failed = 0
    for path in args.files:
        try:
            program = check(parse(read_source(path)))
        except SpecError as exc:
            print(exc.render(), file=sys.stderr)
            print(file=sys.stderr)
            failed = max(failed, exc.exit_code)
            continue
        except AttnError as exc:
            print(exc.render(), file=sys.stderr)
            failed = max(failed, exc.exit_code)
            continue
        names = ", ".join(f"{type(v).__name__.lower()} {k}" for k, v in program.layers.items())
        print(f"{path}: ok ({names or 'no layers'})")
    return failed


@command("fmt")
def _fmt(args: argparse.Namespace) -> int:
    status = 0
    for path in args.files:
        try:
            source = read_source(path)
            formatted = format_module(parse(source))
        except AttnError as exc:
            print(exc.render(), file=sys.stderr)
            status = max(status, exc.exit_code)
            continue
        if formatted == source.text:
            continue
        if args.diff:
            sys.stdout.writelines(difflib.unified_diff(
                source.text.splitlines(keepends=True), formatted.splitlines(keepends=True),
                f"{path}", f"{path} (formatted)"))
        if args.check:
            print(f"{path}: would reformat", file=sys.stderr)
            status = max(status, 1)
        elif not args.diff:
            write_atomic(Path(path), formatted.encode("utf-8"))
            print(f"{path}: formatted")
    return status


@command("import")
def _import(args: argparse.Namespace) -> int:
    from .hf_import import import_config

    notes: list[str] = []
    text = import_config(Path(args.source), args.padding, args.head, notes)
    for note in notes:
        print(f"warning: {note}", file=sys.stderr)
    source = Path(args.source)
    config = source / "config.json" if source.is_dir() else source
    name = f"<the spec imported from {config}>"
    text = format_module(parse(decode(text.encode(), name)))
    try:  # fields of the right types can still contradict each other (heads vs kv_heads)
        check(parse(decode(text.encode(), name)))
    except SpecError as exc:
        raise SpecError([Diagnostic(
            f"{config}: the model its fields describe does not check (below, in the spec "
            "imported from it; nothing was written)",
            hint="fix config.json: each spec line below is read from one of its fields"),
            *exc.diagnostics]) from None
    if args.output:
        write_atomic(Path(args.output), text.encode())
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


@command("compile")
def _compile(args: argparse.Namespace) -> int:
    from .cli_compile import compile_command

    return compile_command(args, lambda: _layers(args.file, args.name))


@command("verify")
def _verify(args: argparse.Namespace) -> int:

    layers = _with_encoders(_layers(args.file, args.name))
    if (args.save_inputs or args.save_outputs) and args.dtype == "bfloat16":
        raise UsageError("--save-inputs/--save-outputs write NumPy arrays (Polygraphy's JSON "
                         "format), which cannot hold bfloat16; save them with --dtype float16 "
                         "or float32")
    if (args.save_inputs or args.save_outputs) and len(layers) > 1:
        raise UsageError(f"{args.file} has {len(layers)} layers; choose one with --name to "
                         "save inputs or outputs")
    for path in (args.save_inputs, args.save_outputs):
        if path:  # before the run, not after it
            check_writable(Path(path))
    progress = current()
    reports = []
    for layer in layers:
        report = layer.verify(lengths=args.lengths or None,  # None: chosen from the spec
                              batches=args.batches, providers=args.providers,
                              targets=args.targets, seed=args.seed, weights=args.weights,
                              dtype=args.dtype, progress=progress, quantize=quantization(args))
        if progress:
            progress.close()
        reports.append(report)
        if not args.json:
            print(report.text())
            print()
    if args.json:
        print(json.dumps([r.to_dict() for r in reports], indent=2))
    from .polygraphy_json import inputs_json, run_results_json

    def in_dtype(arrays: dict) -> dict:  # as the model takes and gives them
        return {k: v.astype(args.dtype) if v.dtype.kind == "f" else v for k, v in arrays.items()}

    if args.save_inputs:
        feeds = [in_dtype(feed) for feed in reports[0].feeds]
        write_atomic(Path(args.save_inputs), inputs_json(feeds).encode())
    if args.save_outputs:
        outputs = {name: [in_dtype(o) for o in runs] for name, runs in reports[0].outputs.items()}
        write_atomic(Path(args.save_outputs), run_results_json(outputs).encode())
    return 0 if all(r.passed for r in reports) else 1


@command("bench")
def _bench(args: argparse.Namespace) -> int:
    from .cli_bench import bench, bench_decode

    progress = current()
    if args.decode:
        return bench_decode(args, progress)
    return bench(args, lambda: _layers(args.file, args.name), progress)


@command("lsp")
def _lsp(args: argparse.Namespace) -> int:
    from .lsp import serve

    return serve()


@command("show")
def _show(args: argparse.Namespace) -> int:
    from .png import encode_png
    from .show import default_length, png_panels, terminal_grid

    layers = _layers(args.file, args.name)
    if (args.png or args.svg) and len(layers) > 1:
        raise UsageError(f"{args.file} has {len(layers)} layers; choose one with --name for a "
                         "picture")
    for i, layer in enumerate(layers):
        if i:
            print()
        length, why = (args.length, "") if args.length else default_length(layer.spec)  # as verify
        print(terminal_grid(layer.spec, length, args.memory_length, why=why,
                            rows=not (args.png or args.svg)))  # the picture has the rows
    if args.png:
        path = Path(args.png)
        write_atomic(path, encode_png(png_panels(layers[0].spec, length, args.memory_length)))
        print(f"wrote {path}")
    if args.svg:
        from .svg import mask_svg

        write_atomic(Path(args.svg), mask_svg(layers[0].spec, length,
                                              args.memory_length).encode())
        print(f"wrote {args.svg}")
    return 0


@command("explain")
def _explain(args: argparse.Namespace) -> int:
    from .placement import check as check_placement
    from .placement import reporting
    from .planner import plan
    from .planner.cores import render_choices
    from .planner.rewrites import explained
    from .targets import get as get_target

    if args.bounded_cache and not args.decode:
        raise UsageError("--bounded-cache goes with --decode")
    if args.context_length is not None and not args.decode:
        raise UsageError("--context-length goes with --decode")
    if args.decode and args.target == TORCH_PLAN:
        raise UsageError("--target torch explains the one-pass module (a decoding torch module "
                         "runs the exact dense form): drop --decode, or name an ONNX target")
    if args.quantize and args.target == TORCH_PLAN:
        raise UsageError(f"--quantize writes ONNX Runtime's MatMulNBits: explain it with "
                         f"--target {CPU_TARGET} or {CUDA_TARGET}")
    quantize = None if args.target == TORCH_PLAN else quantization(args, args.target)
    layers = _layers(args.file, args.name)  # (an encoder-decoder's encoder: one pass alone)
    for i, layer in enumerate(layers if args.decode else _with_encoders(layers)):
        if i:
            print()
        if args.decode:
            graph, choices = layer.decoder_plan(target=args.target, dtype=args.dtype,
                                                bounded=args.bounded_cache)
            layout = layer.decoder_layout(target=args.target, dtype=args.dtype,
                                          bounded=args.bounded_cache)
            print(graph.text(), end="")
            print(f"decoding plan for target {args.target}, cache layout {layout}:")
            planned = plan(graph, args.target, args.dtype)[0]  # decoder_plan gives it unplanned
        else:
            print(layer.graph().text(), end="")
            planned, choices = layer.plan(args.target, args.dtype)
            print(f"plan for target {args.target}" + ("" if args.dtype == "float32" else
                                                      f" ({args.dtype})") + ":")
        if choices:
            print(render_choices(choices))
        lines = [] if args.target == TORCH_PLAN else explained(
            planned, args.target, args.dtype, quantize, args.context_length)
        if lines:
            print("rewrites:")
            print("\n".join(f"  {line}" for line in lines))
        if args.target != TORCH_PLAN and get_target(args.target).planned:  # where ORT runs it
            options = {"target": args.target, "dtype": args.dtype, "quantize": quantize}
            with reporting():  # built whatever the check finds, to show it
                model = (layer.decoder_model(**options, bounded=args.bounded_cache,
                                             max_length=args.context_length)
                         if args.decode else layer.onnx_model(**options)).proto()
            print(check_placement(model, get_target(args.target).provider).summary())
    return 0


@command("generate")
def _generate(args: argparse.Namespace) -> int:
    from .backends import runtime
    from .decoding import generate
    from .genai import load_decoder

    model, config = load_decoder(Path(args.model))
    eos = args.eos
    if eos is None:
        found = config.get("model", {}).get("eos_token_id", [])
        eos = tuple(found) if isinstance(found, list) else (found,)
    runtime.require(args.provider)
    session = runtime.make_session(model, args.provider)  # its external data beside it
    bar = current()
    show = (lambda done, total: bar("generating", done, total)) if bar else None
    if any(i.name == "memory" for i in session.get_inputs()):  # an encoder-decoder's decoder
        from .seq2seq import generate_files

        result = generate_files(session, Path(model), args.encoder, args.prompt_ids,
                                args.max_new, eos, args.provider)
    else:
        result = generate(session, args.prompt_ids, args.max_new, eos=eos, progress=show)
    if bar:
        bar.close()
    rate = 1000.0 / result.ms_per_token if result.step_s else float("nan")
    if args.json:
        print(json.dumps({"tokens": result.tokens, "first_token_ms": 1000 * result.first_token_s,
                          "ms_per_token": result.ms_per_token, "tokens_per_s": rate}, indent=2))
        return 0
    for tokens in result.tokens:
        print(",".join(map(str, tokens)))
    print(f"first token {1000 * result.first_token_s:.1f} ms; then {result.ms_per_token:.2f} "
          f"ms/token ({rate:.1f} tokens/s, batch {len(result.tokens)}) on {args.provider}",
          file=sys.stderr)
    return 0


@command("check-placement")
def _check_placement(args: argparse.Namespace) -> int:
    from .placement import check, load_graph

    placements, unreadable = [], 0
    for path in args.models:  # each file on its own: a bad one does not stop the others
        try:
            placements.append((path, check(load_graph(Path(path)), args.provider)))
        except UsageError as exc:
            print(exc.render(), file=sys.stderr)
            unreadable += 1
    if args.json:
        print(json.dumps([{"model": path, "provider": p.provider, "table": p.source,
                           "nodes": p.nodes, "findings": [
                               {"node": f.node, "graph": f.path, "why": f.why,
                                "at_run_time": f.rule} for f in p.findings]}
                          for path, p in placements], indent=2))
    else:
        print("\n".join(f"{path}: {p.summary()}" for path, p in placements))
    return 2 if unreadable else 1 if any(p.findings for _, p in placements) else 0


@command("run")
def _run(args: argparse.Namespace) -> int:
    from .run import run_model

    return run_model(args)


_OUT_OF_MEMORY = ("error: out of memory\n  = help: the model, or its inputs at these lengths, "
                  "need more memory than this machine has; try shorter lengths, a smaller "
                  "model or a larger machine")


def main(argv: Sequence[str] | None = None) -> int:
    if not (sys.argv[1:] if argv is None else argv):  # bare `attndsl`: usage and commands
        print(build_parser().format_help(), end="", file=sys.stderr)
        return 2  # nothing was done: a usage error, as for any incomplete command line
    try:
        args = build_parser().parse_args(argv)
        quiet = getattr(args, "json", False) or getattr(args, "quiet", False)
        with reporting(progress_bar(quiet or args.command == "lsp")):
            return _COMMANDS[args.command](args)
    except AttnError as exc:
        print(exc.render(), file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`attndsl explain x.attn | head`): not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no flush error at exit
        return 0
    except MemoryError:
        print(_OUT_OF_MEMORY, file=sys.stderr)
        return 3
    except Exception as exc:  # last resort: a bug in attndsl must still not dump a traceback
        if "can't allocate memory" in str(exc):  # torch's allocator, as a RuntimeError
            print(_OUT_OF_MEMORY, file=sys.stderr)
            return 3
        if os.environ.get("ATTNDSL_TRACEBACK"):
            traceback.print_exc()
        print(f"internal error: {type(exc).__name__}: {exc}\n"
              "  = help: this is a bug in attndsl; rerun with ATTNDSL_TRACEBACK=1 and report it",
              file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
