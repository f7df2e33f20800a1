"""Ingestion: the worker pool that drains the delivery journal, and the gate runner."""
