import importlib

raise SystemExit(importlib.import_module("discovery_sync.tools.cli").main())  # the CLI, only when run
