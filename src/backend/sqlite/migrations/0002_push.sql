-- Schema version 2: push (SPEC §7), as a sending client and as a receiver.
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

PRAGMA user_version = 2;
