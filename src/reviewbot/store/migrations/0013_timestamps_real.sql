-- Every timestamp is REAL: seconds since the epoch, the float the bot's clock gives.
--
-- Until now some tables kept moments as ISO 8601 text and others as REAL. Text now appears
-- only at the edges (API JSON, command output, explain), written by reviewbot.core.clock.iso.
--
-- SQLite cannot change a column's type, and a REAL stored into a TEXT column would be turned
-- back into text, so each column is replaced: add a REAL column, convert every row, drop the
-- old column, give the new one the old name. Names stay the same, rowids and AUTOINCREMENT
-- counters are kept. NOT NULL columns need a default to be added to a table with rows; the
-- store always writes the value, so the 0 is never used.
--
-- An ISO moment converts exactly to the float Python's datetime.timestamp() gives for it:
--   whole seconds of the first 19 characters (YYYY-MM-DDTHH:MM:SS, read as UTC)
--   + the fraction after the "." (up to microseconds)
--   - the zone offset, in whole minutes (0 for the "Z" and "+00:00" the bot always wrote).
-- A value that is not an ISO moment converts to NULL, which a NOT NULL column refuses: the
-- migration then fails as a whole and nothing changes.

-- deliveries_by_status names received_at: rebuilt after the swap.
DROP INDEX IF EXISTS deliveries_by_status;

-- bot_meta
ALTER TABLE bot_meta ADD COLUMN updated_at_real REAL NOT NULL DEFAULT 0;
UPDATE bot_meta SET updated_at_real = (CAST(strftime('%s', substr(updated_at, 1, 19)) AS INTEGER) * 1000000
    + CAST(ROUND(CASE WHEN substr(updated_at, 20, 1) = '.' THEN CAST('0' || substr(updated_at, 20) AS REAL) ELSE 0 END * 1000000) AS INTEGER)
    - CAST(ROUND((julianday(substr(updated_at, 1, 19)) - julianday(updated_at)) * 1440) AS INTEGER) * 60000000) / 1000000.0;
ALTER TABLE bot_meta DROP COLUMN updated_at;
ALTER TABLE bot_meta RENAME COLUMN updated_at_real TO updated_at;

-- deliveries
ALTER TABLE deliveries ADD COLUMN received_at_real REAL NOT NULL DEFAULT 0;
UPDATE deliveries SET received_at_real = (CAST(strftime('%s', substr(received_at, 1, 19)) AS INTEGER) * 1000000
    + CAST(ROUND(CASE WHEN substr(received_at, 20, 1) = '.' THEN CAST('0' || substr(received_at, 20) AS REAL) ELSE 0 END * 1000000) AS INTEGER)
    - CAST(ROUND((julianday(substr(received_at, 1, 19)) - julianday(received_at)) * 1440) AS INTEGER) * 60000000) / 1000000.0;
ALTER TABLE deliveries DROP COLUMN received_at;
ALTER TABLE deliveries RENAME COLUMN received_at_real TO received_at;
ALTER TABLE deliveries ADD COLUMN finished_at_real REAL;
UPDATE deliveries SET finished_at_real = (CAST(strftime('%s', substr(finished_at, 1, 19)) AS INTEGER) * 1000000
    + CAST(ROUND(CASE WHEN substr(finished_at, 20, 1) = '.' THEN CAST('0' || substr(finished_at, 20) AS REAL) ELSE 0 END * 1000000) AS INTEGER)
    - CAST(ROUND((julianday(substr(finished_at, 1, 19)) - julianday(finished_at)) * 1440) AS INTEGER) * 60000000) / 1000000.0;
ALTER TABLE deliveries DROP COLUMN finished_at;
ALTER TABLE deliveries RENAME COLUMN finished_at_real TO finished_at;
ALTER TABLE deliveries ADD COLUMN next_attempt_at_real REAL;
UPDATE deliveries SET next_attempt_at_real = (CAST(strftime('%s', substr(next_attempt_at, 1, 19)) AS INTEGER) * 1000000
    + CAST(ROUND(CASE WHEN substr(next_attempt_at, 20, 1) = '.' THEN CAST('0' || substr(next_attempt_at, 20) AS REAL) ELSE 0 END * 1000000) AS INTEGER)
    - CAST(ROUND((julianday(substr(next_attempt_at, 1, 19)) - julianday(next_attempt_at)) * 1440) AS INTEGER) * 60000000) / 1000000.0;
ALTER TABLE deliveries DROP COLUMN next_attempt_at;
ALTER TABLE deliveries RENAME COLUMN next_attempt_at_real TO next_attempt_at;

