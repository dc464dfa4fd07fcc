-- Schema version 2: the ledger policies of SPEC §9 (ordering groups,
-- coalescing, the drop-oldest overflow policy). `{s}` is replaced by the
-- quoted schema name.
--
-- Applied in one transaction under the migration advisory lock, like
-- version 1. The tables are locked first, in the order every writer takes
-- them (spools row, then items, then dead letters), so that a writer of an
-- older binary running meanwhile waits instead of deadlocking. The added
-- columns are NULL or have constant defaults (no table rewrite); the new
-- indexes are partial and start empty (no row has a group or a coalesce
-- key before this version), so the migration is quick on a large spool.

LOCK TABLE {s}.spools, {s}.items, {s}.dead_letters IN ACCESS EXCLUSIVE MODE;

-- The overflow policy ('reject' or 'drop-oldest') and the number of items
-- drop-oldest ever evicted; kept like the other counts.
ALTER TABLE {s}.spools
    ADD COLUMN IF NOT EXISTS on_full text NOT NULL DEFAULT 'reject'
        CONSTRAINT spools_on_full CHECK (on_full IN ('reject', 'drop-oldest')),
    ADD COLUMN IF NOT EXISTS evicted_total bigint NOT NULL DEFAULT 0;

-- The ordering group (NULL: none) and the coalesce key (NULL: none) of an
-- item; dead letters keep them, so that a requeue restores them.
ALTER TABLE {s}.items
    ADD COLUMN IF NOT EXISTS grp          text,
    ADD COLUMN IF NOT EXISTS coalesce_key text;
ALTER TABLE {s}.dead_letters
    ADD COLUMN IF NOT EXISTS grp          text,
    ADD COLUMN IF NOT EXISTS coalesce_key text;

-- Coalescing: the pending items a new item with a coalesce key replaces.
CREATE INDEX IF NOT EXISTS items_coalesce
    ON {s}.items (spool, coalesce_key) WHERE coalesce_key IS NOT NULL;
-- The group rule of a claim: is there an earlier pending item of the same
-- group? One index probe per candidate.
CREATE INDEX IF NOT EXISTS items_group
    ON {s}.items (spool, grp, id) WHERE grp IS NOT NULL;
-- ... and is another item of the group leased right now (a dead letter
-- requeued under its old, smaller id while a later item of its group is
-- being delivered)? Only leased items are in it.
CREATE INDEX IF NOT EXISTS items_group_leased
    ON {s}.items (spool, grp, lease_until) WHERE grp IS NOT NULL AND lease_until IS NOT NULL;

INSERT INTO {s}.spool_schema (version) VALUES (2);
