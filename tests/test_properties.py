"""Property tests: generated valid specs check clean and survive fmt with the same resolved
spec; text from the grammar and random mutations of the examples never crash, only diagnose."""

from __future__ import annotations

import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.lark import from_lark

import attndsl
from attndsl.check import check
from attndsl.errors import SpecError
from attndsl.fmt import format_module
from attndsl.parser import _lark, decode, parse

from .conftest import DEEP, EXAMPLES

# max_examples comes from the profile (conftest.py): a fixed slice, or thousands with --deep
SETTINGS = settings(deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
# the grammar's texts are the slowest inputs to check, format and plan (about 0.2 CPU s
# each, two thirds of this file's time at 150): by default a third of the slice, the deep
# profile's thousands with --deep
# from_lark rejects drawn terminals its regexes do not match: many inputs are filtered out
GRAMMAR_SETTINGS = settings(SETTINGS, suppress_health_check=[*SETTINGS.suppress_health_check,
                                                             HealthCheck.filter_too_much])
if not DEEP[0]:
    GRAMMAR_SETTINGS = settings(GRAMMAR_SETTINGS, max_examples=50)
TIME_BOUND = 5.0  # CPU seconds (immune to a busy machine) for check, fmt and plan of one input


def _only_diagnoses(data: bytes) -> None:
    start = time.process_time()
    try:
        program = check(parse(decode(data, "fuzz.attn")))
    except SpecError as exc:
        text = exc.render()
        assert text.startswith("error: ")
        assert time.process_time() - start < TIME_BOUND
        return
    # it checked: fmt must keep its meaning, and planning must not blow up either
    formatted = format_module(parse(decode(data, "fuzz.attn")))
    assert check(parse(decode(formatted.encode(), "fuzz.attn"))).layers == program.layers
    checked = attndsl.Program(program)
    for name in checked:
        checked[name].plan("ort-cpu")
    assert time.process_time() - start < TIME_BOUND


ints = st.integers(min_value=0, max_value=300)
primitive = st.one_of(
    st.just("full"), st.just("causal"), st.just("causal(align = bottom_right)"),
    st.just("padding"),
    ints.map(lambda n: f"window({n})"),
    st.tuples(ints, ints).map(lambda t: f"window(left = {t[0]}, right = {t[1]})"),
    st.tuples(ints, ints, st.integers(1, 9)).map(
        lambda t: f"dilated(left = {t[0]}, right = {t[1]}, dilation = {t[2]})"),
    st.integers(1, 99).map(lambda n: f"chunked({n})"),
    st.integers(1, 99).map(lambda n: f"strided({n})"),
    st.integers(1, 9).map(lambda n: f"global(first = {n})"),
    st.lists(ints, min_size=1, max_size=4).map(lambda t: f"global(tokens = {t})"),
    ints.map(lambda n: f"prefix({n})"),
    st.tuples(st.integers(1, 4), st.integers(1, 64), ints).map(
        lambda t: f"random(blocks = {t[0]}, block = {t[1]}, seed = {t[2]})"),
)
mask_expr = st.recursive(primitive, lambda inner: st.one_of(
    st.tuples(inner, inner).map(lambda t: f"{t[0]} & {t[1]}"),
    st.tuples(inner, inner).map(lambda t: f"({t[0]} | {t[1]})"),
    inner.map(lambda t: f"!({t})"),
), max_leaves=6)
positions = st.sampled_from(["none", "sinusoidal", "learned(64)", "rope",
                             "rope(theta = 500000, interleaved = true)", "alibi",
                             "relative_bias(buckets = 16, max_distance = 64)"])


QK_NORMS = ["none", "rmsnorm", "layernorm(eps = 1e-5)", "rmsnorm(unit_offset = true)"]


@st.composite
def valid_specs(draw: st.DrawFn) -> str:
    heads = draw(st.sampled_from([1, 2, 4, 6, 8]))
    kv = draw(st.sampled_from([d for d in range(1, heads + 1) if heads % d == 0]))
    head_dim = draw(st.sampled_from([4, 8, 16]))
    lines = [f"d_model = {heads * head_dim}", f"heads = {heads}", f"kv_heads = {kv}",
             f"position = {draw(positions)}", f"mask = {draw(mask_expr)}",
             f"bias = {draw(st.sampled_from(['true', 'false', '[q, k, v]', '[o]']))}",
             f"softcap = {draw(st.sampled_from(['none', '30.0', '50']))}",
             f"qk_norm = {draw(st.sampled_from(QK_NORMS))}",
             f"sparsity = {draw(st.sampled_from(['auto', 'dense', 'block(16)']))}"]
    lines = draw(st.permutations(lines))
    ws = draw(st.sampled_from(["\n", " ", "\n\n  ", "  # note\n"]))
    body = ws.join(lines)
    stack = ""
    if draw(st.booleans()):
        stack = (f"\ntransformer t {{ attention = a layers = {draw(st.integers(1, 3))} "
                 f"ffn = {draw(st.sampled_from(['relu', 'gelu', 'gelu_tanh', 'swiglu', 'geglu']))}"
                 f"(32{draw(st.sampled_from(['', ', bias = false', ', bias = true']))}) "
                 f"norm = {draw(st.sampled_from(['layernorm', 'rmsnorm']))}"
                 f"({draw(st.sampled_from(['pre', 'post']))}"
                 f"{draw(st.sampled_from(['', ', eps = 1e-6', ', eps = 2 ** -20']))}) }}\n")
    return f"# generated\nattention a {{{ws}{body}{ws}}}\n{stack}"


@SETTINGS
@given(valid_specs())
def test_generated_valid_specs_check_and_survive_fmt(text: str) -> None:
    program = attndsl.loads(text)
    formatted = format_module(parse(decode(text.encode(), "g.attn")))
    assert attndsl.loads(formatted).resolved.layers == program.resolved.layers
    assert format_module(parse(decode(formatted.encode(), "g.attn"))) == formatted


@GRAMMAR_SETTINGS
@given(from_lark(_lark(), start="start"))
def test_text_from_the_grammar_never_crashes(text: str) -> None:
    _only_diagnoses(text.encode("utf-8"))


EXAMPLE_BYTES = [p.read_bytes() for p in EXAMPLES]


@SETTINGS
@given(st.sampled_from(EXAMPLE_BYTES), st.lists(
    st.tuples(st.sampled_from(["flip", "insert", "delete"]), st.integers(0, 10**6),
              st.integers(0, 255)), min_size=1, max_size=8))
def test_byte_mutations_never_crash(data: bytes, edits: list[tuple[str, int, int]]) -> None:
    buf = bytearray(data)
    for kind, pos, value in edits:
        i = pos % (len(buf) + 1)
        if kind == "insert":
            buf.insert(i, value)
        elif buf and i < len(buf):
            if kind == "flip":
                buf[i] = value
            else:
                del buf[i]
    _only_diagnoses(bytes(buf))


TOKENS = ["attention", "transformer", "mask", "let", "{", "}", "(", ")", "[", "]", "=", ",",
          "&", "|", "!", "-", "+", "*", "//", "0", "-1", "1e9", "99999999999999999999", "heads",
          "d_model", "kv_heads", "causal", "window", "rope", "global", "true", "none", "#",
          "1e999", "1e39", "1e-300", "4611686018427387904", "prefix(1000000000000000000)",
          "random(blocks = 100000000, block = 1)", "window(left = 10000000)",
          " | ".join(["causal"] * 70), " + ".join(["1"] * 70), "scale", "softcap", "theta"]


@SETTINGS
@given(st.sampled_from(EXAMPLE_BYTES), st.lists(
    st.tuples(st.sampled_from(["replace", "insert", "delete", "duplicate"]),
              st.integers(0, 10**6), st.sampled_from(TOKENS)), min_size=1, max_size=6))
def test_token_mutations_never_crash(data: bytes, edits: list[tuple[str, int, str]]) -> None:
    tokens = data.decode().split(" ")
    for kind, pos, token in edits:
        i = pos % len(tokens)
        if kind == "replace":
            tokens[i] = token
        elif kind == "insert":
            tokens.insert(i, token)
        elif kind == "delete" and len(tokens) > 1:
            del tokens[i]
        else:
            tokens.insert(i, tokens[i])
    _only_diagnoses(" ".join(tokens).encode())
