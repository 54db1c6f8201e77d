"""The planner: per target, how each attention runs, and why -- a pass that applies the
execution strategies (`attndsl/strategies/`, one module each) to the graph.

`plan(graph, target, dtype) -> (graph, choices)`: for the `ort-cpu` and `ort-cuda` targets each
attention core (`cores`) is offered to the strategies in their order (`strategies.LADDER`,
by priority); the first whose `match` applies takes it (else `dense`, the masked L x S form),
and the notes of those that did not apply are its reasons. A fusing strategy plans the
unplanned `attention` core (its strategy and parameters set on the node); any other strategy
lowers it to the primitive ops (`ir.decompose`); a kernel module keeps its own `kernel` node.

`portable` is never planned: it is the dense standard-op export (the baseline), made by
torch.onnx.export. Choices never change results; `attndsl verify` checks every target.
Choices depend on the dtype too: a node without a CUDA kernel for its type would silently run
on the CPU, so `ort-cuda` never emits one (`targets.has_kernel`)."""

from __future__ import annotations

from dataclasses import replace

from ..ir import Graph, Node, Op, all_nodes
from ..ir.decompose import decomposed
from ..ir.verify import verify
from ..mechanisms import KERNELS
from ..targets import get
from .cores import Choice, Core, attndsl_lowered, cores, cores_of, fuse, unfused, where
from .cover import Cover, cover
from .ffns import plan_ffns
from .torch_paths import plan_torch

__all__ = ["Choice", "Core", "Cover", "choose", "cores", "cover", "fuse_cores",
           "in_place_obstacle", "plan", "plan_torch"]
# the strategies a core decoding against a growing cache may take before `dense`, in order
GROWING = ("gather",)


def choose(a: Core, target: str, dtype: str = "float32"):
    """(strategy, params, reasons, node attributes) for one attention on a planned target: the
    first strategy of the ladder that matches, after the notes of those that did not."""
    from ..strategies import DEFAULT, LADDER, Context, Match

    ctx = Context(target, dtype)
    reasons: list[str] = []
    if a.kernel in KERNELS and not KERNELS[a.kernel].softmax_core and \
            not any(s.name == a.kernel for s in LADDER):  # its node, as its module runs it
        return _own_kernel(a), {}, [f"{KERNELS[a.kernel].described}: its own node, as its "
                                    "module computes it (no strategy plans it)"], {}
    for strategy in LADDER:
        found = strategy.match(a, ctx)
        if isinstance(found, Match):
            return strategy, dict(found.params), reasons + list(found.reasons), found.attrs
        if found.note:
            reasons.append(found.note)
    return DEFAULT, {}, reasons, {}


def _own_kernel(a: Core):
    """A strategy that keeps a kernel module's own node (lowered by its module)."""
    from ..strategies import Strategy

    return Strategy(a.kernel, None, lambda core, ctx: None, lambda params: 1, None,
                    fuses=False)


def in_place_obstacle(a: Core, target: str, dtype: str = "float32") -> str | None:
    """Why attention `a` cannot decode in place (strategy `gqa_cache`), or None."""
    from ..strategies.gqa_cache import in_place_obstacle as obstacle

    return obstacle(a, target, dtype)


def plan(graph: Graph, target: str, dtype: str = "float32") -> tuple[Graph, list[Choice]]:
    """The planned graph and one Choice per attention (then one per feed-forward form's node,
    on a planned target: `ffns.plan_ffns`), read from the graph alone.

    Requires: a graph from `ir.build`: each attention's core one unplanned `attention` node
    (or a kernel module's own node under its `merge_heads`).
    Ensures: on a planned target, each core a fusing strategy takes is its `attention` node
    with the strategy and its parameters set; every other core is in primitive ops
    (`ir.decompose`); other nodes unchanged.
    A target that is not planned (portable) gets the graph as it is, unless it decodes: every
    target lowers a decoding graph's cores to the dense masked form over cache and new keys
    (standard ops only). The IR verifier checks the planned graph."""
    planned, choices = _plan(graph, target, dtype)
    return verify(planned, f"plan ({target})"), choices


