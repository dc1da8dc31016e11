"""`python -m verld.mqtt` runs the fleet bridge."""

from __future__ import annotations

from verld.mqtt.main import main

raise SystemExit(main())
