-- Calls of session-scoped tools (POST /api/v1/tools/{name}): which session called, whose
-- registry answered, and how it ended. A write made through mutate_workflow_db is
-- attributed to the session that made it here; refusals are kept too.
-- outcome: ok, or the error code of the refusal (not_session_owner, permission_denied, ...).
CREATE TABLE IF NOT EXISTS session_tool_calls (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL,
    owner_session_id TEXT,
    run_id TEXT NOT NULL,
    tool TEXT NOT NULL,
    outcome TEXT NOT NULL,
    detail TEXT NOT NULL DEFAULT '',
    called_at TEXT NOT NULL
);

CREATE INDEX IF NOT EXISTS session_tool_calls_by_session ON session_tool_calls (session_id, id);

CREATE INDEX IF NOT EXISTS session_tool_calls_by_run ON session_tool_calls (run_id, id);