def _plan(graph: Graph, target: str, dtype: str) -> tuple[Graph, list[Choice]]:
    found = cores(graph)
    # a switch's If and a kernel's own control flow: attndsl lowers them, even on portable
    lowered = any(attndsl_lowered(n) for n in graph.nodes)
    if not get(target).planned and not graph.decoding and not lowered:
        return graph, [Choice(*where(c.prefix, graph), "dense",
                              ("portable: standard ONNX ops only, exported by "
                               "torch.onnx.export; no planning",))
                       for c in found]
    if graph.decoding:
        graph, choices = _plan_decoding(graph, found, target, dtype)
        return _with_ffns(graph, choices, target, dtype)
    by_name = {n.out: n for n in all_nodes(graph.nodes)}
    types = {name: n.shape for name, n in by_name.items()}
    choices: list[Choice] = []

    def planned(nodes: list[Node]) -> list[Node]:
        """`nodes` with each of their cores fused (and each switch's branches planned)."""
        for node in list(nodes):
            if node.op is Op.SWITCH:
                branches = tuple(tuple(planned(list(b))) for b in node.attr("branches"))
                attrs = tuple((k, branches if k == "branches" else v) for k, v in node.attrs)
                nodes = [replace(n, attrs=attrs) if n is node else n for n in nodes]
            elif _own(node):
                own = own_planned(node, target, dtype)
                nodes = [own if n is node else n for n in nodes]
                choices.append(own_choice(own))
            elif cores_of([node], by_name):
                core = cores_of([node], by_name)[0]
                strategy, params, reasons, attrs = choose(core, target, dtype) if \
                    get(target).planned else _portable(core)
                if core.selector:  # its keys chosen by a `keys` hook mechanism
                    reasons = [*reasons, core.selector.cost + "; in one pass the attention "
                               "runs over every key, those not chosen masked (a decoding "
                               "model gathers the chosen ones)"]
                choices.append(Choice(*where(core.prefix, graph), strategy.name,
                                      tuple(reasons), tuple(params.items())))
                if strategy.fuses:
                    nodes = fuse(nodes, core, strategy.name, params | dict(attrs))
                else:  # the core in primitive ops (a kernel module's own nodes stay)
                    nodes = unfused(nodes, core, types)
        return nodes

    graph = replace(graph, nodes=tuple(planned(list(graph.nodes))))
    return _with_ffns(graph, choices, target, dtype)


def _own(node: Node) -> bool:
    """Whether `node` is the `kernel` node of a kernel with its own layer (`own_layer`)."""
    return node.op is Op.KERNEL and KERNELS[node.attr("kernel")].own_layer


def own_planned(node: Node, target: str, dtype: str) -> Node:
    """A kernel's own-layer node with the attributes its module plans for a planned target's
    provider and the dtype (`Kernel.planned`: a fused kernel the provider has); as built
    elsewhere."""
    t = get(target)
    attrs = KERNELS[node.attr("kernel")].planned(node, t.provider, dtype) if t.planned else {}
    if not attrs:
        return node
    return replace(node, attrs=tuple((k, attrs.get(k, v)) for k, v in node.attrs))


def own_choice(node: Node) -> Choice:
    """The form of a kernel with its own layer: one, on every target (`Kernel.form`)."""
    name, reasons, params = KERNELS[node.attr("kernel")].form(node)
    return Choice(node.out.removesuffix("attn"), "", name, reasons, params)


def _with_ffns(graph: Graph, choices: list[Choice], target: str,
                  dtype: str) -> tuple[Graph, list[Choice]]:
    """On a planned target, each feed-forward form's node's kernel (`ffns.plan_ffns`) too."""
    if not get(target).planned:
        return graph, choices
    graph, more = plan_ffns(graph, target, dtype)
    return graph, choices + more


def _portable(core: Core):
    """A portable graph with a switch (a core selector's): attndsl lowers it (an `If` on the
    length, which torch.onnx.export cannot write), every core in standard ops; a kernel
    module's node as its module computes it."""
    from ..strategies import BY_NAME

    strategy = BY_NAME.get(core.kernel or "dense") or _own_kernel(core)
    return strategy, {}, [
        "portable: standard ONNX ops only; the core selector's `If` is lowered by attndsl, each "
        "core in its standard-ops form"], {}


