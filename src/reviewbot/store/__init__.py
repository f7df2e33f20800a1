"""Persistence. Callers use :class:`~reviewbot.store.database.Database`; SQLite is the default."""
