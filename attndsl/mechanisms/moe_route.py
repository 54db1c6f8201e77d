"""A mixture of experts' arithmetic (mechanisms/moe.py) over the array namespace (the torch
module's and the ONNX graph form's one text): the routers, each token's gates over the experts
from the router's logits, and one expert's MLP."""

from __future__ import annotations

from typing import Any

__all__ = ["expert_mlp", "route", "sparsemixer"]

Array = Any


def sparsemixer(xp, logits: Array, threshold: float, scale: float) -> Array:
    """PhiMoE's sparse mixer at inference (docs/LANGUAGE.md): two rounds over the logits r
    (T, experts); in each the best remaining expert i (the first round's left out of the
    second), the experts j with (r_i - r_j) / max(|r_j|, r_i) > `threshold` left out, and i's
    gate its softmax among those kept; times `scale`, 0 for the others."""
    r = xp.astype(logits, "float32")
    cut = xp.asarray(float("-inf"), "float32")
    gates, remaining = None, r
    for _ in range(2):
        best, i = xp.topk(remaining, 1)  # (T, 1)
        far = (best - r) / xp.maximum(xp.abs(r), best) > threshold
        g = xp.take_along(xp.softmax(xp.where(far, cut, remaining), axis=-1), i, -1)
        one = xp.scatter_last(r, i, g)
        gates = one if gates is None else gates + one
        hit = xp.scatter_last(r, i, xp.astype(i >= 0, "float32")) > 0.5
        remaining = xp.where(hit, cut, remaining)
    return gates * scale if scale != 1.0 else gates


def route(xp, logits: Array, top_k: int, router: str, normalize: bool, scale: float,
          selection: Array | None = None, groups: int = 1, top_groups: int = 1,
          group_score: str = "top2", threshold: float = 0.0, select_by: str = "probs",
          always: int = 0) -> Array:
    """Gates (T, experts), float32, from the router's logits (T, experts): p = softmax over the
    experts (or the sigmoid of each, `router = sigmoid`); the top_k experts by p (or by the
    logits, `select_by = logits`) + `selection` (a bias that chooses without weighing), among
    the `top_groups` of `groups` groups of experts whose best two (`top2`, summed) or best one
    (`max`) score highest; their p kept (renormalised to sum 1 when `normalize`) and times
    `scale`, 0 for the others; `router = sparsemixer`: PhiMoE's two rounds instead
    (`sparsemixer`). The last `always` experts (Inkling's shared) are chosen for every token
    besides the top_k, their p renormalised with the chosen ones'; the selection bias is the
    others'."""
    if router == "sparsemixer":
        return sparsemixer(xp, logits, threshold, scale)
    logits = xp.astype(logits, "float32")
    probs = xp.softmax(logits, axis=-1) if router == "softmax" else xp.sigmoid(logits)
    choice = logits if select_by == "logits" else probs
    if always:  # the routed experts' columns alone choose; the last are always taken
        routed = xp.slice(choice, -1, 0, xp.shape(logits, 1) - always)
        if selection is not None:
            routed = routed + xp.astype(selection, "float32")
        taken = xp.slice(choice, -1, xp.shape(logits, 1) - always, None) * 0.0 + 3.0e38
        choice = xp.concat([routed, taken], axis=-1)
        top_k += always
    elif selection is not None:
        choice = choice + xp.astype(selection, "float32")
    if groups > 1:
        experts = xp.shape(logits, 1)
        by_group = xp.reshape(choice, [-1, groups, experts // groups])
        score = xp.sum(xp.topk(by_group, 2 if group_score == "top2" else 1)[0], axis=-1)
        _, kept = xp.topk(score, top_groups)  # (T, top_groups)
        hit = xp.scatter_last(score, kept, xp.astype(kept >= 0, "float32"))
        eligible = xp.reshape(hit[..., None] + by_group * 0.0, [-1, experts]) > 0.5
        choice = xp.where(eligible, choice, xp.asarray(-3.0e38, "float32"))
    if choice is probs:
        weights, indices = xp.topk(probs, top_k)
    else:  # chosen by another score: weighed by p
        _, indices = xp.topk(choice, top_k)
        weights = xp.take_along(probs, indices, -1)
    if normalize:
        weights = weights / xp.sum(weights, axis=-1, keepdims=True)
    if scale != 1.0:
        weights = weights * scale
    return xp.scatter_last(probs, indices, weights)


def expert_mlp(xp, x: Array, act: str, gated: bool, weights: list[Array],
               biases: list[Array | None], clamp: tuple[float, float] = (1.702, 7.0)) -> Array:
    """One expert: down(act(gate(x)) * up(x)) with weights (gate, up, down) when `gated` (the
    clamped unit with `clamp` = (alpha, limit) for clamped_swiglu), else fc2(act(fc1(x)));
    nn.Linear layout [out, in]; a bias None where there is none."""
    from ..backends.formulas import activation, clamped_glu  # (the MLP units' arithmetic)

    def linear(h: Array, i: int) -> Array:
        y = xp.matmul(h, xp.swap_last(weights[i]))
        return y if biases[i] is None else y + biases[i]

    if act == "clamped_swiglu":
        return linear(clamped_glu(xp, linear(x, 0), linear(x, 1), *clamp), 2)
    if gated:
        return linear(activation(xp, linear(x, 0), act) * linear(x, 1), 2)
    return linear(activation(xp, linear(x, 0), act), 1)
