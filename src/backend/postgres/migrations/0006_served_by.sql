-- Schema version 6: which `spool serve` instance last applied a push
-- client's entries (`host:pid`), for `spool clients` when several
-- receivers serve one spool (SPEC §7). `{s}` is replaced by the quoted
-- schema name.
--
-- Applied in one transaction under the migration advisory lock, like the
-- versions before. A nullable column without a default: PostgreSQL adds
-- it to the catalog only, without rewriting the table.
ALTER TABLE {s}.push_clients ADD COLUMN IF NOT EXISTS served_by text;

INSERT INTO {s}.spool_schema (version) VALUES (6);
