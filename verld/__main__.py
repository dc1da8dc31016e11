"""`python -m verld` runs the daemon."""

from __future__ import annotations

from verld.daemon import main

raise SystemExit(main())
