"""Wiring: worker pool, outbox drainer, sessions and tool registry, run folders."""
