"""Store backends, imported as ``discovery_sync.backends.<name>``; connect() loads them lazily."""
