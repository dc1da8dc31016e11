"""Unknown keys and misspelt words: the closest valid name, or the real name of an alias.

Strategy: a message that says "did you mean 'baudrate'?" fixes the file in one
edit; a list of every valid key makes the user search. So an unknown key is first
normalised (case, dashes, spaces), then looked up among names other tools use for
the same setting (`baud`, `retries`, `log_level`, ...), and only then matched by
spelling. A top-level key may also be a key that belongs inside some section
(`baudrate:` without `device:` above it), so the section tables are searched too,
by name and alias before any spelling: `did you mean 'device.baudrate'?` is the fix,
a near spelling of a section or flat key (`adapter`) is not.

Nothing here knows the config model: callers pass the valid names, which keeps
this module free of imports from the rest of the package.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Iterable, Mapping
from typing import Any

# names used by other tools (and by verld's two formats for each other) → verld's keys
_ALIASES: Mapping[str, tuple[str, ...]] = {
    "max_wait_time": ("timeout",),
    "wait": ("timeout",),
    "wait_time": ("timeout",),
    "timeout_s": ("timeout",),
    "timeout_sec": ("timeout",),
    "timeout_secs": ("timeout",),
    "timeout_seconds": ("timeout",),
    "read_timeout": ("timeout",),
    "retries": ("retry",),
    "max_retries": ("retry",),
    "retry_count": ("retry",),
    "baud": ("baudrate",),
    "baud_rate": ("baudrate",),
    "speed": ("baudrate",),
    "path": ("port", "socket"),
    "device": ("port",),
    "tty": ("port",),
    "serial": ("port",),
    "url": ("port",),
    "dev": ("port",),
    "socket_path": ("socket",),
    "sock": ("socket",),
    "loglevel": ("level", "log_level"),
    "log_level": ("level",),
    "level": ("log_level",),
    "verbosity": ("level", "log_level"),
    "adapter": ("codec",),
    "codec": ("adapter",),
    "protocol": ("codec", "adapter"),
    "framing": ("codec", "adapter"),
    "data_bits": ("bytesize",),
    "databits": ("bytesize",),
    "stop_bits": ("stopbits",),
    "flow_control": ("rtscts",),
    "rts_cts": ("rtscts",),
    "hardware_flow_control": ("rtscts",),
    "address": ("host", "listen"),
    "hostname": ("host",),
    "ip": ("host",),
    "bind": ("listen",),
    "permissions": ("mode",),
    "perms": ("mode",),
    "max_size": ("max_payload",),
    "keepalive": ("interval",),
    "ping_interval": ("interval",),
    "newline": ("terminator",),
    "eol": ("terminator",),
    "delimiter": ("terminator",),
}


def closest(word: str, options: Iterable[str]) -> str | None:
    """The option spelt most like `word`, if any is close enough to be worth offering."""
    close = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    return close[0] if close else None


def _norm(key: str) -> str:
    return key.strip().lower().replace("-", "_").replace(" ", "_")


def suggest(key: str, valid: Iterable[str], *, spelling: bool = True) -> str | None:
    """The valid name `key` was probably meant to be: same name, an alias, or (unless
    `spelling` is false) a near spelling."""
    names = list(valid)
    norm = _norm(key)
    if norm in names:
        return norm
    for target in _ALIASES.get(norm, ()):
        if target in names:
            return target
    return closest(norm, names) if spelling else None


def unknown_key(key: Any, valid: Collection[str]) -> str:
    """The message for a key that is not one of `valid`."""
    if not isinstance(key, str):
        word = "null" if key is None else str(key).lower() if isinstance(key, bool) else repr(key)
        return f"keys must be strings, and YAML reads this one as {word}; quote it"
    best = suggest(key, valid)
    if best is not None:
        return f"unknown key; did you mean '{best}'?"
    return f"unknown key; valid keys here: {', '.join(valid)}"


def section_path(key: str, sections: Mapping[str, Collection[str]]) -> str | None:
    """`section.key` for a key that belongs inside a section, by its name or an alias
    (not by spelling); the first section that has it wins (`timeout`: device.timeout)."""
    norm = _norm(key)
    for target in (norm, *_ALIASES.get(norm, ())):
        for name, keys in sections.items():
            if target in keys:
                return f"{name}.{target}"
    return None


def _spelt_path(key: str, sections: Mapping[str, Collection[str]]) -> str | None:
    """The section name or `section.key` spelt most like `key`."""
    options: dict[str, str] = {name: name for name in sections}
    for name, keys in sections.items():
        for leaf in keys:
            options.setdefault(leaf, f"{name}.{leaf}")
    best = closest(_norm(key), options)
    return None if best is None else options[best]


def unknown_section(key: Any, sections: Mapping[str, Collection[str]]) -> str:
    """A top-level key of a sectioned file: a section name, or a key of some section.

    `sections` maps each section name to its valid keys. A section's key written at
    the top level is named where it belongs (`baudrate` → `device.baudrate`), before
    any near spelling (so `mode` is `api.mode`, not `modbus`).
    """
    if not isinstance(key, str):
        return unknown_key(key, sections)
    best = (
        suggest(key, sections, spelling=False)
        or section_path(key, sections)
        or _spelt_path(key, sections)
    )
    if best is not None:
        return f"unknown key; did you mean '{best}'?"
    return f"unknown key; valid sections: {', '.join(sections)}"


def unknown_flat_key(
    key: Any, flat: Collection[str], sections: Mapping[str, Collection[str]]
) -> str:
    """A key of a file in the reference flat format (`host`, `port`, ...) that is none
    of `flat`: a flat key by name or alias (`retries` → `retry`), else the section key
    it belongs to (`baudrate` → `device.baudrate`: the flat format has none such), else
    the nearest spelling of either."""
    if not isinstance(key, str):
        return unknown_key(key, flat)
    best = suggest(key, flat, spelling=False)
    path = None if best is not None else section_path(key, sections)
    if best is None and path is None:
        best = closest(_norm(key), flat)
        path = None if best is not None else _spelt_path(key, sections)
    if best is not None:
        return f"unknown key; did you mean '{best}'?"
    if path is None:
        return f"unknown key; valid keys here: {', '.join(flat)}"
    return f"unknown key; did you mean '{path}'? (in sections: the flat format has no such key)"
