"""Whether this verld runs compiled, and the one mypyc hint its code carries.

Strategy: the hot path (codecs, window, queue, session, the API's message path) may be
compiled with mypyc (`make compiled`, docs/benchmarks.md); the pure-Python modules are the
same source and behave byte for byte alike. `build()` says which one runs (`verld
--version`): a compiled module is an extension module, so its `__file__` is not a `.py`.
`mypyc_attr` lets a compiled class keep interpreted subclasses (a codec plugin's
`Bounded`): mypy_extensions' decorator where it is installed (it is, wherever mypyc
is), else one that changes nothing.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mypy_extensions import mypyc_attr
else:
    try:
        from mypy_extensions import mypyc_attr
    except ImportError:  # (the pure build needs no mypy_extensions)

        def mypyc_attr(*_attrs, **_kwattrs):
            return lambda cls: cls


def build() -> str:
    """ "pure", or "compiled (mypyc)" when the session's module is an extension module."""
    spec = importlib.util.find_spec("verld.session.session")
    origin = spec.origin if spec is not None else None
    return "pure" if origin is None or origin.endswith(".py") else "compiled (mypyc)"


__all__ = ["build", "mypyc_attr"]
