-- Schema version 3: ledger policies (SPEC §9): ordering groups and
-- coalesce keys on items. The overflow policy ('on_full') and the count of
-- evicted items ('evicted_total') live in spool_meta.
--
-- Applied in one transaction on top of version 2. The added columns are
-- NULL by default, so reference writers keep working and reference readers
-- see the reference columns unchanged.

-- The ordering group: replay attempts an item only when no earlier pending
-- item has the same group. NULL: no group.
ALTER TABLE morph_offline_queue ADD COLUMN group_name TEXT;
-- The coalesce key: an enqueue with the same key replaces the item while
-- it was never attempted and is not in flight. NULL: none.
ALTER TABLE morph_offline_queue ADD COLUMN coalesce_key TEXT;
ALTER TABLE spool_dead_letters ADD COLUMN group_name TEXT;
ALTER TABLE spool_dead_letters ADD COLUMN coalesce_key TEXT;

-- Coalescing finds the candidates of a key.
CREATE INDEX IF NOT EXISTS ix_queue_coalesce
    ON morph_offline_queue(coalesce_key) WHERE coalesce_key IS NOT NULL;
-- `list --group` and the group rule find a group's items in id order.
CREATE INDEX IF NOT EXISTS ix_queue_group
    ON morph_offline_queue(group_name, id) WHERE group_name IS NOT NULL;

PRAGMA user_version = 3;
