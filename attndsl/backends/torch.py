"""Graph IR -> a trainable `torch.nn.Module` that runs the graph: one small function per op
(`@impl(Op.X)`), parameters named, shaped and drawn as the graph's weight table says (Hugging
Face layout, for `load_state_dict`). The `portable` export traces this module: `to_torch`, the
portable export and the direct ONNX lowering all start from the same IR.

The forward pass is written for `torch.export` as well as eager use: every size is read from the
inputs, masks and position tables are computed from `arange` (never stored), and no Python
branch depends on a tensor's values. Scores, biases and softmax are float32 whatever the model
dtype (q and k are widened before their product, which is then exact)."""

from __future__ import annotations

import inspect
from collections import ChainMap
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .. import masks
from ..ir import Graph, Node, Op, build
from ..ir.decompose import decomposed
from ..ir.graph import over_memory
from ..mechanisms import APPLIERS, kernel_fact, softmax_logits
from ..spec import Attention, Transformer, attentions_of
from ..weight_table import seeded_weights
from . import formulas
from .cache_slots import bounded_present
from .inputs import named_inputs
from .torch_arrays import TorchArrays
from .torch_attention import attention, score_bias
from .torch_kernels import IMPLS as KERNELS
from .torch_masks import lengths, memory_visible, visible

__all__ = ["GraphModule", "TorchArrays", "build_module", "export_program", "seeded_module"]

Env = dict[str, Tensor]
_IMPL: dict[Op, Callable[[GraphModule, Node, Env], Tensor]] = dict(KERNELS)


def impl(op: Op) -> Callable:
    def register(fn: Callable) -> Callable:
        _IMPL[op] = fn
        return fn
    return register


class GraphModule(nn.Module):
    """Runs `graph`: forward(x, [memory], [key_lengths], [segment_ids]) -> y. Its parameters are
    the graph's weights, under their state-dict names (`layers.0.self_attn.q_proj.weight`)."""

    def __init__(self, graph: Graph, path: str = "dense"):
        super().__init__()
        self.graph = graph
        self.attention_path = path  # how planned attention nodes run (torch_attention)
        for w in graph.weights:
            *path, leaf = w.name.split(".")
            owner: nn.Module = self
            for part in path:
                if not hasattr(owner, part):
                    owner.add_module(part, nn.Module())
                owner = getattr(owner, part)
            owner.register_parameter(leaf, nn.Parameter(torch.empty(w.shape)))
        names = graph.inputs
        if all(n.isidentifier() for n in names):  # `help(module)`, inspect.signature(module)
            self.__signature__ = inspect.Signature(
                [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in names])

    def run_node(self, node: Node, env: Env) -> Tensor:
        return _IMPL[node.op](self, node, env)

    def _steps(self) -> list[tuple[Node, bool]]:
        """The graph's nodes as the module runs them: each unplanned attention core (the dense
        path: no torch path took it) in its primitive ops (`ir.decompose`), made once per
        graph; each with whether it sees the memory (a decoder stack's nodes over the memory
        rows, `ir.graph.over_memory`: the others' keys are the tokens)."""
        made = self.__dict__.get("_made")
        if made is None or made[0] is not self.graph:
            nodes = decomposed(self.graph.nodes)
            types = {n.out: n.shape for n in nodes}
            stack = self.graph.kind == "transformer"
            made = self.__dict__["_made"] = (self.graph, [
                (n, not stack or over_memory(n, types)) for n in nodes])
        return made[1]

    def weight(self, name: str) -> Tensor:
        return self.get_parameter(name)  # as a parameter: torch.export keeps one copy

    def forward(self, *args: Tensor, **kwargs: Tensor) -> Tensor | tuple[Tensor, ...]:
        """The graph's inputs by position or name (x or input_ids, memory, key_lengths,
        segment_ids; a decoding graph's attention_mask, position_ids, past_key_values.{i}.*)
        -> its output, or (output, present.0.key, present.0.value, ...) when decoding."""
        given = named_inputs(self.graph, args, kwargs)
        env: Env = {}
        memory: Env = {}  # a decoder stack's memory rows, seen by the nodes over them alone
        stack = self.graph.kind == "transformer"
        for node, sees_memory in self._steps():
            if node.op is Op.INPUT:
                (memory if node.out == "memory" and stack else env)[node.out] = given[node.out]
            else:
                seen = ChainMap(memory, env) if sees_memory and memory else env
                env[node.out] = self.run_node(node, masks.read_as(node.args, seen))
        if self.graph.presents:
            return (env[self.graph.output], *(env[p] for p in self.graph.presents))
        return env[self.graph.output]


