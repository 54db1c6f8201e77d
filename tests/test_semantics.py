"""The reference against independent, loop-by-loop formulations of docs/LANGUAGE.md: masks, ALiBi
slopes, T5 buckets, RoPE (both layouts), GQA head mapping, linear attention, empty rows."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import attndsl
from attndsl import masks as m
from attndsl.backends import reference, reference_masks
from attndsl.positions import alibi_slopes, t5_bucket_float32


def _brute(mask: m.Mask, L: int, S: int, key_lengths=None, segment_ids=None) -> np.ndarray:
    """docs/LANGUAGE.md's mask table, one (b, q, k) at a time."""
    B = 1 if key_lengths is None and segment_ids is None else len(
        key_lengths if key_lengths is not None else segment_ids)

    def visible(node: m.Mask, b: int, q: int, k: int) -> bool:
        match node:
            case m.Full():
                return True
            case m.Causal(align="top_left"):
                return k <= q
            case m.Causal():
                return k <= q + (S - L)
            case m.Window(a, c):
                return q - a <= k <= q + c
            case m.Dilated(a, c, d):
                return q - a <= k <= q + c and (q - k) % d == 0
            case m.Chunked(n):
                return q // n == k // n
            case m.Strided(n):
                return (q - k) % n == 0
            case m.Global(first, tokens):
                return q < first or k < first or q in tokens or k in tokens
            case m.Prefix(n):
                return k < n
            case m.Random(r, n, seed):
                blocks = math.ceil(S / n)
                drawn = []
                for j in range(r):  # the documented draw, step by step
                    h = seed % 2147483647
                    h = (h * 48271 + q // n + 1) % 2147483647
                    h = (h * 48271 + j + 1) % 2147483647
                    h = (h * 48271) % 2147483647
                    h = (h * 48271) % 2147483647
                    drawn.append(h % blocks)
                return k // n in drawn
            case m.Padding():
                return k < key_lengths[b]
            case m.Document():
                return segment_ids[b][q] == segment_ids[b][k]
            case m.Compare(op, x, y):
                a, c = _index(x, q, k), _index(y, q, k)
                return {"<": a < c, "<=": a <= c, "==": a == c, "!=": a != c, ">=": a >= c,
                        ">": a > c}[op]
            case m.And(x, y):
                return visible(x, b, q, k) and visible(y, b, q, k)
            case m.Or(x, y):
                return visible(x, b, q, k) or visible(y, b, q, k)
            case m.Not(x):
                return not visible(x, b, q, k)
        raise AssertionError(node)

    return np.array([[[visible(mask, b, q, k) for k in range(S)] for q in range(L)]
                     for b in range(B)])


def _index(e: m.Index, q: int, k: int) -> int:
    """docs/LANGUAGE.md's index expressions on Python integers (floor division, modulo with
    the divisor's sign)."""
    ops = {"q": lambda: q, "k": lambda: k, "const": lambda: e.value}
    if e.op in ops:
        return ops[e.op]()
    args = [_index(a, q, k) for a in e.args]
    return {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
            "//": lambda a, b: a // b, "%": lambda a, b: a % b, "abs": abs, "min": min,
            "max": max}[e.op](*args)


INDEX_MASKS = ["abs(q // 3 - k // 3) <= 1 & abs(q % 3 - k % 3) <= 1", "min(q, k) % 4 != 1",
               "max(q - 5, -k) >= -(q // 2)", "q - k > 2 | k * 2 == q", "(q - k) // 4 == -1",
               "(k - q) % 5 < 2", "!(q - 7 * (k // 7) >= 3)"]


def _parsed(text: str) -> m.Mask:
    return attndsl.loads(f"attention a {{\n d_model = 8\n heads = 1\n mask = {text}\n}}")[
        "a"].spec.mask


MASKS = [
    m.Full(), m.Causal(), m.Causal("bottom_right"), m.Window(3, 1), m.Window(0, 0),
    m.Dilated(6, 2, 3), m.Chunked(4), m.Strided(3), m.Global(first=2),
    m.Global(tokens=(0, 5, 9)), m.Prefix(4), m.Random(2, 3, 11), m.Random(3, 4, 2**40 + 7),
    m.And(m.Causal(), m.Window(4, 0)), m.Or(m.Causal(), m.Prefix(3)),
    m.Not(m.Or(m.Window(2, 2), m.Global(first=1))),
]


@pytest.mark.parametrize("mask", MASKS, ids=m.render)
@pytest.mark.parametrize(("L", "S"), [(1, 1), (13, 13), (7, 19), (19, 7)])
def test_mask_matches_its_definition(mask: m.Mask, L: int, S: int) -> None:
    got = m.evaluate(mask, np.arange(L)[:, None], np.arange(S)[None, :], m.MaskContext(L, S))
    want = _brute(mask, L, S)[0]
    assert np.array_equal(np.broadcast_to(got, (L, S)), want)


@pytest.mark.parametrize("text", INDEX_MASKS)
@pytest.mark.parametrize(("L", "S"), [(1, 1), (13, 13), (7, 19), (19, 7)])
def test_index_masks_match_their_definition(text: str, L: int, S: int) -> None:
    mask = _parsed(text)
    got = m.evaluate(mask, np.arange(L)[:, None], np.arange(S)[None, :], m.MaskContext(L, S))
    assert np.array_equal(np.broadcast_to(got, (L, S)), _brute(mask, L, S)[0])
    assert m.render(mask) == m.render(_parsed(m.render(mask)))  # its text means it


def test_index_masks_run_in_every_backend_with_negative_operands() -> None:
    """Floor division and modulo of negative values (ONNX's integer Div truncates)."""
    layer = attndsl.loads("""
        attention a {
            d_model = 16
            heads = 2
            mask = (q - k) // 4 == -1 | (k - q) % 5 == 4 & max(q, k) % 3 != min(q, k) % 2
        }""")["a"]
    report = layer.verify(lengths=(1, 7, 23), targets=("portable", "ort-cpu", "ort-cuda"))
    assert all(c.passed for c in report.comparisons)


def test_positions_within_documents_in_every_backend() -> None:
    """`qd`, `kd` (docs/LANGUAGE.md, Index masks): a document is a run of equal consecutive
    segment ids, so an id that comes back later starts a new document (positions restart)
    though `document` still joins the two runs. Brute force by the definition, against the
    reference and, through one random batch, every backend and target."""
    text = "document & (kd < 3 & qd < 3 | kd <= qd) & qd - kd <= 4"
    mask = _parsed(text)
    segments = np.array([[0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 0, 0, 2],
                         [5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5],
                         [1, 2, 1, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 9, 9]])
    B, L = segments.shape
    pos = np.zeros((B, L), int)
    for b in range(B):
        for i in range(1, L):
            pos[b, i] = pos[b, i - 1] + 1 if segments[b, i] == segments[b, i - 1] else 0
    want = np.zeros((B, L, L), bool)
    for b in range(B):
        for q in range(L):
            for k in range(L):
                qd, kd = pos[b, q], pos[b, k]
                want[b, q, k] = (segments[b, q] == segments[b, k]
                                 and ((kd < 3 and qd < 3) or kd <= qd) and qd - kd <= 4)
    assert pos[0, 12] == 0 and pos[2, 2] == 0  # a returning id starts a new document
    got = reference_masks.mask_of(mask, B, L, L, None, segments)
    assert np.array_equal(np.broadcast_to(got, (B, L, L)), want)
    layer = attndsl.loads(f"attention a {{\n d_model = 16\n heads = 2\n mask = {text}\n}}")["a"]
    module = layer.to_torch(seed=1)
    w = {k: v.double().numpy() for k, v in module.state_dict().items()}
    x = np.random.default_rng(0).standard_normal((B, L, 16))
    inputs = {"x": x, "segment_ids": segments}
    ref = layer.reference(inputs, w)
    with torch.no_grad():
        got_torch = module(x=torch.tensor(x, dtype=torch.float32),
                           segment_ids=torch.tensor(segments)).numpy()
    np.testing.assert_allclose(got_torch, ref, atol=1e-5)
    from attndsl.backends import runtime
    feed = {"x": x.astype(np.float32), "segment_ids": segments}
    for target in ("portable", "ort-cpu", "ort-cuda"):
        session = runtime.make_session(layer.onnx_bytes(target=target, seed=1), "cpu")
        np.testing.assert_allclose(runtime.run(session, feed), ref, atol=1e-5)


def test_cross_attention_documents_read_the_memory_rows_ids() -> None:
    """Flamingo's per-image cross attention: text token q sees memory row k when
    segment_ids[b, q] == memory_segment_ids[b, k]; a token whose image has no rows sees no
    key (zeros). Brute force against the reference, torch and every target."""
    layer = attndsl.loads("""
        attention a {
            d_model = 16
            heads = 2
            kind = cross
            memory_dim = 12
            mask = document & padding
        }""")["a"]
    assert layer.spec.runtime_inputs == ("key_lengths", "segment_ids", "memory_segment_ids")
    text = np.array([[0, 0, 1, 1, 1, 2, 2], [-1, 3, 3, 3, 3, 3, 3]])  # -1: before any image
    rows = np.array([[0, 0, 0, 1, 1, 2, 2, 2, 2], [3, 3, 3, 3, 3, 3, 3, 3, 3]])
    lengths = np.array([9, 4])
    want = np.array([[[text[b, q] == rows[b, k] and k < lengths[b] for k in range(9)]
                      for q in range(7)] for b in range(2)])
    got = reference_masks.mask_of(layer.spec.mask, 2, 7, 9, lengths, text, rows)
    assert np.array_equal(np.broadcast_to(got, want.shape), want)
    module = layer.to_torch(seed=2)
    w = {k: v.double().numpy() for k, v in module.state_dict().items()}
    rng = np.random.default_rng(1)
    x, memory = rng.standard_normal((2, 7, 16)), rng.standard_normal((2, 9, 12))
    feed = {"x": x, "memory": memory, "key_lengths": lengths, "segment_ids": text,
            "memory_segment_ids": rows}
    ref = layer.reference(feed, w)
    bias = w["o_proj.bias"]
    np.testing.assert_allclose(ref[1, 0], bias, atol=1e-12)  # no image yet: no key
    with torch.no_grad():
        got_torch = module(**{k: torch.tensor(v, dtype=torch.float32 if v.dtype.kind == "f"
                                              else torch.int64) for k, v in feed.items()})
    np.testing.assert_allclose(got_torch.numpy(), ref, atol=1e-5)
    from attndsl.backends import runtime
    feed32 = {k: v.astype(np.float32) if v.dtype.kind == "f" else v for k, v in feed.items()}
    for target in ("portable", "ort-cpu", "ort-cuda"):
        session = runtime.make_session(layer.onnx_bytes(target=target, seed=2), "cpu")
        np.testing.assert_allclose(runtime.run(session, feed32), ref, atol=1e-5)


def test_runtime_masks_match_their_definition() -> None:
    lengths = np.array([5, 0, 9])
    seg = np.array([[0, 0, 1, 1, 1, 2, 2, 2, 2], [0] * 9, [0, 1, 2, 3, 4, 5, 6, 7, 8]])
    q, k = np.arange(9)[:, None], np.arange(9)[None, :]
    pad = m.evaluate(m.Padding(), q, k, m.MaskContext(9, 9, key_lengths=lengths))
    doc = m.evaluate(m.And(m.Causal(), m.Document()), q, k, m.MaskContext(9, 9, segment_ids=seg))
    assert np.array_equal(pad, _brute(m.Padding(), 9, 9, key_lengths=lengths))
    assert np.array_equal(doc, _brute(m.And(m.Causal(), m.Document()), 9, 9, segment_ids=seg))


def test_alibi_slopes_follow_press_et_al() -> None:
    assert alibi_slopes(8) == [2.0 ** -(i + 1) for i in range(8)]
    # non-power-of-two: 8 slopes of the 8-head series, then every other of the 16-head series
    sixteen = [2.0 ** (-(i + 1) / 2) for i in range(16)]
    eight = [2.0 ** -(i + 1) for i in range(8)]
    assert alibi_slopes(12) == pytest.approx(eight + sixteen[0::2][:4])


def _hf_t5_bucket(relative_position: torch.Tensor, bidirectional: bool, num_buckets: int,
                  max_distance: int) -> torch.Tensor:
    """transformers' T5Attention._relative_position_bucket, transcribed."""
    relative_buckets = 0
    if bidirectional:
        num_buckets //= 2
        relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
        relative_position = torch.abs(relative_position)
    else:
        relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    if_large = max_exact + (torch.log(relative_position.float() / max_exact)
                            / math.log(max_distance / max_exact)
                            * (num_buckets - max_exact)).to(torch.long)
    if_large = torch.min(if_large, torch.full_like(if_large, num_buckets - 1))
    return relative_buckets + torch.where(is_small, relative_position, if_large)


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize(("buckets", "max_distance"), [(32, 128), (8, 20), (64, 1000)])
def test_t5_buckets_match_transformers(bidirectional: bool, buckets: int,
                                       max_distance: int) -> None:
    rel = torch.arange(-3000, 3000).unsqueeze(0)
    want = _hf_t5_bucket(rel, bidirectional, buckets, max_distance)
    assert torch.equal(t5_bucket_float32(torch, rel, buckets, max_distance, bidirectional), want)
    assert np.array_equal(t5_bucket_float32(np, rel.numpy(), buckets, max_distance,
                                            bidirectional), want.numpy())


def _attention_by_loops(x: np.ndarray, w: dict[str, np.ndarray], heads: int, kv_heads: int,
                        d: int, visible: np.ndarray) -> np.ndarray:
    """Single-sequence attention written with explicit loops: GQA head h reads kv h//groups."""
    L = x.shape[0]
    q = x @ w["q_proj.weight"].T
    k = x @ w["k_proj.weight"].T
    v = x @ w["v_proj.weight"].T
    out = np.zeros((L, heads * d))
    for h in range(heads):
        g = h // (heads // kv_heads)
        for i in range(L):
            scores = [q[i, h * d:(h + 1) * d] @ k[j, g * d:(g + 1) * d] / math.sqrt(d)
                      for j in range(L)]
            keys = [j for j in range(L) if visible[i, j]]
            if not keys:
                continue
            top = max(scores[j] for j in keys)
            weights = {j: math.exp(scores[j] - top) for j in keys}
            total = sum(weights.values())
            for j in keys:
                out[i, h * d:(h + 1) * d] += weights[j] / total * v[j, g * d:(g + 1) * d]
    return out @ w["o_proj.weight"].T


def test_gqa_head_mapping_and_window_by_loops() -> None:
    layer = attndsl.loads("""
        attention a {
            d_model = 48
            heads = 6
            kv_heads = 2
            bias = false
            mask = causal & window(left = 3, right = 0)
        }""")["a"]
    module = layer.to_torch(seed=3)
    w = {k: v.double().numpy() for k, v in module.state_dict().items()}
    x = np.random.default_rng(0).standard_normal((1, 11, 48))
    visible = _brute(layer.spec.mask, 11, 11)[0]
    want = _attention_by_loops(x[0], w, 6, 2, 8, visible)
    got = layer.reference({"x": x}, w)[0]
    np.testing.assert_allclose(got, want, atol=1e-10)


def test_rows_with_no_visible_key_are_zero_in_every_backend() -> None:
    """key_lengths = 0: attention output is zero, so y is exactly o_proj's bias."""
    layer = attndsl.loads("""
        attention a {
            d_model = 32
            heads = 4
            mask = padding
        }""")["a"]
    module = layer.to_torch(seed=0)
    bias = module.o_proj.bias.detach().numpy()
    x = np.random.default_rng(0).standard_normal((2, 5, 32)).astype(np.float32)
    lengths = np.array([0, 2])
    inputs = {"x": x, "key_lengths": lengths}
    from attndsl.backends import runtime

    session = runtime.make_session(layer.onnx_bytes())
    outputs = {
        "reference": layer.reference(inputs, module.state_dict()),
        "torch": module(torch.from_numpy(x),
                        key_lengths=torch.from_numpy(lengths)).detach().numpy(),
        "onnxruntime": runtime.run(session, inputs),
    }
    for name, y in outputs.items():
        assert np.isfinite(y).all(), name
        np.testing.assert_allclose(y[0], np.broadcast_to(bias, (5, 32)), atol=1e-6, err_msg=name)


@pytest.mark.parametrize("interleaved", [False, True])
def test_rope_matches_complex_rotation(interleaved: bool) -> None:
    spec = f"""
        attention a {{
            d_model = 32
            heads = 2
            bias = false
            position = rope(theta = 100, dim = 12, interleaved = {str(interleaved).lower()})
        }}"""
    graph = attndsl.loads(spec)["a"].graph()
    rope = next(n for n in graph.nodes if n.op.value == "rope")
    x = np.random.default_rng(1).standard_normal((1, 2, 9, 16))
    got = reference._IMPL[rope.op](rope, {rope.args[0]: x, "x": np.zeros((1, 9, 32))}, {})
    inv = 100.0 ** (-np.arange(0, 12, 2) / 12)  # (6,)
    z = x[..., 0:12:2] + 1j * x[..., 1:12:2] if interleaved else x[..., :6] + 1j * x[..., 6:12]
    z = z * np.exp(1j * np.arange(9)[:, None] * inv[None, :])
    want = x.copy()
    if interleaved:
        want[..., 0:12:2], want[..., 1:12:2] = z.real, z.imag
    else:
        want[..., :6], want[..., 6:12] = z.real, z.imag
    np.testing.assert_allclose(got, want, atol=1e-12)


@pytest.mark.parametrize("causal", [False, True])
def test_linear_attention_formula(causal: bool) -> None:
    layer = attndsl.loads(f"""
        attention a {{
            d_model = 16
            heads = 2
            bias = false
            kernel = linear(feature = elu)
            mask = {'causal' if causal else 'full'}
        }}""")["a"]
    module = layer.to_torch(seed=0)
    w = {k: v.double().numpy() for k, v in module.state_dict().items()}
    x = np.random.default_rng(2).standard_normal((1, 6, 16))
    q, k, v = (x[0] @ w[f"{p}_proj.weight"].T for p in "qkv")

    def phi(t: np.ndarray) -> np.ndarray:
        return np.where(t > 0, t + 1, np.exp(t))

    out = np.zeros((6, 16))
    for h in range(2):
        s = slice(8 * h, 8 * h + 8)
        for i in range(6):
            keys = range(i + 1) if causal else range(6)
            num = sum(phi(q[i, s]) @ phi(k[j, s]) * v[j, s] for j in keys)
            den = sum(phi(q[i, s]) @ phi(k[j, s]) for j in keys)
            out[i, s] = num / max(den, 1e-6)
    want = out @ w["o_proj.weight"].T
    np.testing.assert_allclose(layer.reference({"x": x}, w)[0], want, atol=1e-10)


@pytest.mark.parametrize("share", ["none", "headwise", "kv"])
def test_linformer_formula_by_loops(share: str) -> None:
    """docs/LANGUAGE.md (Kernels): K' = E_n (m * K), V' = F_n (m * V) per kv head, softmax
    over the k rows; padded keys dropped before the projection; a row whose keys are all
    padding is zero (o_proj's bias alone)."""
    layer = attndsl.loads(f"""
        attention a {{
            d_model = 24
            heads = 4
            kv_heads = 2
            kernel = linformer(k = 5, max_len = 13, share = {share})
            mask = padding(side = left)
        }}""")["a"]
    module = layer.to_torch(seed=4)
    w = {k: v.double().numpy() for k, v in module.state_dict().items()}
    n, d = 9, 6
    x = np.random.default_rng(3).standard_normal((3, n, 24))
    lengths = np.array([9, 4, 0])
    e = w["linformer_e.weight"]
    f = e if share == "kv" else w["linformer_f.weight"]
    out = np.zeros((3, n, 24))
    for b in range(3):
        q, k, v = (x[b] @ w[f"{p}_proj.weight"].T + w[f"{p}_proj.bias"] for p in "qkv")
        kept = np.arange(n) >= n - lengths[b]
        for h in range(4):
            g = h // 2  # kv head
            E = (e[g] if share == "none" else e)[:, :n]
            F = (f[g] if share == "none" else f)[:, :n]
            ks, vs = k[:, g * d:(g + 1) * d], v[:, g * d:(g + 1) * d]
            rows_k = sum(E[:, j:j + 1] * ks[j] for j in range(n) if kept[j])  # (5, d)
            rows_v = sum(F[:, j:j + 1] * vs[j] for j in range(n) if kept[j])
            for i in range(n):
                if not kept.any():
                    continue  # no key: zero rows, a uniform softmax over zeros -> 0
                s = np.array([q[i, h * d:(h + 1) * d] @ rows_k[r] for r in range(5)])
                p = np.exp(s / math.sqrt(d) - (s / math.sqrt(d)).max())
                out[b, i, h * d:(h + 1) * d] = (p / p.sum()) @ rows_v
    want = out @ w["o_proj.weight"].T + w["o_proj.bias"]
    inputs = {"x": x, "key_lengths": lengths}
    np.testing.assert_allclose(layer.reference(inputs, w), want, atol=1e-10)
    np.testing.assert_allclose(want[2], np.broadcast_to(w["o_proj.bias"], (n, 24)))


def test_linformer_with_identity_projections_is_softmax_attention(tmp_path) -> None:
    """E = F = I (k = max_len = n): every key is its own row, so Linformer is standard
    attention, in every backend."""
    text = """
        attention a {{
            d_model = 32
            heads = 4
            kv_heads = 2
            kernel = {kernel}
        }}"""
    linformer = attndsl.loads(text.format(kernel="linformer(k = 11, max_len = 11, "
                                                 "share = kv)"))["a"]
    softmax = attndsl.loads(text.format(kernel="softmax"))["a"]
    state = softmax.to_torch(seed=5).state_dict()
    state["linformer_e.weight"] = torch.eye(11)
    module = linformer.to_torch()
    module.load_state_dict(state)
    x = np.random.default_rng(4).standard_normal((2, 11, 32)).astype(np.float32)
    want = softmax.reference({"x": x}, state)
    from attndsl.backends import runtime

    path = tmp_path / "weights.pt"
    torch.save(state, path)
    got = {"reference": linformer.reference({"x": x}, state),
           "torch": module(torch.from_numpy(x)).detach().numpy()}
    for target in ("ort-cpu", "portable"):
        got[target] = runtime.run(runtime.make_session(
            linformer.onnx_bytes(target=target, weights=path)), {"x": x})
    for name, y in got.items():
        np.testing.assert_allclose(y, want, atol=1e-5, err_msg=name)


def test_the_reference_shares_no_helper_with_the_backends() -> None:
    """The oracle (backends/reference*.py) imports from attndsl only the IR's node types and
    the mask node classes, and calls no function of `attndsl.masks` (whose `visible` the other
    backends run): a mistake in shared code cannot hide from it."""
    import ast as pyast

    from .conftest import ROOT

    for path in sorted((ROOT / "attndsl" / "backends").glob("reference*.py")):
        tree = pyast.parse(path.read_text())
        for node in pyast.walk(tree):
            if isinstance(node, pyast.ImportFrom) and node.level:
                assert node.module in ("ir", "masks", None) or \
                    node.module.startswith("reference"), f"{path.name} imports {node.module}"
                if node.module is None:
                    assert [a.name for a in node.names] == ["masks"], path.name
            if isinstance(node, pyast.Attribute) and isinstance(node.value, pyast.Name) \
                    and node.value.id == "m":
                assert node.attr[0].isupper(), f"{path.name} calls masks.{node.attr}"


def test_the_onnx_lowering_imports_neither_the_spec_nor_torch() -> None:
    """The lowering (backends/lower, formulas, the strategies, finalize) takes the graph,
    its weights and a dtype: no module of it imports attndsl.spec or torch (the RoPE scalings
    its nodes carry are `attndsl.rope_scaling`'s)."""
    import ast as pyast

    from .conftest import ROOT

    package = ROOT / "attndsl"
    files = [*sorted((package / "backends" / "lower").glob("*.py")),
             *sorted((package / "strategies").glob("*.py")),
             package / "backends" / "formulas.py", package / "backends" / "finalize.py",
             package / "positions.py", package / "rope_scaling.py"]
    for path in files:
        for node in pyast.walk(pyast.parse(path.read_text())):
            if isinstance(node, pyast.Import):
                assert not any(a.name.split(".")[0] == "torch" for a in node.names), path
            elif isinstance(node, pyast.ImportFrom):
                module = node.module or ""
                assert module.split(".")[0] != "torch", f"{path.name} imports {module}"
                assert module.split(".")[-1] != "spec" and not (
                    module in ("", "..", "...") and any(a.name == "spec" for a in node.names)), \
                    f"{path.name} imports the spec"
