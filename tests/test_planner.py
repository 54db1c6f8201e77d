"""The planner: its choices and reasons, the soundness of the mask covers it plans with, and
the block-sparse lowering against the reference on masks chosen to break it."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import attndsl
from attndsl import masks as m
from attndsl.backends import reference, runtime
from attndsl.planner import cover
from attndsl.verify import make_inputs

from .conftest import EXAMPLES, ROOT


def _layer(body: str) -> attndsl.Layer:
    return attndsl.loads(f"attention a {{\n d_model = 32\n heads = 4\n {body}\n}}")["a"]


@pytest.mark.parametrize(("body", "target", "strategy", "reason"), [
    ("mask = causal", "ort-cpu", "gqa", "GroupQueryAttention"),
    ("kv_heads = 1\n softcap = 30.0\n mask = causal", "ort-cpu", "gqa", "softcap 30.0"),
    ("mask = causal & window(left = 63, right = 0)", "ort-cuda", "block_sparse",
     "float16 or bfloat16 only"),
    ("mask = causal & window(left = 63, right = 0)", "ort-cpu", "block_sparse",
     "visits every earlier key"),
    ("mask = full", "ort-cpu", "mha", "flash"),
    ("mask = padding", "ort-cpu", "mha", "key_padding_mask"),
    ("kind = cross\n mask = padding", "ort-cuda", "mha", "key_padding_mask"),
    ("mask = window(16) | global(first = 4)", "ort-cpu", "block_sparse", "global query"),
    ("mask = chunked(16) & causal", "ort-cpu", "block_sparse", "band q-15..q+0"),
    ("mask = causal & strided(8)", "ort-cpu", "strided", "residue class mod 8 (L / 8 keys)"),
    ("mask = abs(q - k) <= 8", "ort-cpu", "block_sparse", "band q-8..q+8"),
    ("mask = q >= k & k > q - 100", "ort-cpu", "block_sparse", "band q-99..q+0"),
    ("mask = abs(q // 8 - k // 8) <= 1", "ort-cpu", "dense", "no bounded band"),
    ("mask = causal & strided(8) | global(first = 2)", "ort-cpu", "dense",
     "global or random parts"),
    ("mask = causal | strided(8)", "ort-cpu", "dense", "band is wider"),
    ("mask = strided(4) | strided(6)", "ort-cpu", "dense", "mixes strides 4, 6"),
    ("kind = cross\n mask = strided(8)", "ort-cpu", "dense", "can reach every key"),
    ("position = alibi\n mask = causal", "ort-cpu", "dense", "score biases"),
    ("mask = causal\n sparsity = dense", "ort-cpu", "dense", "sparsity = dense"),
    ("mask = causal & window(left = 63, right = 0)\n sparsity = block(32)", "ort-cuda",
     "block_sparse", "block of 32"),
    ("value_dim = 4\n mask = causal", "ort-cpu", "dense", "value_dim (4) differs"),
    ("kernel = linear(feature = elu)\n mask = causal", "ort-cpu", "linear", "linear kernel"),
    ("mask = causal", "portable", "dense", "portable"),
])
def test_choices_and_reasons(body: str, target: str, strategy: str, reason: str) -> None:
    [choice] = _layer(body).plan(target)[1]
    assert choice.strategy == strategy
    assert reason in " ".join(choice.reasons)


@pytest.mark.parametrize(("body", "dtype", "strategy", "reason"), [
    # GroupQueryAttention's CUDA kernel: float16 and bfloat16 only
    ("kv_heads = 2\n mask = causal", "float32", "mha", "unidirectional = 1"),
    ("kv_heads = 2\n mask = causal", "float16", "gqa", "GroupQueryAttention"),
    ("kv_heads = 2\n mask = causal", "bfloat16", "gqa", "GroupQueryAttention"),
    ("mask = causal & window(left = 63, right = 0)", "float16", "gqa", "local_window_size = 64"),
    ("mask = causal & window(left = 63, right = 0)", "bfloat16", "gqa",
     "local_window_size = 64"),
    # MultiHeadAttention's CUDA kernel: float32, float16 and bfloat16 (ONNX Runtime's table)
    ("mask = full", "float32", "mha", "flash"),
    ("mask = padding", "float16", "mha", "key_padding_mask"),
    ("mask = padding", "bfloat16", "mha", "key_padding_mask"),
    ("softcap = 30.0\n mask = causal", "float32", "dense", "cannot apply a softcap"),
])
def test_cuda_choices_follow_the_kernels_types(body: str, dtype: str, strategy: str,
                                               reason: str) -> None:
    [choice] = _layer(body).plan("ort-cuda", dtype)[1]
    assert choice.strategy == strategy, choice.text()
    assert reason in " ".join(choice.reasons)


def test_fused_ops_are_in_the_graph() -> None:
    def ops(body: str) -> set[tuple[str, str]]:
        model = onnx.load_from_string(_layer(body).onnx_bytes(target="ort-cpu"))
        return {(n.domain, n.op_type) for n in model.graph.node}

    assert ("com.microsoft", "GroupQueryAttention") in ops("kv_heads = 2\n mask = causal")
    assert ("com.microsoft", "MultiHeadAttention") in ops("mask = padding")
    sparse = ops("mask = window(8)")
    assert ("", "Gather") in sparse and not any(d == "com.microsoft" for d, _ in sparse)


def test_explain_prints_each_layer_choice_once(capsys: pytest.CaptureFixture[str]) -> None:
    from attndsl.cli import main

    assert main(["explain", "examples/llama_gqa.attn", "--name", "llama_decoder"]) == 0
    out = capsys.readouterr().out
    assert out.count("plan for target ort-cpu:") == 1
    assert out.count("layers.0-1.self_attn: gqa(local_window_size=-1)") == 1


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_planned_graph_means_the_same_in_the_reference(path) -> None:
    for name in attndsl.load(path):
        layer = attndsl.load(path)[name]
        weights = {k: v.double().numpy() for k, v in layer.to_torch().state_dict().items()}
        inputs = make_inputs(layer.spec, 2, 37, np.random.default_rng(0))
        want = reference.run(layer.graph(), inputs, weights)
        planned = {target: layer.plan(target)[0] for target in ("ort-cpu", "ort-cuda")}
        if planned["ort-cuda"].nodes == planned["ort-cpu"].nodes:  # (one run reads both)
            del planned["ort-cuda"]
        for graph in planned.values():
            got = reference.run(graph, inputs, weights)
            np.testing.assert_allclose(got, want, atol=1e-12)


ints = st.integers(0, 40)
leaf = st.one_of(
    st.just(m.Full()), st.just(m.Causal()), st.just(m.Causal("bottom_right")),
    st.builds(m.Window, ints, ints), st.builds(m.Dilated, ints, ints, st.integers(1, 4)),
    st.builds(m.Chunked, st.integers(1, 20)), st.builds(m.Strided, st.integers(1, 9)),
    st.builds(m.Global, st.integers(0, 5)),
    st.builds(lambda t: m.Global(tokens=tuple(sorted(set(t)))),
              st.lists(st.integers(0, 70), min_size=1, max_size=3)),
    st.builds(m.Prefix, st.integers(0, 9)),
    st.builds(m.Random, st.integers(1, 3), st.sampled_from([4, 8, 16]), st.integers(0, 99)),
    st.builds(lambda op, e, c: m.Compare(op, e, m.Index("const", value=c)),
              st.sampled_from(["<", "<=", "==", "!=", ">=", ">"]), st.deferred(lambda: offsets),
              st.integers(-12, 12)),
    st.builds(lambda op, e, c: m.Compare(op, m.Index("abs", (e,)), m.Index("const", value=c)),
              st.sampled_from(["<", "<="]), st.deferred(lambda: offsets), st.integers(-2, 12)),
)
# index expressions of the offset k - q (which bound a band) and of q or k alone (which do not)
_atom = st.sampled_from([m.Index("q"), m.Index("k"), m.Index("const", value=3)])
offsets = st.one_of(
    st.builds(lambda a, b: m.Index("-", (a, b)), _atom, _atom),
    st.builds(lambda a, b, c: m.Index("*", (m.Index("-", (a, b)), m.Index("const", value=c))),
              _atom, _atom, st.integers(-3, 3)),
    st.builds(lambda a, b, c: m.Index("+", (m.Index("-", (a, b)), m.Index("const", value=c))),
              _atom, _atom, st.integers(-5, 5)),
)
mask_trees = st.recursive(leaf, lambda inner: st.one_of(
    st.builds(m.And, inner, inner), st.builds(m.Or, inner, inner), st.builds(m.Not, inner)),
    max_leaves=5)


@settings(max_examples=300, deadline=None)
@given(mask_trees, st.integers(1, 70), st.booleans())
def test_cover_contains_every_visible_pair(mask: m.Mask, L: int, self_attention: bool) -> None:
    S = L if self_attention else L + 9
    c = cover(mask, self_attention=self_attention)
    q, k = np.arange(L)[:, None], np.arange(S)[None, :]
    visible = np.broadcast_to(m.evaluate(mask, q, k, m.MaskContext(L, S)), (L, S))
    inside = (k >= q - c.left) & (k <= q + c.right)
    inside |= (q < c.q_first) | np.isin(q, c.q_tokens)
    inside |= (k < c.k_first) | np.isin(k, c.k_tokens)
    for r in c.randoms:
        inside |= m.evaluate(r, q, k, m.MaskContext(L, S))
    for n in c.strides:
        assert self_attention
        inside |= (k - q) % n == 0
    assert not (visible & ~inside).any(), f"{m.render(mask)} escapes {c}"


TRICKY = {
    "tokens": "mask = window(5) | global(tokens = [3, 40, 41, 200])",
    "tokens_first_padding":
        "mask = (window(left = 20, right = 3) | global(first = 2) | global(tokens = [7, 90]))"
        " & padding",
    "document_window": "mask = causal & window(left = 30, right = 0) & document",
    "random_prefix": "mask = window(16) | random(blocks = 3, block = 16, seed = 5) | prefix(4)",
    "alibi_window": "position = alibi\n mask = window(left = 40, right = 40)",
    "t5_chunked": "position = relative_bias(buckets = 16, max_distance = 64)\n mask = chunked(24)",
    "cross_window": "kind = cross\n memory_dim = 24\n"
                    " mask = window(left = 10, right = 70) & padding",
    "gqa_softcap_dilated": "softcap = 5.0\n kv_heads = 2\n mask = dilated(left = 50, right = 50,"
                           " dilation = 3) | global(tokens = [1])",
    "small_blocks": "mask = causal & window(left = 9, right = 0)\n sparsity = block(4)",
}


STRIDED = {
    "sparse_transformer": "mask = causal & (window(left = 7, right = 0) | strided(8))",
    "alibi_gqa_padding": "kv_heads = 2\n position = alibi\n"
                         " mask = causal & (window(left = 4, right = 0) | strided(5)) & padding",
    "t5_two_sided_softcap": "position = relative_bias(buckets = 8, max_distance = 20)\n"
                            " softcap = 3.0\n mask = window(left = 3, right = 9) | strided(7)",
    "document_stride_only": "mask = strided(3) & document",
    "stride_one": "mask = causal & strided(1)",
}


@pytest.mark.parametrize("body", STRIDED.values(), ids=STRIDED.keys())
def test_strided_matches_the_reference(body: str) -> None:
    layer = _layer(body)
    assert layer.plan("ort-cpu")[1][0].strategy == "strided"
    _matches_reference(layer)


@pytest.mark.parametrize("body", TRICKY.values(), ids=TRICKY.keys())
def test_block_sparse_matches_the_reference(body: str) -> None:
    layer = _layer(body)
    assert layer.plan("ort-cpu")[1][0].strategy == "block_sparse"
    _matches_reference(layer)


def _matches_reference(layer: attndsl.Layer) -> None:
    session = runtime.make_session(layer.onnx_bytes(target="ort-cpu"))
    weights = {k: v.double().numpy() for k, v in layer.to_torch().state_dict().items()}
    for batch, length in [(1, 1), (2, 5), (3, 63), (2, 64), (1, 130), (2, 257)]:
        inputs = make_inputs(layer.spec, batch, length, np.random.default_rng(length))
        want = layer.reference(inputs, weights)
        got = runtime.run(session, inputs)
        np.testing.assert_allclose(got, want, atol=1e-4 * max(1, np.abs(want).max()))


def test_strategies_are_modules_found_by_name_and_asked_in_priority_order(monkeypatch) -> None:
    """A strategy is one module of attndsl/strategies/: every module there defining STRATEGY
    is found; the planner asks them in priority order, takes the first match, keeps the notes
    of those before it, and fuses the core into an attention node of the match's name."""
    import pkgutil

    from attndsl import strategies
    from attndsl.planner import plan
    from attndsl.strategies import BY_NAME, LADDER, Match, Reject, Strategy

    modules = {i.name for i in pkgutil.iter_modules(strategies.__path__)} - {"base"}
    assert modules == set(BY_NAME)
    priorities = [s.priority for s in LADDER]
    assert priorities == sorted(priorities) and len(set(priorities)) == len(priorities)
    assert all(s.lower is not None for s in BY_NAME.values() if s.fuses)

    first = Strategy("probe_no", -2, lambda core, ctx: Reject("probe_no: not this one"),
                     lambda params: 2)
    second = Strategy("probe_yes", -1, lambda core, ctx: Match({"x": 1}, ("probe_yes: taken",)),
                      lambda params: 2)
    monkeypatch.setattr(strategies, "LADDER", (first, second, *LADDER))
    layer = attndsl.load(ROOT / "examples" / "llama_gqa.attn")["llama_attn"]
    graph, choices = plan(layer.graph(), "ort-cpu")
    assert [c.strategy for c in choices] == ["probe_yes"]
    assert choices[0].reasons == ("probe_no: not this one", "probe_yes: taken")
    fused = [n for n in graph.nodes if n.op.name == "ATTENTION"]
    assert [n.attr("strategy") for n in fused] == ["probe_yes"] and fused[0].attr("x") == 1


