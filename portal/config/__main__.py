"""`python -m portal.config`: the settings, their values and where each came from (portal.config_cli)."""

from portal.config_cli import main

raise SystemExit(main())
