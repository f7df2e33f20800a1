"""Entry paths: bytes and headers in, a normalized :class:`~reviewbot.core.models.Trigger` out."""