def _plan_decoding(graph: Graph, found: list[Core], target: str,
                   dtype: str) -> tuple[Graph, list[Choice]]:
    """A decoding graph: every attention in place (strategy `gqa_cache`) when every one can,
    else every one against a growing cache (standard ops: past and new keys concatenated),
    `dense` or the first of GROWING that matches (`gather`: the keys a `keys` hook mechanism
    chose). One model has one cache layout, as onnxruntime-genai runs it."""
    from ..strategies import BY_NAME, Context, Match

    in_place = BY_NAME["gqa_cache"]
    matches = [(c, in_place.match(c, Context(target, dtype))) for c in found]
    blocked = next(((c, r.note) for c, r in matches if not isinstance(r, Match)), None)
    tail = next((n for n in graph.nodes if n.op is Op.TAIL), None)
    if blocked is None and tail is not None:  # the attention that reads the tailed cache
        core = next(c for c in found if tail.args[0] in c.qkv)
        blocked = (core, "a bounded cache (a window's last keys) grows and slides in standard "
                         "ops")
    planned = {n.out: own_planned(n, target, dtype) for n in graph.nodes if _own(n)}
    graph = replace(graph, nodes=tuple(planned.get(n.out, n) for n in graph.nodes))
    layers = list(planned.values())  # kernels with their own layer
    if blocked is None and layers:
        blocked = (None, f"{KERNELS[layers[0].attr('kernel')].carries}, which "
                         "GroupQueryAttention's max_length buffers do not hold")
    if blocked is None and any(n.op is Op.CAUSAL_CONV for n in graph.nodes):
        blocked = (None, "a residual convolution carries its last inputs, which "
                         "GroupQueryAttention's max_length buffers do not hold")
    nodes = list(graph.nodes)
    choices = []
    for core, match in matches:
        if blocked is None:
            nodes = fuse(nodes, core, in_place.name, dict(match.params))
            choices.append(Choice(core.prefix, "", in_place.name, match.reasons,
                                  tuple(match.params.items())))
            continue
        layer, why = blocked
        name = "a layer" if layer is None else layer.prefix.rstrip(".") or "the attention"
        reasons = ["decoding against a growing cache: past and new keys concatenated, the "
                   "masked form over them (standard ops)", f"not in place: {name}: {why}"]
        # a kernel module's own node (no softmax core to fuse); a kernel's rows before a
        # softmax core (`softmax_core`) leave that core to fuse
        own = core.kernel in KERNELS and not KERNELS[core.kernel].softmax_core
        growing = None if own else _growing(core, Context(target, dtype))
        if growing is not None:  # a strategy of its own over the growing cache
            name, m = growing
            cost = (core.selector.cost,) if core.selector else ()
            choices.append(Choice(core.prefix, "", name, (*m.reasons, *reasons[1:], *cost),
                                  tuple(m.params.items())))
            nodes = fuse(nodes, core, name, dict(m.params) | {"expr": core.mask})
            continue
        choices.append(Choice(core.prefix, "", core.kernel if own else "dense", tuple(reasons)))
        if not own:
            nodes = fuse(nodes, core, "dense", {"expr": core.mask})  # rows: every row seen
    if blocked is None:
        nodes = _cache_into_kernel(nodes)
    choices += [own_choice(n) for n in layers]
    # the cores left unplanned (a kernel's rows, a switch's branches) in primitive ops
    return replace(graph, nodes=tuple(decomposed(nodes))), choices


def _growing(core: Core, ctx) -> tuple[str, object] | None:
    """(name, match) of the first of GROWING's strategies that takes `core` over a growing
    cache, or None."""
    from ..strategies import BY_NAME, Match

    for name in GROWING:
        found = BY_NAME[name].match(core, ctx)
        if isinstance(found, Match):
            return name, found
    return None


def _cache_into_kernel(nodes: list[Node]) -> list[Node]:
    """gqa_cache attention nodes take (q, new k, new v, past k, past v, attention_mask) and
    write present.{i}.* themselves: their `cache` nodes go."""
    caches = {n.out: n for n in nodes if n.op is Op.CACHE}
    out = []
    for n in nodes:
        if n.op is Op.CACHE:
            continue
        if n.op is Op.ATTENTION and n.attr("strategy") == "gqa_cache":
            q, k, v, mask, *_ = n.args  # the keys' count is the kernel's own business
            ck, cv = caches[k], caches[v]
            n = replace(n, args=(q, ck.args[1], cv.args[1], ck.args[0], cv.args[0], mask),
                        attrs=(*n.attrs, ("presents", (ck.out, cv.out))))
        out.append(n)
    return out


def fuse_cores(graph: Graph, strategy: str) -> Graph:
    """The graph with every softmax core fused into one `attention` node of `strategy`, no
    choice made: bench's PyTorch SDPA baseline runs such a graph (strategy `sdpa`)."""
    nodes = list(graph.nodes)
    for core in cores(graph):
        if not core.kernel:
            nodes = fuse(nodes, core, strategy, {})
    return replace(graph, nodes=tuple(nodes))
