"""reviewbot: CI-gated native reviews pinned to the head SHA, and merges fenced by leases."""

__version__ = "0.1.0"
