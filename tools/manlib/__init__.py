"""tools/manpages' code: verld's man pages built from their one source each.

`roff` escapes text and builds man(7) pages, `markdown` reads the docs' headings,
paragraphs, code blocks, lists and tables, `argsource` turns an argparse parser
into SYNOPSIS/OPTIONS/COMMANDS, `configpage` builds verld.yaml(5) from the config
schema and docs/config.md, `pages` says what each page holds, `cli` writes or
checks man/.
"""
