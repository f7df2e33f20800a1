-- Who registered each worker identity: a worker belongs to the API token (and, when one
-- registered it, the session) that created it, and only that caller may act in its name.
-- NULL owner_token_id: registered by reviewbot itself or by the command line on the bot's
-- own machine; no API token may act for such a worker.
ALTER TABLE workers ADD COLUMN owner_token_id bigint;
ALTER TABLE workers ADD COLUMN owner_session text;
