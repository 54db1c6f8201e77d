"""Editors and notebooks (issue 29): the language server driven over stdio as an editor
drives it, the Pygments lexer and the TextMate grammar on every example, Jupyter's HTML view
and the SVG pictures, and progress bars only on a terminal."""

from __future__ import annotations

import io
import json
import re
import selectors
import subprocess
import sys
from pathlib import Path

import pytest

from attndsl.check.vocabulary import DEFINITIONS, calls
from attndsl.fmt import format_module
from attndsl.parser import decode, parse

from .conftest import EXAMPLES, ROOT

BROKEN = """let W = 8

attention a {
    d_model = 64
    heads   = -4
    mask    = causal & windo(left = W)
}
"""
UNFORMATTED = "let  W=8\nattention b { d_model=64\n heads=4 mask=causal&window(left=W,right=0) }\n"


class Client:
    """A minimal LSP client over the server's stdin/stdout (Content-Length framing)."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "attndsl.cli", "lsp"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)
        self.next_id = 0
        self.notes: list[dict] = []
        self.buffer = b""
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.proc.stdout, selectors.EVENT_READ)

    def send(self, method: str, params: dict, request: bool = True) -> int | None:
        message = {"jsonrpc": "2.0", "method": method, "params": params}
        if request:
            self.next_id += 1
            message["id"] = self.next_id
        body = json.dumps(message).encode()
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.proc.stdin.flush()
        return message.get("id")

    def read(self, timeout: float = 60.0) -> dict:
        while True:
            head, sep, rest = self.buffer.partition(b"\r\n\r\n")
            if sep:
                length = int(re.search(rb"Content-Length: (\d+)", head).group(1))
                if len(rest) >= length:
                    self.buffer = rest[length:]
                    return json.loads(rest[:length])
            assert self.selector.select(timeout), "the server did not answer"
            chunk = self.proc.stdout.read1(65536)
            assert chunk, self.proc.stderr.read().decode()
            self.buffer += chunk

    def request(self, method: str, params: dict) -> dict:
        wanted = self.send(method, params)
        while True:
            message = self.read()
            if message.get("id") == wanted and "method" not in message:
                assert "error" not in message, message
                return message["result"]
            if "method" in message:
                self.notes.append(message)

    def notification(self, method: str) -> dict:
        while True:
            found = next((n for n in self.notes if n["method"] == method), None)
            if found:
                self.notes.remove(found)
                return found["params"]
            self.notes.append(self.read())

    def close(self) -> None:
        self.request("shutdown", None)
        self.send("exit", None, request=False)
        self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def client():
    c = Client()
    caps = c.request("initialize", {"processId": None, "rootUri": None, "capabilities": {}})
    c.send("initialized", {}, request=False)
    c.capabilities = caps["capabilities"]
    yield c
    c.close()


def _open(client: Client, uri: str, text: str) -> dict:
    client.send("textDocument/didOpen", {"textDocument": {
        "uri": uri, "languageId": "attn", "version": 1, "text": text}}, request=False)
    return client.notification("textDocument/publishDiagnostics")


def test_server_reports_every_error_located(client) -> None:
    caps = client.capabilities
    for feature in ("hoverProvider", "definitionProvider", "documentFormattingProvider",
                    "completionProvider"):
        assert caps.get(feature), feature
    found = _open(client, "file:///tmp/broken.attn", BROKEN)
    assert found["uri"] == "file:///tmp/broken.attn"
    by_line = {d["range"]["start"]["line"]: d for d in found["diagnostics"]}
    assert set(by_line) == {4, 5}, found
    assert "heads must be a positive integer" in by_line[4]["message"]
    assert by_line[4]["range"]["start"]["character"] == BROKEN.splitlines()[4].index("-4")
    assert "unknown mask `windo`" in by_line[5]["message"]
    assert "help: did you mean `window`?" in by_line[5]["message"]
    # fixing the file as the user types clears them
    client.send("textDocument/didChange", {
        "textDocument": {"uri": "file:///tmp/broken.attn", "version": 2},
        "contentChanges": [{"text": BROKEN.replace("-4", "4").replace("windo", "window")}]},
        request=False)
    assert client.notification("textDocument/publishDiagnostics")["diagnostics"] == []


def test_server_formats_as_fmt_does(client) -> None:
    uri = "file:///tmp/unformatted.attn"
    assert _open(client, uri, UNFORMATTED)["diagnostics"] == []
    edits = client.request("textDocument/formatting", {
        "textDocument": {"uri": uri}, "options": {"tabSize": 4, "insertSpaces": True}})
    assert len(edits) == 1 and edits[0]["range"]["start"] == {"line": 0, "character": 0}
    assert edits[0]["newText"] == format_module(parse(decode(UNFORMATTED.encode(), "x")))


def test_server_hovers_completes_and_finds_definitions(client) -> None:
    uri = "file:///tmp/longformer.attn"
    text = (ROOT / "examples/longformer.attn").read_text()
    _open(client, uri, text)
    lines = text.splitlines()
    row = next(i for i, line in enumerate(lines) if "mask local_and_global" in line)
    at = lines[row].index("window") + 2

    def ask(method: str, line: int, character: int):
        return client.request(method, {"textDocument": {"uri": uri},
                                       "position": {"line": line, "character": character}})

    hover = ask("textDocument/hover", row, at)["contents"]["value"]
    assert "q - a <= k <= q + c" in hover  # the primitive's row of docs/LANGUAGE.md
    key = next(i for i, line in enumerate(lines) if line.strip().startswith("sparsity"))
    assert "dense" in ask("textDocument/hover", key, 6)["contents"]["value"]
    layer = next(i for i, line in enumerate(lines) if line.startswith("attention longformer_attn"))
    plan = ask("textDocument/hover", layer, 14)["contents"]["value"]
    assert "parameters" in plan and "block_sparse" in plan
    use = next(i for i, line in enumerate(lines) if "= local_and_global" in line)
    target = ask("textDocument/definition", use, lines[use].index("local_and_global") + 3)
    assert target["range"]["start"] == {"line": row, "character": len("mask ")}
    items = ask("textDocument/completion", use, len(lines[use]))["items"]
    labels = {i["label"] for i in items}
    assert {"window", "causal", "random", "local_and_global"} <= labels
    snippet = next(i for i in items if i["label"] == "chunked")
    assert snippet["insertText"] == "chunked(n = ${1})" and snippet["insertTextFormat"] == 2
    key_items = ask("textDocument/completion", key, 4)["items"]
    assert {"d_model", "kv_heads", "sparsity"} <= {i["label"] for i in key_items}
    _open(client, "file:///tmp/call.attn", "attention c {\n    mask = window(\n}\n")
    items = client.request("textDocument/completion", {
        "textDocument": {"uri": "file:///tmp/call.attn"},
        "position": {"line": 1, "character": len("    mask = window(")}})["items"]
    assert [i["label"] for i in items] == ["left", "right", "align"]


def test_pygments_lexer_reads_every_example() -> None:
    from pygments.lexers import get_lexer_by_name, get_lexer_for_filename
    from pygments.token import Error, Keyword, Name, Text

    lexer = get_lexer_by_name("attn")  # through the installed entry point
    assert type(get_lexer_for_filename("x.attn")) is type(lexer)
    for path in EXAMPLES:
        tokens = list(lexer.get_tokens(path.read_text()))
        assert not [t for t in tokens if t[0] in Error or (t[0] is Text and t[1].strip())], path
        declared = [v for t, v in tokens if t in Keyword.Declaration]
        assert declared and set(declared) <= set(DEFINITIONS)
        assert any(t in Name.Builtin for t, _ in tokens), path


def test_docs_attn_blocks_lex_cleanly() -> None:
    """The docs' ```attn code blocks (rendered with the lexer) hold no error token."""
    from pygments.lexers import get_lexer_by_name
    from pygments.token import Error

    lexer = get_lexer_by_name("attn")
    blocks = [b for doc in ("README.md", "docs/LANGUAGE.md")
              for b in re.findall(r"^```attn\n(.*?)^```", (ROOT / doc).read_text(), re.M | re.S)]
    assert len(blocks) >= 6
    for block in blocks:
        assert not [t for t in lexer.get_tokens(block) if t[0] in Error], block


