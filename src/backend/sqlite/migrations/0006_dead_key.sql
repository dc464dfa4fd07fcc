-- Schema version 6: an import finds a dead letter by its key (SPEC §3:
-- importing the same export twice adds nothing twice; a dead record whose
-- key a dead letter already carries is a dedup hit).
--
-- Applied in one transaction on top of version 5. An index only: the
-- tables and their columns are unchanged, so reference readers and
-- writers, and older spool versions reading the file, see no difference.
-- It is partial (keyed dead letters only) and holds the id with the key:
-- the lowest id of a key is one seek.
CREATE INDEX IF NOT EXISTS ix_dead_key
    ON spool_dead_letters(idempotency_key) WHERE idempotency_key <> '';

PRAGMA user_version = 6;
