"""External reviewers: running them (runner), their sessions, the session-scoped tools
and their run folders."""
