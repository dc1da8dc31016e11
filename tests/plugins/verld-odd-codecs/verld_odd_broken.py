"""A codec plugin whose import fails: it needs a package that is not installed."""

from __future__ import annotations

import verld_odd_missing_dependency  # type: ignore[import-not-found]  # (not installed: the point)

BROKEN = verld_odd_missing_dependency.SPEC
