"""`python -m soaklib` (what tools/soak runs)."""

from __future__ import annotations

from soaklib.cli import main

raise SystemExit(main())