def _textmate_scopes(grammar: dict, text: str) -> list[tuple[str, str]]:
    """(text, scope) of each match of the grammar's top-level `match` patterns, scanning as a
    TextMate engine does: at each position the earliest match, the first pattern on ties."""
    patterns = [(re.compile(p["match"], re.MULTILINE), p) for p in grammar["patterns"]]
    out, pos = [], 0
    while pos < len(text):
        best = None
        for rx, p in patterns:
            m = rx.search(text, pos)
            if m and m.end() > m.start() and (best is None or m.start() < best[0].start()):
                best = (m, p)
        if best is None:
            break
        m, p = best
        if "captures" in p:
            out += [(m.group(int(i)), c["name"]) for i, c in p["captures"].items()]
        else:
            out.append((m.group(), p["name"]))
        pos = m.end()
    return out


def test_textmate_grammar_scopes_every_keyword_and_primitive() -> None:
    folder = ROOT / "editors/vscode"
    package = json.loads((folder / "package.json").read_text())
    (contributed,) = package["contributes"]["grammars"]
    grammar = json.loads((folder / contributed["path"]).read_text())
    assert grammar["scopeName"] == contributed["scopeName"] == "source.attn"
    assert (folder / package["contributes"]["languages"][0]["configuration"]).is_file()
    listed = re.search(r"\(([^)]*)\)", next(p["match"] for p in grammar["patterns"]
                                            if p.get("name") == "support.function.builtin.attn"))
    assert set(listed.group(1).split("|")) == set(calls())  # no drift from the checker
    for path in EXAMPLES:
        text = re.sub(r"#[^\n]*", "", path.read_text())
        scopes = _textmate_scopes(grammar, path.read_text())
        scoped = {(word, scope) for word, scope in scopes}
        for word in re.findall(r"^\s*(let|mask|attention|transformer)\s+\w", text, re.M):
            assert (word, "keyword.declaration.attn") in scoped, (path, word)
        for word in set(re.findall(r"\b(\w+)\s*\(", text)) & set(calls()):
            assert (word, "support.function.builtin.attn") in scoped, (path, word)
        assert all(s.endswith(".attn") for _, s in scopes)


