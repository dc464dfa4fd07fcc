-- Schema version 5: an import finds a dead letter by its key (SPEC §3:
-- importing the same export twice adds nothing twice; a dead record whose
-- key a dead letter of the spool already carries is a dedup hit). `{s}`
-- is replaced by the quoted schema name.
--
-- Applied in one transaction under the migration advisory lock, like the
-- versions before. An index only, partial over keyed dead letters: the
-- build locks `dead_letters` against writes (SHARE) while it reads the
-- table once; enqueues and deliveries that dead-letter nothing go on
-- meanwhile. Nothing is rewritten.
CREATE INDEX IF NOT EXISTS dead_letters_key
    ON {s}.dead_letters (spool, key, id) WHERE key <> '\x'::bytea;

INSERT INTO {s}.spool_schema (version) VALUES (5);
