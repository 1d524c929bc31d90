-- Determined's long-lived access tokens (`det token ...`) and cluster-wide messages
-- (`det master cluster-message ...`).

-- A token authenticates as its user until it expires or is revoked. As for sessions, the bearer
-- token is never stored, only its SHA-256.
CREATE TABLE access_tokens (
    id          serial PRIMARY KEY,
    user_id     integer NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    token_hash  bytea NOT NULL UNIQUE,
    description text NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    revoked_at  timestamptz
);
CREATE INDEX access_tokens_user_idx ON access_tokens (user_id, id);

-- The newest row not ended is the message; setting one ends the others, clearing ends it. Only
-- the newest rows are kept (api/queries/cluster.py prunes the rest).
CREATE TABLE cluster_messages (
    id         serial PRIMARY KEY,
    message    text NOT NULL,
    created_by integer REFERENCES users (id) ON DELETE SET NULL,
    start_time timestamptz NOT NULL,
    end_time   timestamptz,
    created_at timestamptz NOT NULL DEFAULT now()
);
