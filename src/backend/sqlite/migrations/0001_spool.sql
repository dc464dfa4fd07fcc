-- Schema version 1: what spool adds to the reference schema.
--
-- Applied in one transaction together with the spool's uuid. Every added
-- column has a default, so a reference writer that inserts only the
-- reference columns keeps working, and the reference columns keep their
-- meaning (enqueued_at is Unix seconds).

-- Replay bookkeeping on pending items.
ALTER TABLE morph_offline_queue ADD COLUMN next_retry_at INTEGER;            -- Unix ms, NULL: due now
ALTER TABLE morph_offline_queue ADD COLUMN last_error TEXT;                  -- why the last attempt failed
ALTER TABLE morph_offline_queue ADD COLUMN held INTEGER NOT NULL DEFAULT 0;  -- 1: kept, but replay skips it

-- Indexes that answer size() and stats() without reading payloads:
-- count(*) walks the small attempts index instead of the table, the attempt
-- histogram counts one range of it per distinct value, and the partial
-- indexes hold only the held and the backed-off items.
CREATE INDEX IF NOT EXISTS ix_queue_attempts ON morph_offline_queue(attempts);
CREATE INDEX IF NOT EXISTS ix_queue_held
    ON morph_offline_queue(held) WHERE held <> 0;
CREATE INDEX IF NOT EXISTS ix_queue_retry
    ON morph_offline_queue(next_retry_at) WHERE next_retry_at IS NOT NULL;

-- Dead letters keep the id they had while pending.
CREATE TABLE IF NOT EXISTS spool_dead_letters (
    id              INTEGER PRIMARY KEY,
    payload                 NOT NULL,          -- TEXT when UTF-8, else BLOB
    idempotency_key TEXT    NOT NULL DEFAULT '',
    attempts        INTEGER NOT NULL DEFAULT 0,
    enqueued_at     INTEGER,                   -- Unix seconds, NULL: unknown
    next_retry_at   INTEGER,                   -- Unix ms
    last_error      TEXT,
    held            INTEGER NOT NULL DEFAULT 0,-- the hold flag the item had when it died
    dead_at         INTEGER NOT NULL           -- Unix ms
);
-- Lets count(*) skip the payloads.
CREATE INDEX IF NOT EXISTS ix_dead_dead_at ON spool_dead_letters(dead_at);

-- Spool-wide settings: 'uuid' (created with the spool) and 'max_depth'
-- (absent: unbounded).
CREATE TABLE IF NOT EXISTS spool_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

PRAGMA user_version = 1;
