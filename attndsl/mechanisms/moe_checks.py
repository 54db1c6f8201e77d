"""A mixture of experts' checks of its routing arguments (mechanisms/moe.py's `read`): the sparse
mixer's threshold, and group-limited routing's groups; each a located diagnostic."""

from __future__ import annotations

from typing import Any

__all__ = ["always_run", "groups", "threshold"]


def threshold(c: Any, args: dict, router: str, top_k: int) -> float:
    """The sparse mixer's relative threshold (>= 0, finite), given with it alone; the
    sparse mixer picks two experts by its own rule: top_k = 2, nothing else choosing."""
    if router != "sparsemixer":
        if "threshold" in args:
            raise c.error("`threshold` is the sparse mixer's, and the router is not one",
                          args["threshold"].span, hint="add `router = sparsemixer`")
        return 0.0
    if top_k != 2:
        raise c.error(f"the sparse mixer picks 2 experts, and top_k is {top_k}",
                      args["top_k"].span, hint="`top_k = 2`")
    for key in ("normalize", "selection_bias", "groups", "select_by"):
        if key in args:
            raise c.error(f"`{key}` does not apply to the sparse mixer, whose gates are "
                          "its own softmaxes", args[key].span,
                          hint="remove it (PhiMoE: `router = sparsemixer, threshold = 0.02`)")
    if "threshold" not in args:
        raise c.error("the sparse mixer needs its `threshold`", args["router"].span,
                      hint="PhiMoE's is 2 * router_jitter_noise: `threshold = 0.02`")
    t = c.number(args["threshold"])
    if not 0.0 <= t < float("inf"):
        raise c.error(f"threshold must be a finite number >= 0, found {t:g}",
                      args["threshold"].span)
    return t

def groups(c: Any, args: dict, experts: int, top_k: int,
            score: str) -> tuple[int, int]:
    """`groups` dividing the experts, `top_groups` of them holding at least top_k experts
    (and two per group for a top2 group score)."""
    if "groups" not in args:
        for key in ("top_groups", "group_score"):
            if key in args:
                raise c.error(f"`{key}` needs `groups`", args[key].span,
                              hint="DeepSeek-V3: groups = 8, top_groups = 4")
        return 1, 1
    groups = c.positive(args["groups"], "groups")
    if experts % groups:
        raise c.error(f"{experts} experts do not split into {groups} groups",
                      args["groups"].span, hint="groups must divide experts")
    size = experts // groups
    if score == "top2" and size < 2:
        raise c.error(f"a group's score is the sum of its two best experts, and "
                      f"{groups} groups of {experts} experts hold one each",
                      args["groups"].span, hint="fewer groups, or `group_score = max`")
    top = c.positive(args["top_groups"], "top_groups") if "top_groups" in args else 1
    if top > groups:
        raise c.error(f"top_groups ({top}) must be at most groups ({groups})",
                      args["top_groups"].span)
    if top * size < top_k:
        at = args.get("top_groups", args["groups"])
        raise c.error(f"{top} of {groups} groups hold {top * size} experts, fewer than "
                      f"top_k = {top_k}", at.span,
                      hint="top_groups * experts / groups must be at least top_k")
    return groups, top


def always_run(c: Any, args: dict, zero: int, groups: int, router: str, most: int) -> int:
    """`sink_experts` (>= 0, at most `most`): experts every token runs, weighed by the router
    beside the routed ones; not with identity experts, groups or the sparse mixer."""
    if "sink_experts" not in args:
        return 0
    n = c.non_negative(args["sink_experts"], "sink_experts")
    if n > most:
        raise c.error(f"sink_experts must be at most {most}, found {n:,}",
                      args["sink_experts"].span)
    if n and (zero or groups > 1 or router == "sparsemixer"):
        raise c.error("sink experts join every token's routed experts under one router: not "
                      "with identity experts, groups of experts or the sparse mixer",
                      args["sink_experts"].span, hint="Inkling: router = sigmoid, "
                      "selection_bias = true, sink_experts = 2")
    return n

