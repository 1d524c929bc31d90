-- Determined's model registry: named models whose numbered versions are checkpoints.
-- A registered checkpoint is never garbage-collected, and its experiment cannot be deleted
-- (the foreign key has no cascade: the API refuses first, naming the model and version).

CREATE TABLE models (
    id            serial PRIMARY KEY,
    name          text NOT NULL UNIQUE,
    description   text NOT NULL DEFAULT '',
    notes         text NOT NULL DEFAULT '',
    metadata      jsonb NOT NULL DEFAULT '{}',
    labels        text[] NOT NULL DEFAULT '{}',
    owner         text NOT NULL,
    workspace_id  integer NOT NULL DEFAULT 1 REFERENCES workspaces (id),
    archived      boolean NOT NULL DEFAULT false,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE model_versions (
    id               serial PRIMARY KEY,
    model_id         integer NOT NULL REFERENCES models (id) ON DELETE CASCADE,
    version          integer NOT NULL,
    checkpoint_uuid  uuid NOT NULL REFERENCES checkpoints (uuid),
    name             text NOT NULL DEFAULT '',
    comment          text NOT NULL DEFAULT '',
    notes            text NOT NULL DEFAULT '',
    metadata         jsonb NOT NULL DEFAULT '{}',
    labels           text[] NOT NULL DEFAULT '{}',
    owner            text NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    UNIQUE (model_id, version)
);
CREATE INDEX model_versions_checkpoint ON model_versions (checkpoint_uuid);
