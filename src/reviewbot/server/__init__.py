"""The HTTP face (aiohttp): the application over a :class:`reviewbot.service.Service`.

``app`` builds it, ``errors`` is the one place that maps error codes to HTTP statuses,
``auth`` checks bearer tokens, ``body`` reads bodies within their limits, and one module
per group of routes: ``webhooks``, ``entry`` (Crew and API reviews), ``reads``, ``leases``,
``tools`` and ``health``.
"""
