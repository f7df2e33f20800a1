-- Claims on deliveries, for several processes (replicas) on one database: a delivery being
-- gated is claimed by one process (claimed_by) until claim_until (seconds since the epoch).
-- A process that dies leaves its claims to lapse; any process then takes those deliveries
-- up again, and a replica that starts puts back only the deliveries whose claim lapsed (a
-- lone process on SQLite still puts back every delivery left 'processing').
ALTER TABLE deliveries ADD COLUMN claimed_by text;
ALTER TABLE deliveries ADD COLUMN claim_until double precision NOT NULL DEFAULT 0;
