-- Schema version 7: the leased items by id, for the lease column of
-- `spool list`, `top` and the console (`leases_after`). Without it the
-- read of the leases after an id walks every pending item after that id
-- to find the few that are leased: half a second on a million items.
-- `{s}` is replaced by the quoted schema name.
--
-- Applied in one transaction under the migration advisory lock, like the
-- versions before. Building it reads the items table once (about a
-- second per million items); only leased rows are in it.
CREATE INDEX IF NOT EXISTS items_leased
    ON {s}.items (spool, id) WHERE lease_until IS NOT NULL;

INSERT INTO {s}.spool_schema (version) VALUES (7);
