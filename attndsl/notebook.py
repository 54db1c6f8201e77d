"""Jupyter's view of a layer and a program (`Layer._repr_html_`, `Program._repr_html_`): the
mask picture with axes (svg.py), the parameter count, and the plan for each target and for the
torch module, each attention's path with its reasons."""

from __future__ import annotations

from html import escape

from .errors import AttnError
from .spec import Transformer
from .targets import TARGETS, TORCH_PLAN

__all__ = ["layer_html", "program_html"]

def _plans(layer) -> str:
    rows = []
    for target in (*TARGETS, TORCH_PLAN):
        try:
            choices = layer.plan(target)[1]
        except AttnError as exc:  # a target that cannot take the layer says why
            rows.append(f"<tr><td>{target}</td><td colspan=2>{escape(str(exc))}</td></tr>")
            continue
        seen: dict[tuple, list[str]] = {}
        for c in choices:
            seen.setdefault((c.branch, c.strategy, c.params, c.reasons), []).append(
                c.layer.rstrip(".") or "attention")
        for (branch, strategy, params, reasons), where in seen.items():
            head = strategy + (f"({', '.join(f'{k}={v}' for k, v in params)})" if params else "")
            where_text = where[0] + (f" (+{len(where) - 1} more)" if len(where) > 1 else "")
            why = "".join(f"<li>{escape(r)}</li>" for r in reasons)
            rows.append(f"<tr><td>{target}</td><td>{escape(where_text)}"
                        f"{' ' + escape(branch) if branch else ''}</td><td><details><summary>"
                        f"<code>{escape(head)}</code></summary><ul>{why}</ul></details></td></tr>")
    return ("<table><thead><tr><th>target</th><th>attention</th><th>path</th></tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>")


def layer_html(layer) -> str:
    """A layer's card: name, kind, parameters, the mask picture and the plans."""
    from .ir import parameter_count
    from .show import default_length
    from .svg import mask_svg

    spec = layer.spec
    kind = f"transformer ({spec.layers} layers)" if isinstance(spec, Transformer) else \
        "attention"
    attn = spec.attention if isinstance(spec, Transformer) else spec
    length, why = default_length(spec)  # as `attndsl show` draws it unless told
    memory = length if attn.kind == "cross" else None
    return (f"<div><p><b>{escape(layer.name)}</b>: {kind}, "
            f"{parameter_count(spec):,} parameters; mask at L = {length}"
            f"{f' ({escape(why)})' if why else ''}</p>"
            f"{mask_svg(spec, length, memory)}{_plans(layer)}</div>")


def program_html(program) -> str:
    """Every layer of a program, each a card."""
    if not len(program):
        return "<p>no attention or transformer defined</p>"
    return "<hr>".join(layer_html(program[name]) for name in program)
