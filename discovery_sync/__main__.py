from discovery_sync.tools.cli import main

raise SystemExit(main())
