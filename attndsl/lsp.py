"""`attndsl lsp`: a Language Server over stdio (pygls, lsprotocol) for `.attn` files: the
checker's diagnostics as the user types, `fmt` as document formatting, hover, completion and
go-to-definition, each answered by `editor.py`. Needs the `editor` extra
(`pip install attndsl[editor]`)."""

from __future__ import annotations

from pathlib import PurePosixPath
from urllib.parse import unquote, urlparse

from . import __version__, editor
from .errors import UsageError

__all__ = ["serve", "server"]


def server():
    """The configured pygls LanguageServer (not started)."""
    try:
        from lsprotocol import types as t
        from pygls.lsp.server import LanguageServer
    except ImportError:
        raise UsageError("the language server needs pygls\n  = help: pip install "
                         "'attndsl[editor]'") from None

    ls = LanguageServer("attndsl", __version__, text_document_sync_kind=t.TextDocumentSyncKind.Full)

    def doc(uri: str):
        return ls.workspace.get_text_document(uri)

    def at(document, position: t.Position) -> tuple[int, int]:
        p = document.position_from_client_units(position)
        return p.line, p.character

    def to_range(document, start: tuple[int, int], end: tuple[int, int]) -> t.Range:
        return document.range_to_client_units(t.Range(t.Position(*start), t.Position(*end)))

    def publish(uri: str, version: int | None) -> None:
        document = doc(uri)
        name = PurePosixPath(unquote(urlparse(uri).path)).name or uri
        found = []
        for p in editor.diagnostics(document.source, name):
            related = [t.DiagnosticRelatedInformation(
                t.Location(uri, to_range(document, s, e)), note) for s, e, note in p.related]
            found.append(t.Diagnostic(to_range(document, p.start, p.end), p.message,
                                      severity=t.DiagnosticSeverity.Error, source="attndsl",
                                      related_information=related or None))
        ls.text_document_publish_diagnostics(t.PublishDiagnosticsParams(uri, found, version))

    @ls.feature(t.TEXT_DOCUMENT_DID_OPEN)
    def did_open(params: t.DidOpenTextDocumentParams) -> None:
        publish(params.text_document.uri, params.text_document.version)

    @ls.feature(t.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(params: t.DidChangeTextDocumentParams) -> None:
        publish(params.text_document.uri, params.text_document.version)

    @ls.feature(t.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(params: t.DidCloseTextDocumentParams) -> None:
        ls.text_document_publish_diagnostics(t.PublishDiagnosticsParams(
            params.text_document.uri, []))

    @ls.feature(t.TEXT_DOCUMENT_FORMATTING)
    def formatting(params: t.DocumentFormattingParams) -> list[t.TextEdit] | None:
        document = doc(params.text_document.uri)
        text = editor.formatted(document.source)
        if text is None or text == document.source:
            return None if text is None else []
        return [t.TextEdit(to_range(document, (0, 0), (len(document.lines), 0)), text)]

    @ls.feature(t.TEXT_DOCUMENT_HOVER)
    def hover(params: t.HoverParams) -> t.Hover | None:
        document = doc(params.text_document.uri)
        text = editor.hover(document.source, *at(document, params.position))
        if text is None:
            return None
        return t.Hover(t.MarkupContent(t.MarkupKind.Markdown, text))

    kinds = {"keyword": t.CompletionItemKind.Keyword, "key": t.CompletionItemKind.Property,
             "function": t.CompletionItemKind.Function,
             "parameter": t.CompletionItemKind.Variable, "value": t.CompletionItemKind.Value,
             "reference": t.CompletionItemKind.Reference}

    @ls.feature(t.TEXT_DOCUMENT_COMPLETION,
                t.CompletionOptions(trigger_characters=["(", "=", ",", " "]))
    def complete(params: t.CompletionParams) -> t.CompletionList:
        document = doc(params.text_document.uri)
        items = [t.CompletionItem(c.label, kind=kinds[c.kind], detail=c.detail,
                                  insert_text=c.insert,
                                  insert_text_format=t.InsertTextFormat.Snippet
                                  if "${" in c.insert else t.InsertTextFormat.PlainText)
                 for c in editor.completions(document.source, *at(document, params.position))]
        return t.CompletionList(is_incomplete=False, items=items)

    @ls.feature(t.TEXT_DOCUMENT_DEFINITION)
    def definition(params: t.DefinitionParams) -> t.Location | None:
        document = doc(params.text_document.uri)
        found = editor.definition(document.source, *at(document, params.position))
        if found is None:
            return None
        return t.Location(params.text_document.uri, to_range(document, *found))

    return ls


def serve() -> int:
    """Run the server on stdin/stdout until the client exits."""
    server().start_io()
    return 0
