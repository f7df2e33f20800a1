"""HTTP API modules registered on the server by :func:`reviewbot.app.create_app`."""
