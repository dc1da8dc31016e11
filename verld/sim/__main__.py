"""`python -m verld.sim` runs the simulated device."""

from __future__ import annotations

from verld.sim.main import main

raise SystemExit(main())
