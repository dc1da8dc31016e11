"""roff for man(7): escaping, markdown's inline markup, and a page builder.

Output is plain ASCII roff using only the classic man macros (.TH .SH .SS .TP .PP
.IP .RS .RE .nf .fi .B .I), so groff, mandoc and any man(1) render it alike.
Every `-` is written `\\-` (a real minus, what a reader types), a backslash `\\e`,
a line that would start with `.` or `'` gets a leading `\\&`, and characters
outside ASCII become roff glyph names.
"""

from __future__ import annotations

import re

#: glyphs the docs use, by their roff names; others become \[uXXXX]
GLYPHS = {
    "\u2014": r"\(em",  # em dash
    "\u2013": r"\(en",  # en dash
    "\u2265": r"\(>=",
    "\u2264": r"\(<=",
    "\u2192": r"\(->",
    "\u2190": r"\(<-",
    "\u00d7": r"\(mu",
    "\u2026": "...",
    "\u2018": r"\(oq",
    "\u2019": r"\(cq",
    "\u201c": r"\(lq",
    "\u201d": r"\(rq",
    "\u00b5": r"\(mc",
    "\u00b0": r"\(de",
    "\u2022": r"\(bu",
    "\u00a0": r"\ ",
}

#: what `escape` writes for the characters roff reads specially (a tab: a space)
_SPECIAL = {"\\": r"\e", "-": r"\-", "\t": " ", **GLYPHS}
_ESCAPES = str.maketrans(_SPECIAL)
#: in code quotes stay as typed (`'` would otherwise render as a curly quote)
_LITERAL = str.maketrans({**_SPECIAL, "'": r"\(aq", "`": r"\(ga"})
_OTHER = re.compile(r"[^\x00-\x7f]")  #: a glyph without a name in GLYPHS: \[uXXXX]

_INLINE = re.compile(
    r"`(?P<code>[^`]+)`"
    r"|\*\*(?P<bold>.+?)\*\*"
    r"|(?<![\w*])\*(?P<em>[^*\s](?:[^*]*[^*\s])?)\*(?![\w*])"
    r"|\[(?P<text>[^\]]+)\]\((?P<url>[^)\s]+)\)"
)


def escape(text: str, *, literal: bool = False) -> str:
    """`text` as roff text (no macros, no font changes); `literal` also keeps quotes
    and backquotes as typed (for code)."""
    roff = text.translate(_LITERAL if literal else _ESCAPES)
    return _OTHER.sub(lambda m: f"\\[u{ord(m[0]):04X}]", roff)


def bold(text: str, outer: str = "R") -> str:
    return rf"\fB{escape(text, literal=True)}\f{outer}"


def italic(text: str, outer: str = "R") -> str:
    return rf"\fI{escape(text, literal=True)}\f{outer}"


def inline(md: str, outer: str = "R") -> str:
    """Markdown inline markup to roff: `code` and **strong** in bold, *emphasis* in
    italics, [links](url) as their text; everything else escaped. Whitespace runs
    (line breaks included) become one space."""
    md = " ".join(md.split())
    out = []
    pos = 0
    for m in _INLINE.finditer(md):
        out.append(escape(md[pos : m.start()]))
        if m["code"] is not None:
            out.append(bold(m["code"], outer))
        elif m["bold"] is not None:
            out.append(rf"\fB{inline(m['bold'], 'B')}\f{outer}")
        elif m["em"] is not None:
            out.append(rf"\fI{inline(m['em'], 'I')}\f{outer}")
        elif re.fullmatch(r"[\w-]+\.md(#.*)?", m["url"]) and plain(m["text"]) == m["url"]:
            out.append(escape(f"docs/{m['url']}"))  # a link from one doc to another
        else:
            out.append(inline(m["text"], outer))
        pos = m.end()
    out.append(escape(md[pos:]))
    return "".join(out)


def plain(md: str) -> str:
    """Markdown inline markup reduced to its text (for headings)."""
    md = " ".join(md.split())
    return _INLINE.sub(lambda m: m["code"] or m["bold"] or m["em"] or m["text"], md)


def text_line(roff: str) -> str:
    """One input line of text: protected when it would read as a request."""
    roff = roff.strip()
    return rf"\&{roff}" if roff.startswith((".", "'")) else roff


def quote_arg(text: str) -> str:
    """A macro argument: plain text escaped and double-quoted."""
    return '"' + escape(text).replace('"', r"\(dq") + '"'


class Page:
    """One man page being written: call the methods in reading order, then `render()`."""

    def __init__(self, name: str, section: int, date: str, source: str, manual: str) -> None:
        self.lines: list[str] = [
            f".TH {name.upper()} {section} {quote_arg(date)} {quote_arg(source)} "
            f"{quote_arg(manual)}",
            ".nh",  # no hyphenation: option names and paths stay whole
            ".ad l",  # ragged right: no stretched spaces around long words
        ]

    def comment(self, text: str) -> None:
        self.lines.append(rf".\" {text}")

    def sh(self, title: str) -> None:
        self.lines.append(f".SH {quote_arg(title.upper())}")

    def ss(self, title: str) -> None:
        self.lines.append(f".SS {quote_arg(title)}")

    def raw(self, *lines: str) -> None:
        """Lines already in roff (each a request or a protected text line)."""
        self.lines.extend(lines)

    def para(self, roff: str) -> None:
        """A paragraph of roff text (already escaped)."""
        self.lines += [".PP", text_line(roff)]

    def text(self, roff: str) -> None:
        """Text going on in the current paragraph (or tagged paragraph's body)."""
        if roff.strip():
            self.lines.append(text_line(roff))

    def tp(self, tag: str, body: str = "") -> None:
        """A tagged paragraph: `tag` and `body` are roff text."""
        self.lines += [".TP", text_line(tag)]
        self.text(body)

    def bullet(self, roff: str) -> None:
        self.lines += [r".IP \(bu 2", text_line(roff)]

    def code(self, lines: list[str]) -> None:
        """A literal block, indented, not filled."""
        self.lines += [".PP", ".RS 4", ".nf"]
        for line in lines:
            roff = escape(line.rstrip(), literal=True)
            self.lines.append(rf"\&{roff}" if not roff or roff.startswith((".", "'")) else roff)
        self.lines += [".fi", ".RE"]

    def indent(self) -> None:
        self.lines.append(".RS")

    def dedent(self) -> None:
        self.lines.append(".RE")

    def render(self) -> str:
        return "\n".join(self.lines) + "\n"
