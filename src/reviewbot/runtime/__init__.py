"""The work, cut by subsystem: ingestion, review, merge and external reviewers.

Nothing here imports the server, the command line or the composition root, and nothing
here knows an HTTP status: errors carry a ``code`` the server maps.
"""
