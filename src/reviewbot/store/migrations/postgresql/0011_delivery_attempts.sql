-- Per-delivery retries: a delivery whose decisions cannot be recorded goes back to the queue
-- with a backoff (not claimed before next_attempt_at) and, after the configured number of
-- attempts, is parked as status 'dead' with its error and a delivery_failed decision.
ALTER TABLE deliveries ADD COLUMN next_attempt_at double precision;

-- One row the readiness check rewrites to prove the store accepts writes.
CREATE TABLE IF NOT EXISTS health_probe (
    id bigint PRIMARY KEY CHECK (id = 1),
    probed_at double precision NOT NULL
);
