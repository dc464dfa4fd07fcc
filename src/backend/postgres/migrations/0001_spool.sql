-- Schema version 1 of a PostgreSQL spool database. `{s}` is replaced
-- by the quoted schema name (`spool` unless the URL says `schema=`).
--
-- Applied in one transaction under an advisory lock, so that many
-- processes starting at once migrate it once. Many spools share these
-- tables; every row carries the name of its spool.

CREATE TABLE IF NOT EXISTS {s}.spool_schema (
    version    integer     PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- One row per spool: its settings and the counts kept exact in the same
-- transaction as every change (`size`, `stats` and the depth bound read
-- them; nothing counts rows). Enqueues lock this row (UPDATE), which
-- serialises the producers of one spool for the few statements of an
-- enqueue and makes both the depth bound and id allocation exact.
CREATE TABLE IF NOT EXISTS {s}.spools (
    name               text        PRIMARY KEY,
    uuid               text        NOT NULL,
    max_depth          bigint,                      -- NULL: unbounded
    high_water         bigint      NOT NULL DEFAULT 0, -- highest id ever issued
    depth              bigint      NOT NULL DEFAULT 0, -- pending items, held included
    dead               bigint      NOT NULL DEFAULT 0, -- dead letters
    push_last_assigned bigint      NOT NULL DEFAULT 0,
    push_acked         bigint      NOT NULL DEFAULT 0,
    created_at         timestamptz NOT NULL DEFAULT now()
);

-- Pending items (held ones included). Times are Unix milliseconds from the
-- server's clock. Keys are bytes (any string, NUL included); '' is none.
-- A claim (leased replay) counts the attempt and sets lease_until and
-- lease_token; done, a failure or a dead-lettering must present the token.
--
-- The table churns (every item is inserted, updated at its claim, and
-- deleted), so autovacuum is told to visit it after 1% of its rows (plus
-- 500) changed rather than the default 20%: dead tuples of claimed and
-- deleted rows would otherwise pile up in the claim index and slow every
-- claim down. fillfactor leaves room on each page for HOT updates.
CREATE TABLE IF NOT EXISTS {s}.items (
    spool         text    NOT NULL REFERENCES {s}.spools (name) ON DELETE CASCADE,
    id            bigint  NOT NULL,
    payload       bytea   NOT NULL,
    key           bytea   NOT NULL DEFAULT '\x'::bytea,
    attempts      bigint  NOT NULL DEFAULT 0,
    enqueued_at   bigint,                  -- NULL: unknown (reference NDJSON import)
    next_retry_at bigint,                  -- NULL: due now
    last_error    text,
    held          boolean NOT NULL DEFAULT false,
    push_seq      bigint,                  -- NULL: not in flight to a push receiver
    lease_until   bigint,                  -- NULL: not leased
    lease_token   bigint,                  -- the fencing token of the last claim
    PRIMARY KEY (spool, id)
) WITH (
    fillfactor = 85,
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 500,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_insert_scale_factor = 0.05
);

-- Dedup: one pending item per non-empty key and spool. A unique index, so
-- concurrent producers cannot both store a key.
CREATE UNIQUE INDEX IF NOT EXISTS items_key
    ON {s}.items (spool, key) WHERE key <> '\x'::bytea;
-- A push number is given once.
CREATE UNIQUE INDEX IF NOT EXISTS items_push_seq
    ON {s}.items (spool, push_seq) WHERE push_seq IS NOT NULL;
-- The claim path, part 1: items never tried and not leased, in enqueue
-- order. Fresh items are nearly all of a backlog.
CREATE INDEX IF NOT EXISTS items_fresh
    ON {s}.items (spool, id)
    WHERE NOT held AND next_retry_at IS NULL AND lease_until IS NULL AND push_seq IS NULL;
-- The claim path, part 2: items waiting for a retry time or a lease to
-- end, by the time they become due.
CREATE INDEX IF NOT EXISTS items_waiting
    ON {s}.items (spool, (greatest(next_retry_at, lease_until)), id)
    WHERE NOT held AND (next_retry_at IS NOT NULL OR lease_until IS NOT NULL);
-- stats: held items, and items with attempts (the rest have 0).
CREATE INDEX IF NOT EXISTS items_held
    ON {s}.items (spool) WHERE held;
CREATE INDEX IF NOT EXISTS items_attempts
    ON {s}.items (spool, attempts) WHERE attempts <> 0;
CREATE INDEX IF NOT EXISTS items_retry
    ON {s}.items (spool, next_retry_at) WHERE next_retry_at IS NOT NULL;

-- Dead letters keep the id they had while pending.
CREATE TABLE IF NOT EXISTS {s}.dead_letters (
    spool         text    NOT NULL REFERENCES {s}.spools (name) ON DELETE CASCADE,
    id            bigint  NOT NULL,
    payload       bytea   NOT NULL,
    key           bytea   NOT NULL DEFAULT '\x'::bytea,
    attempts      bigint  NOT NULL DEFAULT 0,
    enqueued_at   bigint,
    next_retry_at bigint,
    last_error    text,
    held          boolean NOT NULL DEFAULT false,
    push_seq      bigint,
    dead_at       bigint  NOT NULL,
    PRIMARY KEY (spool, id)
);

-- Push, sending: numbers of in-flight items that left before an ack.
CREATE TABLE IF NOT EXISTS {s}.push_skips (
    spool text   NOT NULL REFERENCES {s}.spools (name) ON DELETE CASCADE,
    seq   bigint NOT NULL,
    PRIMARY KEY (spool, seq)
);

-- Push, receiving: per client, the highest number processed.
CREATE TABLE IF NOT EXISTS {s}.push_clients (
    spool      text   NOT NULL REFERENCES {s}.spools (name) ON DELETE CASCADE,
    client_id  text   NOT NULL,
    last_seq   bigint NOT NULL DEFAULT 0,
    updated_at bigint,
    PRIMARY KEY (spool, client_id)
);

-- Push, receiving: what became of each processed number (see the SQLite
-- schema's spool_push_entries).
CREATE TABLE IF NOT EXISTS {s}.push_entries (
    spool     text   NOT NULL REFERENCES {s}.spools (name) ON DELETE CASCADE,
    client_id text   NOT NULL,
    seq       bigint NOT NULL,
    outcome   text   NOT NULL CHECK (outcome IN ('applied', 'rejected', 'skipped')),
    digest    text,
    reason    text,
    PRIMARY KEY (spool, client_id, seq)
);
CREATE INDEX IF NOT EXISTS push_entries_unacked
    ON {s}.push_entries (spool, client_id, seq) WHERE reason IS NOT NULL;

-- Fencing tokens of claims: never reused.
CREATE SEQUENCE IF NOT EXISTS {s}.lease_tokens;

INSERT INTO {s}.spool_schema (version) VALUES (1);
