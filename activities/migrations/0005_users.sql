-- Users and their login sessions. Passwords are stored as argon2id hashes of Determined's salted
-- SHA-512 of the password (what `det` sends with isHashed=true), so Epochal's CLI, the dashboard
-- and Determined's client can all log in. A NULL hash cannot log in until a password is set.

CREATE TABLE users (
    id            serial PRIMARY KEY,
    username      text NOT NULL UNIQUE,
    display_name  text,
    password_hash text,
    admin         boolean NOT NULL DEFAULT false,
    active        boolean NOT NULL DEFAULT true,
    created_at    timestamptz NOT NULL DEFAULT now(),
    modified_at   timestamptz NOT NULL DEFAULT now()
);

-- The bearer token is never stored, only its SHA-256.
CREATE TABLE user_sessions (
    token_hash bytea PRIMARY KEY,
    user_id    integer NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);
CREATE INDEX user_sessions_user_idx ON user_sessions (user_id);

-- The first administrator; the master sets its password at start from EPOCHAL_ADMIN_PASSWORD.
INSERT INTO users (username, admin) VALUES ('admin', true);
