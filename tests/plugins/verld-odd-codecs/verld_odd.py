"""Codec plugins that import but cannot be used: not a spec, named otherwise, a
built-in's name."""

from __future__ import annotations

from verld.codec.api import CodecSpec

#: the entry point `notaspec`: not a CodecSpec
NOT_A_SPEC = {"name": "notaspec"}


def _never(cfg: object) -> object:
    raise AssertionError("an unusable plugin's factory ran")


#: the entry point `misnamed`: a spec named otherwise
MISNAMED = CodecSpec("other", host=_never, device=_never, device_ping=_never)  # type: ignore[arg-type]
#: the entry point `verl`: a built-in's name
VERL = CodecSpec("verl", host=_never, device=_never, device_ping=_never)  # type: ignore[arg-type]
