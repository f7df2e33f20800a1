"""The status page: server-rendered HTML over the store (see docs/status-page.md)."""
