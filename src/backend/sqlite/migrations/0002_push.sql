-- Schema version 2: push (SPEC §7), as a sending client and as a receiver;
-- and counts that `size`, `stats` and the depth bound read instead of
-- counting millions of rows.
--
-- Applied in one transaction on top of version 1. Every added column has a
-- default, so reference writers keep working and reference readers see the
-- reference columns unchanged.

-- Sending: the push sequence number an item got when it first went into a
-- batch. NULL: not in flight. Unique: a number is never given twice.
ALTER TABLE morph_offline_queue ADD COLUMN push_seq INTEGER;
CREATE UNIQUE INDEX IF NOT EXISTS ix_queue_push_seq
    ON morph_offline_queue(push_seq) WHERE push_seq IS NOT NULL;
-- A dead letter remembers the number it had (informational: a requeued
-- item is a new entry and gets a new number).
ALTER TABLE spool_dead_letters ADD COLUMN push_seq INTEGER;

-- Sending: numbers of in-flight items that left the spool before an ack
-- (an operator's `done --force`); sent as `skip` entries until acked. The
-- counters live in spool_meta: 'push_last_assigned', 'push_acked'.
CREATE TABLE IF NOT EXISTS spool_push_skips (
    seq INTEGER PRIMARY KEY
);

-- Receiving: one row per client that ever pushed, with the highest
-- sequence number processed.
CREATE TABLE IF NOT EXISTS spool_push_clients (
    client_id  TEXT    PRIMARY KEY,
    last_seq   INTEGER NOT NULL DEFAULT 0,
    updated_at INTEGER                       -- Unix ms of the last push
);

-- Receiving: what became of each processed sequence number: applied,
-- refused or skipped, with the digest it came with (kept while the client's
-- state is kept, to recognise a copied spool reusing a number), and for a
-- refused entry the reason, kept until the client acknowledges it (then
-- NULL).
CREATE TABLE IF NOT EXISTS spool_push_entries (
    client_id TEXT    NOT NULL,
    seq       INTEGER NOT NULL,
    outcome   TEXT    NOT NULL,              -- 'applied', 'rejected', 'skipped'
    digest    TEXT,                          -- 'sha256:<hex>'; NULL for a skip
    reason    TEXT,                          -- why it was refused, until acked
    PRIMARY KEY (client_id, seq)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS ix_push_unacked_rejects
    ON spool_push_entries(client_id, seq) WHERE reason IS NOT NULL;

-- Counts. 'pending' is the number of pending rows: spool adds what it
-- inserts in the same transaction, and a trigger takes away every deleted
-- row (a reference writer's too). 'pending_seq' is the AUTOINCREMENT
-- sequence at which 'pending' was last known exact: a reference writer's
-- insert moves the sequence, so a count whose 'pending_seq' is not the
-- sequence any more is recounted (and stored again by the next write).
-- 'dead' is kept by triggers. spool_attempt_counts holds, per non-zero
-- attempt count, the pending rows that have it (the rest have 0); its
-- triggers fire for every writer, and cost nothing on the insert of a
-- fresh item (attempts 0).
CREATE TABLE IF NOT EXISTS spool_counts (
    name TEXT    PRIMARY KEY,
    n    INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS spool_attempt_counts (
    attempts INTEGER PRIMARY KEY,
    n        INTEGER NOT NULL
);
INSERT OR REPLACE INTO spool_counts (name, n)
    SELECT 'pending', count(*) FROM morph_offline_queue;
INSERT OR REPLACE INTO spool_counts (name, n)
    SELECT 'pending_seq', COALESCE(
        (SELECT seq FROM sqlite_sequence WHERE name = 'morph_offline_queue'), 0);
INSERT OR REPLACE INTO spool_counts (name, n)
    SELECT 'dead', count(*) FROM spool_dead_letters;
DELETE FROM spool_attempt_counts;
INSERT INTO spool_attempt_counts (attempts, n)
    SELECT attempts, count(*) FROM morph_offline_queue WHERE attempts <> 0 GROUP BY attempts;

CREATE TRIGGER IF NOT EXISTS tr_queue_delete AFTER DELETE ON morph_offline_queue BEGIN
    UPDATE spool_counts SET n = n - 1 WHERE name = 'pending';
    UPDATE spool_attempt_counts SET n = n - 1
        WHERE OLD.attempts <> 0 AND attempts = OLD.attempts;
    DELETE FROM spool_attempt_counts
        WHERE OLD.attempts <> 0 AND attempts = OLD.attempts AND n <= 0;
END;
CREATE TRIGGER IF NOT EXISTS tr_queue_insert_attempts AFTER INSERT ON morph_offline_queue
    WHEN NEW.attempts <> 0 BEGIN
    INSERT INTO spool_attempt_counts (attempts, n) VALUES (NEW.attempts, 1)
        ON CONFLICT (attempts) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER IF NOT EXISTS tr_queue_attempts AFTER UPDATE OF attempts ON morph_offline_queue
    WHEN OLD.attempts <> NEW.attempts BEGIN
    UPDATE spool_attempt_counts SET n = n - 1
        WHERE OLD.attempts <> 0 AND attempts = OLD.attempts;
    DELETE FROM spool_attempt_counts
        WHERE OLD.attempts <> 0 AND attempts = OLD.attempts AND n <= 0;
    INSERT INTO spool_attempt_counts (attempts, n) SELECT NEW.attempts, 1 WHERE NEW.attempts <> 0
        ON CONFLICT (attempts) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER IF NOT EXISTS tr_dead_insert AFTER INSERT ON spool_dead_letters BEGIN
    UPDATE spool_counts SET n = n + 1 WHERE name = 'dead';
END;
CREATE TRIGGER IF NOT EXISTS tr_dead_delete AFTER DELETE ON spool_dead_letters BEGIN
    UPDATE spool_counts SET n = n - 1 WHERE name = 'dead';
END;

PRAGMA user_version = 2;
