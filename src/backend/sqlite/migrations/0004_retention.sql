-- Schema version 4: retention of delivered items (SPEC §9). The window
-- lives in spool_meta ('retain_ms', absent: off).
--
-- Applied in one transaction on top of version 3. Delivered items still
-- leave morph_offline_queue exactly as before, so reference readers and
-- writers see no difference; with a window set, spool keeps a copy here.

-- A delivered item kept until its window ends: read-only; its key still
-- deduplicates enqueues while it is kept and inside the window.
CREATE TABLE IF NOT EXISTS spool_delivered (
    id              INTEGER PRIMARY KEY,       -- the id it had while pending
    payload                 NOT NULL,          -- TEXT when UTF-8, else BLOB
    idempotency_key TEXT    NOT NULL DEFAULT '',
    attempts        INTEGER NOT NULL DEFAULT 0,
    enqueued_at     INTEGER,                   -- Unix seconds, NULL: unknown
    last_error      TEXT,                      -- of the last failed attempt, if any
    group_name      TEXT,
    coalesce_key    TEXT,
    delivered_at    INTEGER NOT NULL,          -- Unix ms
    evidence        TEXT    NOT NULL           -- 'http:200', 'exit:0', 'push:41', 'done', 'sink'
);
-- Dedup: the newest record of a key, one seek.
CREATE INDEX IF NOT EXISTS ix_delivered_key
    ON spool_delivered(idempotency_key, delivered_at) WHERE idempotency_key <> '';
-- Pruning: the oldest records first, one range.
CREATE INDEX IF NOT EXISTS ix_delivered_at ON spool_delivered(delivered_at);

-- The count, kept by triggers like the others (stats reads it, not the table).
INSERT OR REPLACE INTO spool_counts (name, n)
    SELECT 'delivered', count(*) FROM spool_delivered;
CREATE TRIGGER IF NOT EXISTS tr_delivered_insert AFTER INSERT ON spool_delivered BEGIN
    UPDATE spool_counts SET n = n + 1 WHERE name = 'delivered';
END;
CREATE TRIGGER IF NOT EXISTS tr_delivered_delete AFTER DELETE ON spool_delivered BEGIN
    UPDATE spool_counts SET n = n - 1 WHERE name = 'delivered';
END;

PRAGMA user_version = 4;
