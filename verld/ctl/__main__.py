"""`python -m verld.ctl`: run verlctl."""

from verld.ctl.cli import main

raise SystemExit(main())
