-- Schema version 8: `items.key_prefix`, the key up to its first `:` or
-- `/` (whole when it has neither), which `spool shape --by key-prefix`
-- groups pending and held items by. Stored, so the shape query reads it
-- like any column instead of cutting every key, and the planner, which
-- would take the cut to be as distinct as the key, counts on the column's
-- own statistics (0.35 s for a million items without the column, 0.16 s
-- with it; docs/benchmarks.md). The expression must stay exactly the one `shape.rs` cuts
-- other tables' keys with (`KEY_PREFIX`, checked by a unit test).
-- `{s}` is replaced by the quoted schema name.
--
-- Adding a stored column rewrites `items` once, holding every other
-- statement on the table until it commits.
ALTER TABLE {s}.items ADD COLUMN key_prefix bytea
    GENERATED ALWAYS AS (substring(key from 1 for least(nullif(position('\x3a'::bytea in key), 0), nullif(position('\x2f'::bytea in key), 0), length(key) + 1) - 1)) STORED;

INSERT INTO {s}.spool_schema (version) VALUES (8);
