"""tools/manpages' code: verld's man pages built from their one source each.

`roff` escapes text and builds man(7) pages, `markdown` reads the docs' headings,
paragraphs, code blocks, lists and tables, `argsource` turns an argparse parser
into SYNOPSIS/OPTIONS/COMMANDS, `configpage` builds verld.yaml(5) from the config
schema and docs/config.md, `pages` says what each page holds, `cli` writes or
checks man/.

Why not argparse-manpage and pandoc (measured with argparse-manpage 4.8 from PyPI and
Debian 12's pandoc 2.17.1.1, issue 37). argparse-manpage builds NAME, SYNOPSIS and
OPTIONS alike on Python 3.11, 3.12 and 3.13, but: its SYNOPSIS is `format_usage()`
split into words, so verld's four ways to run (a `usage=` of several lines) become
one run-on line; it leaves out `-h, --help` and every default; it writes the epilog
as a filled COMMENTS section, so the examples' columns and verlctl's exit codes run
together; it hyphenates (no `.nh`: "LINE OP-TIONS"); and each verlctl command
repeats the three global options and argparse's raw usage text, whose continuation
lines wrap to the margin. Every other section (DESCRIPTION, EXIT STATUS, FILES,
SYSTEMD, SEE ALSO) comes from the docs and the code either way, so the pages would
keep `argsource` for the synopsis forms and the commands and add a second option
writer. pandoc (`-f gfm -t man`) writes a 4-column key table as tbl, whose
"meaning" column is 13 characters wide in an 80-column man(1), hyphenated ("de-
vice"); its output changes with its version (2.17's `\\f[V]` font preamble), so
`--check` would hold only on Debian 12's; it is 165 MB. And verld.yaml(5) is not a
conversion of docs/config.md: it walks the config schema and checks the docs'
rows and defaults against the code, which needs the markdown's structure, not
only its roff. So manlib stays: standard library only, one style for every page.
"""
