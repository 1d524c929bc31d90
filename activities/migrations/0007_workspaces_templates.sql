-- Determined's workspaces and projects (experiments live in a project), and config templates.
-- Workspace 1 and its project 1, both "Uncategorized", always exist: Determined's default.

CREATE TABLE workspaces (
    id          serial PRIMARY KEY,
    name        text NOT NULL UNIQUE,
    owner       text NOT NULL DEFAULT 'admin',
    archived    boolean NOT NULL DEFAULT false,
    immutable   boolean NOT NULL DEFAULT false,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE projects (
    id            serial PRIMARY KEY,
    workspace_id  integer NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    name          text NOT NULL,
    key           text NOT NULL UNIQUE,
    description   text NOT NULL DEFAULT '',
    owner         text NOT NULL DEFAULT 'admin',
    archived      boolean NOT NULL DEFAULT false,
    immutable     boolean NOT NULL DEFAULT false,
    created_at    timestamptz NOT NULL DEFAULT now(),
    UNIQUE (workspace_id, name)
);

INSERT INTO workspaces (id, name, immutable) VALUES (1, 'Uncategorized', true);
INSERT INTO projects (id, workspace_id, name, key, immutable)
    VALUES (1, 1, 'Uncategorized', 'UNC', true);
SELECT setval('workspaces_id_seq', 1);
SELECT setval('projects_id_seq', 1);

ALTER TABLE experiments
    ADD COLUMN project_id integer NOT NULL DEFAULT 1 REFERENCES projects (id),
    ADD COLUMN parent_id integer;  -- the experiment it was forked or continued from
CREATE INDEX experiments_project_id ON experiments (project_id);

CREATE TABLE templates (
    name          text PRIMARY KEY,
    workspace_id  integer NOT NULL DEFAULT 1 REFERENCES workspaces (id) ON DELETE CASCADE,
    config        jsonb NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now()
);