def test_what_a_fused_kernel_takes_is_its_strategys_data() -> None:
    """A strategy whose kernel applies score modifiers or `softmax` hook mechanisms itself
    declares which (`Strategy.takes`: GroupQueryAttention softcap and learned sinks,
    MultiHeadAttention neither), and its match refuses exactly the others, naming each by its
    module's `described`; the same core without them matches."""
    from attndsl.mechanisms import MECHANISMS, SCORED, SOFTMAX
    from attndsl.planner.cores import cores
    from attndsl.strategies import BY_NAME, Context, Match, Reject

    ctx = Context("ort-cuda", "float16")
    hooked = (*SCORED, *SOFTMAX)
    for mask, names in (("causal", ("gqa", "gqa_cache")), ("full", ("mha",))):
        spec = (f"attention a {{\n d_model = 64\n heads = 4\n kv_heads = 2\n mask = {mask}\n"
                " softcap = 30.0\n sinks = learned\n}")
        [core] = cores(attndsl.loads(spec)["a"].graph())
        assert [k for k, _ in (*core.modifiers, *core.softmax)] == list(hooked)
        bare = replace(core, modifiers=(), softmax=())
        for name in names:
            strategy = BY_NAME[name]
            assert strategy.takes is not None and isinstance(strategy.match(bare, ctx), Match)
            for key in hooked:
                one = replace(bare, modifiers=tuple(x for x in core.modifiers if x[0] == key),
                              softmax=tuple(x for x in core.softmax if x[0] == key))
                found = strategy.match(one, ctx)
                if key in strategy.takes:
                    assert isinstance(found, Match), (name, key)
                else:
                    assert isinstance(found, Reject), (name, key)
                    assert MECHANISMS[key].described in found.note
    assert BY_NAME["gqa"].takes == {"softcap", "sinks"} and BY_NAME["mha"].takes == set()