-- pr_gate_decisions
ALTER TABLE pr_gate_decisions ADD COLUMN decided_at_real REAL NOT NULL DEFAULT 0;
UPDATE pr_gate_decisions SET decided_at_real = (CAST(strftime('%s', substr(decided_at, 1, 19)) AS INTEGER) * 1000000
    + CAST(ROUND(CASE WHEN substr(decided_at, 20, 1) = '.' THEN CAST('0' || substr(decided_at, 20) AS REAL) ELSE 0 END * 1000000) AS INTEGER)
    - CAST(ROUND((julianday(substr(decided_at, 1, 19)) - julianday(decided_at)) * 1440) AS INTEGER) * 60000000) / 1000000.0;
ALTER TABLE pr_gate_decisions DROP COLUMN decided_at;
ALTER TABLE pr_gate_decisions RENAME COLUMN decided_at_real TO decided_at;

-- delivery_semantic_keys
ALTER TABLE delivery_semantic_keys ADD COLUMN claimed_at_real REAL NOT NULL DEFAULT 0;
UPDATE delivery_semantic_keys SET claimed_at_real = (CAST(strftime('%s', substr(claimed_at, 1, 19)) AS INTEGER) * 1000000
    + CAST(ROUND(CASE WHEN substr(claimed_at, 20, 1) = '.' THEN CAST('0' || substr(claimed_at, 20) AS REAL) ELSE 0 END * 1000000) AS INTEGER)
    - CAST(ROUND((julianday(substr(claimed_at, 1, 19)) - julianday(claimed_at)) * 1440) AS INTEGER) * 60000000) / 1000000.0;
ALTER TABLE delivery_semantic_keys DROP COLUMN claimed_at;
ALTER TABLE delivery_semantic_keys RENAME COLUMN claimed_at_real TO claimed_at;

-- api_tokens
ALTER TABLE api_tokens ADD COLUMN created_at_real REAL NOT NULL DEFAULT 0;
UPDATE api_tokens SET created_at_real = (CAST(strftime('%s', substr(created_at, 1, 19)) AS INTEGER) * 1000000
    + CAST(ROUND(CASE WHEN substr(created_at, 20, 1) = '.' THEN CAST('0' || substr(created_at, 20) AS REAL) ELSE 0 END * 1000000) AS INTEGER)
    - CAST(ROUND((julianday(substr(created_at, 1, 19)) - julianday(created_at)) * 1440) AS INTEGER) * 60000000) / 1000000.0;
ALTER TABLE api_tokens DROP COLUMN created_at;
ALTER TABLE api_tokens RENAME COLUMN created_at_real TO created_at;
ALTER TABLE api_tokens ADD COLUMN revoked_at_real REAL;
UPDATE api_tokens SET revoked_at_real = (CAST(strftime('%s', substr(revoked_at, 1, 19)) AS INTEGER) * 1000000
    + CAST(ROUND(CASE WHEN substr(revoked_at, 20, 1) = '.' THEN CAST('0' || substr(revoked_at, 20) AS REAL) ELSE 0 END * 1000000) AS INTEGER)
    - CAST(ROUND((julianday(substr(revoked_at, 1, 19)) - julianday(revoked_at)) * 1440) AS INTEGER) * 60000000) / 1000000.0;
ALTER TABLE api_tokens DROP COLUMN revoked_at;
ALTER TABLE api_tokens RENAME COLUMN revoked_at_real TO revoked_at;

-- review_decisions
ALTER TABLE review_decisions ADD COLUMN decided_at_real REAL NOT NULL DEFAULT 0;
UPDATE review_decisions SET decided_at_real = (CAST(strftime('%s', substr(decided_at, 1, 19)) AS INTEGER) * 1000000
    + CAST(ROUND(CASE WHEN substr(decided_at, 20, 1) = '.' THEN CAST('0' || substr(decided_at, 20) AS REAL) ELSE 0 END * 1000000) AS INTEGER)
    - CAST(ROUND((julianday(substr(decided_at, 1, 19)) - julianday(decided_at)) * 1440) AS INTEGER) * 60000000) / 1000000.0;
ALTER TABLE review_decisions DROP COLUMN decided_at;
ALTER TABLE review_decisions RENAME COLUMN decided_at_real TO decided_at;

