-- Schema version 3: retention of delivered items (SPEC §9). `{s}` is
-- replaced by the quoted schema name.
--
-- Applied in one transaction under the migration advisory lock, like the
-- versions before. Only `spools` is altered (locked first, in the order
-- every writer takes it; a writer of an older binary holding its row
-- lock is waited for); the added columns are NULL or have a constant
-- default (no table rewrite) and the new table starts empty, so the
-- migration is quick on a large spool.

LOCK TABLE {s}.spools IN ACCESS EXCLUSIVE MODE;

-- The retention window in milliseconds (NULL: off, delivered items are
-- deleted) and the number of delivered rows kept, exact like the other
-- counts (`stats` reads it instead of counting rows).
ALTER TABLE {s}.spools
    ADD COLUMN IF NOT EXISTS retain_ms bigint,
    ADD COLUMN IF NOT EXISTS retained  bigint NOT NULL DEFAULT 0;

-- Delivered items kept for the window, under the id they had while
-- pending, read-only: with when (`delivered_at`, Unix ms) and the
-- evidence of the delivery in its compact form (`http:200`, `exit:0`,
-- `push:41`, `done`, `sink`). Delivery moves a row here from `items` in
-- one statement; pruning deletes expired rows in bounded batches, oldest
-- first.
--
-- Rows are inserted and, once the window ends, deleted in batches of at
-- most 256 per commit: autovacuum is told to visit the table after 1% of
-- its rows (plus 500) changed, as for `items`, so that the dead tuples a
-- prune leaves at the old end of `delivered_at_idx` do not pile up under
-- the next prune's index scan. Rows are never updated (default
-- fillfactor).
CREATE TABLE IF NOT EXISTS {s}.delivered (
    spool        text   NOT NULL REFERENCES {s}.spools (name) ON DELETE CASCADE,
    id           bigint NOT NULL,
    payload      bytea  NOT NULL,
    key          bytea  NOT NULL DEFAULT '\x'::bytea,
    attempts     bigint NOT NULL DEFAULT 0,
    enqueued_at  bigint,                  -- NULL: unknown (reference NDJSON import)
    last_error   text,
    grp          text,
    coalesce_key text,
    delivered_at bigint NOT NULL,
    evidence     text   NOT NULL,
    PRIMARY KEY (spool, id)
) WITH (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 500,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_insert_scale_factor = 0.05
);

-- Dedup of an enqueue whose key no pending item carries: the newest
-- delivered row with the key, and whether its window still runs. Not
-- unique: after a window ends a key may be enqueued and delivered again
-- before the old row is pruned.
CREATE INDEX IF NOT EXISTS delivered_key
    ON {s}.delivered (spool, key, delivered_at) WHERE key <> '\x'::bytea;
-- Pruning: the oldest deliveries first, up to the window's cutoff.
CREATE INDEX IF NOT EXISTS delivered_at_idx
    ON {s}.delivered (spool, delivered_at);

INSERT INTO {s}.spool_schema (version) VALUES (3);