def build_module(spec: Attention | Transformer, decode: bool = False, bounded: bool = False,
                 path: str = "dense") -> GraphModule:
    """A module for a resolved attention or transformer (weights uninitialised: see
    `seeded_module`); `decode`, `bounded`: its decoding form (ir.build); `path`: how its
    attentions run (planner.torch_paths: `auto`, `flex`, or `dense`, the graph's own nodes)."""
    from ..planner.torch_paths import plan_torch

    return GraphModule(plan_torch(build(spec, decode, bounded), path)[0], path)


def seeded_module(spec: Attention | Transformer, seed: int, decode: bool = False,
                  bounded: bool = False, path: str = "dense") -> GraphModule:
    """The module holding the weights drawn from `seed` (`weight_table.seeded_weights`, by
    NumPy: the same numbers the ONNX lowering stores)."""
    module = build_module(spec, decode, bounded, path)
    drawn = seeded_weights(module.graph.weights, seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            p.copy_(torch.from_numpy(drawn[name]))
    return module.eval()


def _arg(node: Node, env: Env, i: int = 0) -> Tensor:
    return env[node.args[i]]


def _positions(node: Node, env: Env, n: int, device: torch.device) -> Tensor:
    """Token positions: 0 .. n-1, or the node's position_ids argument (B, n) when decoding."""
    if len(node.args) > 1:
        return env[node.args[1]]
    return torch.arange(n, device=device)


@impl(Op.EMBED)
def _embed(m: GraphModule, node: Node, env: Env) -> Tensor:
    table = m.weight(node.attr("weight"))
    x = F.embedding(_arg(node, env), table)
    scale = node.attr("scale")  # in the model dtype, as Gemma's normalizer
    return x if scale == 1.0 else x * torch.tensor(scale, dtype=x.dtype, device=x.device)


@impl(Op.TAIL)
def _tail(m: GraphModule, node: Node, env: Env) -> Tensor:
    full = _arg(node, env)
    return bounded_present(TorchArrays(full.device), full, env["attention_mask"],
                           node.attr("first"), node.attr("keep"))


@impl(Op.CACHE)
def _cache(m: GraphModule, node: Node, env: Env) -> Tensor:
    new = _arg(node, env, 1)
    return torch.cat([_arg(node, env, 0).to(new.dtype), new], dim=2)


@impl(Op.ADD_POSITION)
def _add_position(m: GraphModule, node: Node, env: Env) -> Tensor:
    x = _arg(node, env)
    positions = _positions(node, env, x.shape[1], x.device)
    if node.attr("kind") == "learned":
        return x + F.embedding(positions, m.weight(node.attr("weight"))).to(x.dtype)
    table = formulas.sinusoidal_table(TorchArrays(x.device), positions.float()[..., None],
                                      x.shape[2], **formulas.sinusoidal_variant(node))
    return x + table.to(x.dtype)


@impl(Op.PATCHES)
def _patches(m: GraphModule, node: Node, env: Env) -> Tensor:
    x, a = _arg(node, env), dict(node.attrs)
    w = {k: m.weight(a[k])
         for k in ("weight", "bias", "class_token", "distillation_token", "registers",
                   "positions") if a.get(k)}
    return formulas.patch_embed(TorchArrays(x.device), x.to(w["weight"].dtype), w,
                                a["size"], a.get("grid"), w["weight"].shape[0],
                                a.get("antialias", False))


@impl(Op.GRID)
def _grid(m: GraphModule, node: Node, env: Env) -> Tensor:
    x = _arg(node, env)
    return formulas.grid_positions(TorchArrays(x.device), x, node.attr("size"),
                                   node.attr("before"))


@impl(Op.LINEAR)
def _linear(m: GraphModule, node: Node, env: Env) -> Tensor:
    bias = node.attr("bias")
    return F.linear(_arg(node, env), m.weight(node.attr("weight")),
                    m.weight(bias) if bias else None)


@impl(Op.SPLIT_HEADS)
def _split_heads(m: GraphModule, node: Node, env: Env) -> Tensor:
    heads, dim = node.attr("heads"), node.attr("dim")
    return _arg(node, env).unflatten(-1, (heads, dim)).transpose(1, 2)  # (B, h, n, d)


@impl(Op.HEAD_SLICE)
def _head_slice(m: GraphModule, node: Node, env: Env) -> Tensor:
    x = _arg(node, env).unflatten(-1, (node.attr("heads"), -1))
    return x[..., node.attr("start"):node.attr("stop")].flatten(-2)


@impl(Op.HEAD_LINEAR)
def _head_linear(m: GraphModule, node: Node, env: Env) -> Tensor:
    x = _arg(node, env)
    return formulas.head_linear(TorchArrays(x.device), x, m.weight(node.attr("weight")).to(
        x.dtype), *(node.attr(a) for a in ("heads", "block", "start", "stop", "transposed")))


@impl(Op.JOIN_HEADS)
def _join_heads(m: GraphModule, node: Node, env: Env) -> Tensor:
    a, c = _arg(node, env, 0), _arg(node, env, 1)
    return torch.cat([a, c.expand(-1, a.shape[1], -1, -1)], dim=-1)


@impl(Op.MERGE_HEADS)
def _merge_heads(m: GraphModule, node: Node, env: Env) -> Tensor:
    return _arg(node, env).transpose(1, 2).flatten(2)  # (B, L, H * dv)


@impl(Op.NORM)
def _norm(m: GraphModule, node: Node, env: Env) -> Tensor:
    x = _arg(node, env)
    module = node.attr("module")
    bias = m.weight(f"{module}.bias") if node.attr("bias") else None
    weighted = node.attr("kind") != "l2norm" and dict(node.attrs).get("affine", True)
    weight = m.weight(f"{module}.weight") if weighted else None
    return formulas.norm(TorchArrays(x.device), x, node.attr("kind"), weight, bias,
                         node.attr("eps"), node.attr("unit_offset"))


@impl(Op.APPLY)
def _apply(m: GraphModule, node: Node, env: Env) -> Tensor:
    """A mechanism's arithmetic, from its module; its second operand, where it has one, is
    position_ids where the mechanism reads positions, else the value it names."""
    x = _arg(node, env)
    mechanism = APPLIERS[node.attr("mechanism")]
    pos = _head_positions(node, env, x) if mechanism.reads_positions else (
        env[node.args[1]] if len(node.args) > 1 else None)
    attrs = dict(node.attrs[1:])
    if "weights" in attrs:
        attrs["weights"] = [m.weight(w) for w in attrs["weights"]]
    return mechanism.apply(TorchArrays(x.device), x, pos, **attrs)


def _head_positions(node: Node, env: Env, x: Tensor, floating: bool = False) -> Tensor:
    """Token positions (float32 if `floating`) for heads x: (n, 1), or (B, 1, n, 1) decoding."""
    pos = _positions(node, env, x.shape[2], x.device)
    pos = (pos.float() if floating else pos)[..., None]  # (n, 1) | (B, n, 1)
    return pos.unsqueeze(1) if pos.dim() == 3 else pos


@impl(Op.ROPE)
def _rope(m: GraphModule, node: Node, env: Env) -> Tensor:
    x = _arg(node, env)
    pos = _head_positions(node, env, x, floating=True)
    keys = lengths(env)[1][0, -1] + 1  # as a 0-d tensor (see `visible`)
    attrs = dict(node.attrs)
    return formulas.rope(TorchArrays(x.device), x, pos, keys, node.attr("theta"),
                         node.attr("dim"), node.attr("interleaved"), node.attr("scaling"),
                         attrs.get("mrope"), attrs.get("mrope_interleaved", False),
                         attrs.get("axial", False))


@impl(Op.REPEAT_KV)
def _repeat_kv(m: GraphModule, node: Node, env: Env) -> Tensor:
    # (B, Hkv, S, d) -> (B, H, S, d): head h reads kv head h // groups
    return _arg(node, env).repeat_interleave(node.attr("groups"), dim=1)


@impl(Op.SCORES)
def _scores(m: GraphModule, node: Node, env: Env) -> Tensor:
    q, k = _arg(node, env, 0), _arg(node, env, 1)
    # float32 whatever the model dtype (as fused kernels do): half-precision products are exact
    return torch.matmul(q.float() * node.attr("scale"), k.float().transpose(-1, -2))


@impl(Op.SCORE_BIAS)
def _score_bias(m: GraphModule, node: Node, env: Env) -> Tensor:
    s = _arg(node, env)
    qi, ki = lengths(env, s.shape[-1])
    rows = _arg(node, env, 1) if len(node.args) > 1 else None  # relative logits' states
    return s + score_bias(m, dict(node.attrs), s.shape[1], qi, ki, rows)


@impl(Op.MASK)
def _mask(m: GraphModule, node: Node, env: Env) -> Tensor:
    if node.attr("memory"):  # cross attention decoding: keys are the cached memory rows
        return memory_visible(node.attr("expr"), env, env[node.args[0]].shape[2])
    keys = env[node.args[1]].shape[2] if "attention_mask" in node.args else None
    return visible(node.attr("expr"), env, keys)


@impl(Op.SELECT_KEYS)
def _select_keys(m: GraphModule, node: Node, env: Env) -> Tensor:
    """The keys each query keeps: its `keys` hook mechanism's `select` over torch."""
    operands = [env[a] for a in node.args]
    return APPLIERS[node.attr("mechanism")].select(TorchArrays(operands[0].device), *operands,
                                                    **dict(node.attrs[1:]))


@impl(Op.SOFTMAX)
def _softmax(m: GraphModule, node: Node, env: Env) -> Tensor:
    if len(node.args) == 1:  # no mask (a kernel's rows: `Kernel.rows`)
        probs = torch.softmax(_arg(node, env), dim=-1)
        return F.dropout(probs, p=node.attr("dropout")) if m.training else probs
    scores, seen = _arg(node, env, 0), _arg(node, env, 1)
    if seen.dim() == 3:
        seen = seen.unsqueeze(1)  # (B, 1, L, S)
    extra = softmax_logits(node)  # (H,) -> (1, H, 1, 1), float32
    extra = m.weight(extra).float().view(1, -1, 1, 1) if extra is not None else None
    probs, any_key = formulas.masked_softmax(TorchArrays(scores.device), scores, seen, extra)
    probs = probs * any_key
    if m.training and node.attr("dropout"):
        probs = F.dropout(probs, p=node.attr("dropout"))
    return probs


@impl(Op.ATTEND)
def _attend(m: GraphModule, node: Node, env: Env) -> Tensor:
    v = _arg(node, env, 1)
    return torch.matmul(_arg(node, env, 0).to(v.dtype), v)  # (B, H, L, dv)


@impl(Op.ATTENTION)
def _attention(m: GraphModule, node: Node, env: Env) -> Tensor:
    return attention(m, node, env)


@impl(Op.ACTIVATION)
def _activation(m: GraphModule, node: Node, env: Env) -> Tensor:
    h = _arg(node, env)
    return formulas.activation(TorchArrays(h.device), h, node.attr("kind"))


@impl(Op.MUL)
def _mul(m: GraphModule, node: Node, env: Env) -> Tensor:
    return _arg(node, env, 0) * _arg(node, env, 1)


@impl(Op.ADD)
def _add(m: GraphModule, node: Node, env: Env) -> Tensor:
    drop = dict(node.attrs).get("dropout")
    branch = _arg(node, env, 1)
    if m.training and drop:
        branch = F.dropout(branch, p=drop)
    return _arg(node, env, 0) + branch


@impl(Op.VALUE_PAIRS)
def _value_pairs(m: GraphModule, node: Node, env: Env) -> Tensor:
    v = _arg(node, env)
    return formulas.value_pairs(TorchArrays(v.device), v, v.shape[1])




@impl(Op.CLAMPED_GLU)
def _clamped_glu(m: GraphModule, node: Node, env: Env) -> Tensor:
    g = _arg(node, env)
    return formulas.clamped_glu(TorchArrays(g.device), g, _arg(node, env, 1), node.attr("alpha"),
                                node.attr("limit"))


@impl(Op.SCALE)
def _scale(m: GraphModule, node: Node, env: Env) -> Tensor:
    x = _arg(node, env)  # the factor in the model dtype, as the models multiply
    weight = dict(node.attrs).get("weight")
    if weight is not None:  # one learned number (Gemma 4's layer_scalar)
        x = x * m.weight(weight)
    return x * torch.tensor(node.attr("factor"), dtype=x.dtype, device=x.device)


def export_program(spec: Attention | Transformer, module: nn.Module,
                   dtype: str = "float32") -> bytes:
    """A serialized `torch.export` program with dynamic batch and lengths, loadable with
    `torch.export.load` and no attndsl installed."""
    import io

    from ..dtypes import torch_dtype
    from .onnx import Positional, dynamic_shapes, example_inputs, input_names, longest

    names = input_names(spec)
    example = example_inputs(spec, dtype=torch_dtype(dtype))
    hashed = any(kernel_fact(a.kernel, "inferred_shapes")
                 for a in attentions_of(spec))
    program = torch.export.export(Positional(module.eval(), names),
                                  tuple(example[n] for n in names),
                                  dynamic_shapes=dynamic_shapes(names, longest(spec), hashed))
    buffer = io.BytesIO()
    torch.export.save(program, buffer)
    return buffer.getvalue()