-- review_outbox
ALTER TABLE review_outbox ADD COLUMN created_at_real REAL NOT NULL DEFAULT 0;
UPDATE review_outbox SET created_at_real = (CAST(strftime('%s', substr(created_at, 1, 19)) AS INTEGER) * 1000000
    + CAST(ROUND(CASE WHEN substr(created_at, 20, 1) = '.' THEN CAST('0' || substr(created_at, 20) AS REAL) ELSE 0 END * 1000000) AS INTEGER)
    - CAST(ROUND((julianday(substr(created_at, 1, 19)) - julianday(created_at)) * 1440) AS INTEGER) * 60000000) / 1000000.0;
ALTER TABLE review_outbox DROP COLUMN created_at;
ALTER TABLE review_outbox RENAME COLUMN created_at_real TO created_at;
ALTER TABLE review_outbox ADD COLUMN finished_at_real REAL;
UPDATE review_outbox SET finished_at_real = (CAST(strftime('%s', substr(finished_at, 1, 19)) AS INTEGER) * 1000000
    + CAST(ROUND(CASE WHEN substr(finished_at, 20, 1) = '.' THEN CAST('0' || substr(finished_at, 20) AS REAL) ELSE 0 END * 1000000) AS INTEGER)
    - CAST(ROUND((julianday(substr(finished_at, 1, 19)) - julianday(finished_at)) * 1440) AS INTEGER) * 60000000) / 1000000.0;
ALTER TABLE review_outbox DROP COLUMN finished_at;
ALTER TABLE review_outbox RENAME COLUMN finished_at_real TO finished_at;

-- pr_state_comments
ALTER TABLE pr_state_comments ADD COLUMN updated_at_real REAL NOT NULL DEFAULT 0;
UPDATE pr_state_comments SET updated_at_real = (CAST(strftime('%s', substr(updated_at, 1, 19)) AS INTEGER) * 1000000
    + CAST(ROUND(CASE WHEN substr(updated_at, 20, 1) = '.' THEN CAST('0' || substr(updated_at, 20) AS REAL) ELSE 0 END * 1000000) AS INTEGER)
    - CAST(ROUND((julianday(substr(updated_at, 1, 19)) - julianday(updated_at)) * 1440) AS INTEGER) * 60000000) / 1000000.0;
ALTER TABLE pr_state_comments DROP COLUMN updated_at;
ALTER TABLE pr_state_comments RENAME COLUMN updated_at_real TO updated_at;

-- session_tool_calls
ALTER TABLE session_tool_calls ADD COLUMN called_at_real REAL NOT NULL DEFAULT 0;
UPDATE session_tool_calls SET called_at_real = (CAST(strftime('%s', substr(called_at, 1, 19)) AS INTEGER) * 1000000
    + CAST(ROUND(CASE WHEN substr(called_at, 20, 1) = '.' THEN CAST('0' || substr(called_at, 20) AS REAL) ELSE 0 END * 1000000) AS INTEGER)
    - CAST(ROUND((julianday(substr(called_at, 1, 19)) - julianday(called_at)) * 1440) AS INTEGER) * 60000000) / 1000000.0;
ALTER TABLE session_tool_calls DROP COLUMN called_at;
ALTER TABLE session_tool_calls RENAME COLUMN called_at_real TO called_at;

-- review_reviewer_runs
ALTER TABLE review_reviewer_runs ADD COLUMN ran_at_real REAL NOT NULL DEFAULT 0;
UPDATE review_reviewer_runs SET ran_at_real = (CAST(strftime('%s', substr(ran_at, 1, 19)) AS INTEGER) * 1000000
    + CAST(ROUND(CASE WHEN substr(ran_at, 20, 1) = '.' THEN CAST('0' || substr(ran_at, 20) AS REAL) ELSE 0 END * 1000000) AS INTEGER)
    - CAST(ROUND((julianday(substr(ran_at, 1, 19)) - julianday(ran_at)) * 1440) AS INTEGER) * 60000000) / 1000000.0;
ALTER TABLE review_reviewer_runs DROP COLUMN ran_at;
ALTER TABLE review_reviewer_runs RENAME COLUMN ran_at_real TO ran_at;

-- repositories
ALTER TABLE repositories ADD COLUMN first_seen_real REAL NOT NULL DEFAULT 0;
UPDATE repositories SET first_seen_real = (CAST(strftime('%s', substr(first_seen, 1, 19)) AS INTEGER) * 1000000
    + CAST(ROUND(CASE WHEN substr(first_seen, 20, 1) = '.' THEN CAST('0' || substr(first_seen, 20) AS REAL) ELSE 0 END * 1000000) AS INTEGER)
    - CAST(ROUND((julianday(substr(first_seen, 1, 19)) - julianday(first_seen)) * 1440) AS INTEGER) * 60000000) / 1000000.0;
