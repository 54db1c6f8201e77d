"""The torch module's form of a mixture of experts' `ffn` node (mechanisms/moe.py, `run`): the
router's logits and its gates (the module's `route`), then each expert on the tokens routed to
it alone (their rows gathered, its output added back in float32 at those rows), its gate
times its output or (`gate = input`) its input rows, in the model dtype. Torch is imported
when it runs: the mechanism modules stay torch-free."""

from __future__ import annotations

from typing import Any

__all__ = ["run"]


def run(xp: Any, x: Any, weight: Any, route: Any, expert_mlp: Any, *, weights: tuple[str, ...],
        experts: int, top_k: int, router: str, threshold: float, router_bias: bool,
        selection_bias: bool, select_by: str, normalize: bool, scale: float, groups: int,
        top_groups: int, group_score: str, act: str, gated: bool, bias: bool, alpha: float,
        limit: float, gate: str, prefix: str, output_bias: str | None, zero_experts: int,
        sink_experts: int, kernel: str) -> Any:
    """x (B, L, d) -> (B, L, d); `weight(name)` a parameter of the module; `route` and
    `expert_mlp` the mixture's arithmetic over the array namespace (moe.py's); the routed sum's
    bias (`output_bias`, a tensor's name) added in the model dtype; the `zero_experts` routed
    after the `experts` are identities; the last `sink_experts` of the `experts` run for every
    token (their gates from the router beside the routed ones')."""
    import torch

    bias_of = weight(weights[1]) if router_bias else None
    selection = weight(weights[-1]) if selection_bias else None
    logits = torch.nn.functional.linear(x, weight(weights[0]), bias_of)
    gates = route(xp, logits.reshape(-1, logits.shape[-1]), top_k, router, normalize, scale,
                  selection, groups, top_groups, group_score, threshold,
                  select_by, sink_experts).reshape(logits.shape)
    flat, gates = x.reshape(-1, x.shape[-1]), gates.reshape(-1, gates.shape[-1])
    out = torch.zeros(flat.shape, dtype=torch.float32, device=x.device)
    names = ("gate_proj", "up_proj", "down_proj") if gated else ("fc1", "fc2")
    on_input = gate == "input"
    for e in range(experts):
        rows = torch.nonzero(gates[:, e] > 0).squeeze(-1)
        own = f"{prefix}{e}."
        mats = [weight(f"{own}{n}.weight") for n in names]
        biases = [weight(f"{own}{n}.bias") if bias else None for n in names]
        g = gates[:, e].index_select(0, rows)[:, None]
        h = flat.index_select(0, rows)
        if on_input:
            h = h * g.to(h.dtype)
        h = expert_mlp(xp, h, act, gated, mats, biases, (alpha, limit)).float()
        out.index_add_(0, rows, h if on_input else h * g)
    if zero_experts:  # identity experts: each token's input times their gates (summed)
        out += flat.float() * gates[:, experts:].sum(-1, keepdim=True)
    out = out.to(x.dtype).reshape(x.shape)
    return out if output_bias is None else out + weight(output_bias)
