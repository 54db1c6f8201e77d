"""A Pygments lexer for `.attn` files, registered as `attn` (pyproject's `pygments.lexers`
entry point): `pygmentize -l attn spec.attn`, and ```` ```attn ```` code blocks in docs that
Pygments renders. Needs the `editor` extra (Pygments). The words come from the checker's tables
(check/vocabulary.py), as the language server's completion does."""

from __future__ import annotations

from typing import ClassVar

from pygments.lexer import RegexLexer, bygroups, words
from pygments.token import (
    Comment,
    Keyword,
    Name,
    Number,
    Operator,
    Punctuation,
    Text,
    Whitespace,
)

from .check.vocabulary import DEFINITIONS, calls

__all__ = ["AttnLexer"]

CONSTANTS = ("true", "false", "none", "auto", "sqrt", "q", "k", "qd", "kd", "L", "S")


class AttnLexer(RegexLexer):
    """attndsl's attention language (docs/LANGUAGE.md)."""

    name = "attndsl"
    aliases = ("attn", "attndsl")
    filenames = ("*.attn",)
    mimetypes = ("text/x-attn",)
    url = "https://github.com/attndsl/attndsl"

    tokens: ClassVar[dict] = {
        "root": [
            (r"[ \t\f\r\n]+", Whitespace),
            (r"#[^\n]*", Comment.Single),
            (r"(let|mask|attention|transformer)([ \t]+)([A-Za-z_]\w*)",
             bygroups(Keyword.Declaration, Whitespace, Name.Class)),
            (words(DEFINITIONS, suffix=r"\b"), Keyword.Declaration),
            (r"([A-Za-z_]\w*)([ \t]*)(=)(?!=)", bygroups(Name.Attribute, Whitespace, Operator)),
            (words(tuple(calls()), suffix=r"(?=[ \t]*\()"), Name.Builtin),
            (r"[A-Za-z_]\w*(?=[ \t]*\()", Name.Function),
            (words(CONSTANTS, prefix=r"\b", suffix=r"\b"), Keyword.Constant),
            (words(tuple(calls()), prefix=r"\b", suffix=r"\b"), Name.Builtin),  # `causal`
            (r"(\d+\.\d*|\.\d+)([eE][+-]?\d+)?|\d+[eE][+-]?\d+", Number.Float),
            (r"\d+", Number.Integer),
            (r"\*\*|//|<=|>=|==|!=|[-+*/%<>&|!=]", Operator),
            (r"[{}()\[\],]", Punctuation),
            (r"[A-Za-z_]\w*", Name),
            (r".", Text),
        ],
    }
