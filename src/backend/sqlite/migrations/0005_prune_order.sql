-- Schema version 5: retained records delivered in id order need no entry
-- in a time index (one page less written per retained delivery).
--
-- Applied in one transaction on top of version 4. A record is "late" when
-- it was delivered out of id order: a record with a higher id was kept
-- before it, or one kept before it was delivered later. Records that are
-- not late have delivery times that never decrease in id order, so the
-- oldest of them are found from the lowest id up; late records are found
-- through ix_delivered_late, oldest first.
ALTER TABLE spool_delivered ADD COLUMN late INTEGER NOT NULL DEFAULT 1;
-- The records kept so far: in order when none with a lower id was
-- delivered later.
UPDATE spool_delivered SET late = 0 WHERE id IN (
    SELECT id FROM (
        SELECT id, delivered_at, max(delivered_at) OVER (
            ORDER BY id ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
        ) AS before
        FROM spool_delivered
    ) WHERE before IS NULL OR delivered_at >= before
);
DROP INDEX IF EXISTS ix_delivered_at;
-- Pruning: the oldest late records first, one range.
CREATE INDEX IF NOT EXISTS ix_delivered_late ON spool_delivered(delivered_at) WHERE late;
-- Where pruning in id order stands: every record with an id up to this
-- one is late or gone (kept in spool_meta as 'prune_after', absent: 0).

PRAGMA user_version = 5;
