-- Schema version 4: no per-row foreign-key checks. `{s}` is replaced by
-- the quoted schema name.
--
-- Versions 1 to 3 tied every row to its spool with a foreign key
-- `(spool) REFERENCES spools (name) ON DELETE CASCADE`. PostgreSQL checks
-- such a key with a trigger per inserted row (a `SELECT … FOR KEY SHARE`
-- of the spools row): measured, about 40% of the time of a bulk enqueue
-- of 100,000 lines (benches/postgres.sh). The check guards nothing spool
-- relies on: every writer locks its spool's row (`UPDATE spools`) before
-- it writes a row of that spool, in the same transaction, so the row
-- exists whenever one of its items, dead letters or push records does.
-- The keys go; what ON DELETE CASCADE did is kept by one trigger on
-- `spools`, which runs per deleted spool (rare) instead of per item:
-- `DELETE FROM spools WHERE name = 'x'` still removes a whole spool.
--
-- Applied in one transaction under the migration advisory lock, like the
-- versions before; the tables are locked in the order every writer takes
-- them (spools, then items, then the others). Dropping a constraint and
-- creating a trigger rewrite nothing, so the migration is quick on a
-- large spool.

LOCK TABLE {s}.spools, {s}.items, {s}.dead_letters, {s}.delivered,
    {s}.push_skips, {s}.push_clients, {s}.push_entries IN ACCESS EXCLUSIVE MODE;

ALTER TABLE {s}.items        DROP CONSTRAINT IF EXISTS items_spool_fkey;
ALTER TABLE {s}.dead_letters DROP CONSTRAINT IF EXISTS dead_letters_spool_fkey;
ALTER TABLE {s}.delivered    DROP CONSTRAINT IF EXISTS delivered_spool_fkey;
ALTER TABLE {s}.push_skips   DROP CONSTRAINT IF EXISTS push_skips_spool_fkey;
ALTER TABLE {s}.push_clients DROP CONSTRAINT IF EXISTS push_clients_spool_fkey;
ALTER TABLE {s}.push_entries DROP CONSTRAINT IF EXISTS push_entries_spool_fkey;

-- A deleted spool takes its rows with it, as the cascade did.
CREATE OR REPLACE FUNCTION {s}.spools_cascade() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM {s}.items        WHERE spool = OLD.name;
    DELETE FROM {s}.dead_letters WHERE spool = OLD.name;
    DELETE FROM {s}.delivered    WHERE spool = OLD.name;
    DELETE FROM {s}.push_skips   WHERE spool = OLD.name;
    DELETE FROM {s}.push_clients WHERE spool = OLD.name;
    DELETE FROM {s}.push_entries WHERE spool = OLD.name;
    RETURN OLD;
END
$$;
DROP TRIGGER IF EXISTS spools_cascade ON {s}.spools;
CREATE TRIGGER spools_cascade AFTER DELETE ON {s}.spools
    FOR EACH ROW EXECUTE FUNCTION {s}.spools_cascade();

INSERT INTO {s}.spool_schema (version) VALUES (4);
