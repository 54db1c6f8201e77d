"""`attndsl bench`: the command's rendering of `bench` and `bench_decode` results."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

from .errors import UsageError
from .output import write_atomic

__all__ = ["bench", "bench_decode"]


def bench(args: argparse.Namespace, load: Callable[[], list],
          progress: Callable[[str], None] | None) -> int:
    """`attndsl bench FILE`: the table (or JSON, or markdown), growth fits against each plan's
    theory, and the plot. `load` reads the file's layers (after the options are checked)."""
    from .bench import bench_layer
    from .bench_report import machine_summary, plot_png, render_growth, render_table, to_json

    repeat = 5 if args.repeat is None else args.repeat
    if repeat < 5:
        raise UsageError(f"--repeat must be at least 5 (the median of fewer runs is noise), "
                         f"found {repeat}")
    rows = []
    theory: dict[tuple[str, str], float] = {}
    for layer in load():
        if getattr(layer.spec, "patches", None) is not None:  # (its lengths are an image's)
            raise UsageError(f"`{layer.name}` is a vision stack: bench measures token lengths; "
                             f"bench its attention (--name {layer.spec.attention.name}) or "
                             "verify the stack")
        rows += bench_layer(layer, lengths=args.lengths, batch=args.batch, targets=args.targets,
                            providers=args.providers, repeat=repeat, dtype=args.dtype,
                            progress=progress)
        for target in args.targets:
            for provider in args.providers:
                exponent = _theory(layer, target, args.dtype)
                if exponent is not None:
                    theory[(layer.name, f"{target} on {provider}")] = exponent
    if progress:
        progress.close()
    if args.json:
        print(to_json(rows))
    elif args.markdown:
        print(f"Machine: {machine_summary()}; dtype {args.dtype}\n")
        print(f"Command: `attndsl bench {' '.join(sys.argv[2:])}`\n")
        print(render_table(rows, markdown=True))
        growth = render_growth(rows, theory, markdown=True)
        if growth:
            print(f"\nGrowth with L (log-log least squares over L >= 1024):\n\n{growth}")
    else:
        print(f"# {machine_summary()}; dtype {args.dtype}")
        print(render_table(rows))
        growth = render_growth(rows, theory)
        if growth:
            print(f"\n# growth with L (log-log least squares over L >= 1024)\n{growth}")
    if args.plot and args.plot.endswith(".svg"):  # labelled axes and the legend inside
        from .bench_report import COLOURS
        from .svg import latency_svg

        series: dict[str, list[tuple[int, float]]] = {}
        for r in rows:
            if r.latency_ms:
                series.setdefault(f"{r.layer}: {r.backend}", []).append((r.length, r.latency_ms))
        write_atomic(Path(args.plot), latency_svg(series, COLOURS).encode())
        print(f"wrote {args.plot}", file=sys.stderr if args.json else sys.stdout)
    elif args.plot:
        from .png import encode_png

        image, legend = plot_png(rows)
        write_atomic(Path(args.plot), encode_png(image))
        out = sys.stderr if args.json else sys.stdout
        print(f"wrote {args.plot}: latency (log) against length (log); colours:", file=out)
        for label, (r, g, b) in legend:
            print(f"  #{r:02x}{g:02x}{b:02x}  {label}", file=out)
    return 0


def _theory(layer, target: str, dtype: str) -> float | None:
    """The latency exponent the plan predicts on a planned target (the largest over its
    attentions), or None (portable: not planned)."""
    from .strategies import BY_NAME
    from .targets import get

    if not get(target).planned:
        return None
    # a feed-forward form's and an own-layer kernel's cost is linear in L (no strategy of its own)
    growth = [BY_NAME[c.strategy].growth(dict(c.params)) if c.strategy in BY_NAME else 1.0
              for c in layer.plan(target, dtype)[1]]
    return max(growth) if growth else None


def bench_decode(args: argparse.Namespace, progress: Callable[[str], None] | None) -> int:
    """`attndsl bench --decode HF_DIR`: generation against onnxruntime-genai and transformers."""
    from .bench_decode import bench_decode, render_decode
    from .bench_report import machine_summary

    source = Path(args.file)
    if not (source / "config.json").is_file():
        raise UsageError(f"{source}: bench --decode takes a Hugging Face checkpoint folder "
                         "(config.json and weights); benchmarks/make_llama.py writes one")
    unknown = [b for b in args.baselines if b not in ("genai", "transformers")]
    if unknown:
        raise UsageError(f"unknown baseline {', '.join(unknown)}: choose from genai, "
                         "transformers")
    odd = [p for p in args.precisions if p not in ("fp32", "int8", "int4")]
    if odd:
        raise UsageError(f"unknown precision {', '.join(odd)}: choose from fp32, int8, int4")
    rows, facts = bench_decode(source, prompts=args.prompts, new=args.new,
                               threads=args.threads, repeat=args.repeat or 3,
                               baselines=args.baselines, precisions=args.precisions,
                               progress=progress)
    if progress:
        progress.close()
    if args.json:
        print(json.dumps({"facts": facts, "rows": [r.__dict__ for r in rows]}, indent=2))
        return 0
    if args.markdown:
        print(f"Machine: {machine_summary()}\n")
        print(f"Command: `attndsl bench {' '.join(sys.argv[2:])}`\n")
    print(render_decode(rows, facts, markdown=args.markdown))
    return 0