ALTER TABLE repositories DROP COLUMN first_seen;
ALTER TABLE repositories RENAME COLUMN first_seen_real TO first_seen;
ALTER TABLE repositories ADD COLUMN updated_at_real REAL NOT NULL DEFAULT 0;
UPDATE repositories SET updated_at_real = (CAST(strftime('%s', substr(updated_at, 1, 19)) AS INTEGER) * 1000000
    + CAST(ROUND(CASE WHEN substr(updated_at, 20, 1) = '.' THEN CAST('0' || substr(updated_at, 20) AS REAL) ELSE 0 END * 1000000) AS INTEGER)
    - CAST(ROUND((julianday(substr(updated_at, 1, 19)) - julianday(updated_at)) * 1440) AS INTEGER) * 60000000) / 1000000.0;
ALTER TABLE repositories DROP COLUMN updated_at;
ALTER TABLE repositories RENAME COLUMN updated_at_real TO updated_at;

-- repository_aliases
ALTER TABLE repository_aliases ADD COLUMN renamed_at_real REAL NOT NULL DEFAULT 0;
UPDATE repository_aliases SET renamed_at_real = (CAST(strftime('%s', substr(renamed_at, 1, 19)) AS INTEGER) * 1000000
    + CAST(ROUND(CASE WHEN substr(renamed_at, 20, 1) = '.' THEN CAST('0' || substr(renamed_at, 20) AS REAL) ELSE 0 END * 1000000) AS INTEGER)
    - CAST(ROUND((julianday(substr(renamed_at, 1, 19)) - julianday(renamed_at)) * 1440) AS INTEGER) * 60000000) / 1000000.0;
ALTER TABLE repository_aliases DROP COLUMN renamed_at;
ALTER TABLE repository_aliases RENAME COLUMN renamed_at_real TO renamed_at;

-- review_jobs
ALTER TABLE review_jobs ADD COLUMN created_at_real REAL NOT NULL DEFAULT 0;
UPDATE review_jobs SET created_at_real = (CAST(strftime('%s', substr(created_at, 1, 19)) AS INTEGER) * 1000000
    + CAST(ROUND(CASE WHEN substr(created_at, 20, 1) = '.' THEN CAST('0' || substr(created_at, 20) AS REAL) ELSE 0 END * 1000000) AS INTEGER)
    - CAST(ROUND((julianday(substr(created_at, 1, 19)) - julianday(created_at)) * 1440) AS INTEGER) * 60000000) / 1000000.0;
ALTER TABLE review_jobs DROP COLUMN created_at;
ALTER TABLE review_jobs RENAME COLUMN created_at_real TO created_at;
ALTER TABLE review_jobs ADD COLUMN finished_at_real REAL;
UPDATE review_jobs SET finished_at_real = (CAST(strftime('%s', substr(finished_at, 1, 19)) AS INTEGER) * 1000000
    + CAST(ROUND(CASE WHEN substr(finished_at, 20, 1) = '.' THEN CAST('0' || substr(finished_at, 20) AS REAL) ELSE 0 END * 1000000) AS INTEGER)
    - CAST(ROUND((julianday(substr(finished_at, 1, 19)) - julianday(finished_at)) * 1440) AS INTEGER) * 60000000) / 1000000.0;
ALTER TABLE review_jobs DROP COLUMN finished_at;
ALTER TABLE review_jobs RENAME COLUMN finished_at_real TO finished_at;

-- health_probe
ALTER TABLE health_probe ADD COLUMN probed_at_real REAL NOT NULL DEFAULT 0;
UPDATE health_probe SET probed_at_real = (CAST(strftime('%s', substr(probed_at, 1, 19)) AS INTEGER) * 1000000
    + CAST(ROUND(CASE WHEN substr(probed_at, 20, 1) = '.' THEN CAST('0' || substr(probed_at, 20) AS REAL) ELSE 0 END * 1000000) AS INTEGER)
    - CAST(ROUND((julianday(substr(probed_at, 1, 19)) - julianday(probed_at)) * 1440) AS INTEGER) * 60000000) / 1000000.0;
ALTER TABLE health_probe DROP COLUMN probed_at;
ALTER TABLE health_probe RENAME COLUMN probed_at_real TO probed_at;

CREATE INDEX IF NOT EXISTS deliveries_by_status ON deliveries (status, received_at);