def test_progress_only_on_a_terminal(tmp_path: Path) -> None:
    from attndsl.progress import Bar, progress_bar, report, reporting

    assert progress_bar(stream=io.StringIO()) is None  # not a terminal
    assert progress_bar(quiet=True) is None

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    screen = Terminal()
    bar = progress_bar(stream=screen)
    assert isinstance(bar, Bar)
    with reporting(bar):
        report("reading", 3, 10)
    assert "reading" in screen.getvalue() and "3/10" in screen.getvalue()
    report("nowhere", 1, 2)  # no current bar: nothing, no error
    done = subprocess.run([sys.executable, "-m", "attndsl.cli", "verify",
                           str(ROOT / "examples/mistral_local.attn"), "--lengths", "7",
                           "--targets", "ort-cpu"], capture_output=True, text=True)
    assert done.returncode == 0 and done.stderr == ""  # stderr is a pipe: no bar


def _svg_texts(svg: str) -> list[str]:
    import xml.etree.ElementTree as ET

    root = ET.fromstring(svg)  # well-formed
    return ["".join(e.itertext()) for e in root.iter("{http://www.w3.org/2000/svg}text")]


def test_notebook_html_shows_picture_plans_and_size() -> None:
    import attndsl
    from attndsl.ir import parameter_count

    program = attndsl.load(ROOT / "examples/bloom_alibi.attn")
    layer = program["bloom_attn"]
    html = layer._repr_html_()
    assert f"{parameter_count(layer.spec):,} parameters" in html
    svg = html[html.index("<svg"):html.index("</svg>") + 6]
    texts = _svg_texts(svg)
    assert "key index k →" in texts and "query index q →" in texts
    assert "visible (coloured by the score bias)" in texts and "hidden" in texts
    assert "score bias" in texts and 'linearGradient id="bias"' in svg  # the colour bar
    assert sum(t.startswith("head ") for t in texts) == layer.spec.heads  # ALiBi differs by head
    assert svg.count("data:image/png;base64,") == layer.spec.heads
    for target in ("ort-cpu", "ort-cuda", "portable", "torch"):
        assert f"<td>{target}</td>" in html
    assert "<code>dense</code>" in html  # ALiBi, unbounded causal: dense on torch
    assert program._repr_html_().count("<svg") == len(program)
    plain = attndsl.load(ROOT / "examples/longformer.attn")["longformer_attn"]._repr_html_()
    assert 'linearGradient id="bias"' not in plain and "block_sparse" in plain
    # drawn at the length `show` picks: past the window's 65 keys (67), whose last tick is 66
    assert "66" in _svg_texts(plain[plain.index("<svg"):plain.index("</svg>") + 6])


def test_show_svg_and_bench_svg_plot_are_labelled(tmp_path: Path) -> None:
    from attndsl.cli import main
    from attndsl.svg import latency_svg

    out = tmp_path / "mask.svg"
    assert main(["show", str(ROOT / "examples/t5_relative.attn"), "--name", "t5_encoder",
                 "--length", "30", "--svg", str(out)]) == 0
    texts = _svg_texts(out.read_text())
    assert "29" in texts and "query index q →" in texts
    plot = latency_svg({"a: torch": [(1024, 3.0), (4096, 40.0)],
                        "a: ort-cpu": [(1024, 1.0), (4096, 5.0)]}, [(0, 0, 255), (255, 0, 0)])
    texts = _svg_texts(plot)
    assert "sequence length L (tokens, log scale)" in texts
    assert "latency (ms, log scale)" in texts
    assert {"1024", "4096", "1", "10", "100", "a: torch", "a: ort-cpu"} <= set(texts)
