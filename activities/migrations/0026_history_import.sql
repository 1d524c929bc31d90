-- Importing a Determined cluster's history (issue 39, services/history_import.py): each source
-- cluster once (by its clusterId), and what was imported from it, keyed by (source, kind,
-- Determined's id), so an import run again writes nothing twice and resumes where it stopped.
CREATE TABLE import_sources (
    id              serial PRIMARY KEY,
    kind            text NOT NULL DEFAULT 'determined' CHECK (kind IN ('determined')),
    cluster_id      text NOT NULL UNIQUE,
    cluster_name    text NOT NULL DEFAULT '',
    url             text NOT NULL,
    version         text NOT NULL DEFAULT '',
    first_import_at timestamptz NOT NULL DEFAULT now(),
    last_import_at  timestamptz NOT NULL DEFAULT now()
);

-- kind: user, workspace, project, template, experiment, trial, checkpoint, model,
-- model-version, trial-logs. `local_id` is the row's id here (a checkpoint's uuid, a template's
-- name); `done` and `source_state` are what the importer marked (a trial once its metrics and
-- checkpoints are in), so a later run skips what is done in the same source state.
CREATE TABLE import_objects (
    source_id    integer NOT NULL REFERENCES import_sources (id) ON DELETE CASCADE,
    kind         text NOT NULL,
    external_id  text NOT NULL,
    local_id     text NOT NULL,
    done         boolean NOT NULL DEFAULT false,
    source_state text,
    imported_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source_id, kind, external_id)
);
CREATE INDEX import_objects_local_idx ON import_objects (kind, local_id);

-- An imported experiment names its source and its id there (the dashboard shows "Imported from
-- Determined at <url>, experiment <id>"); no workflow ever ran it here.
ALTER TABLE experiments
    ADD COLUMN import_source_id   integer REFERENCES import_sources (id) ON DELETE SET NULL,
    ADD COLUMN import_external_id text;

-- Determined's project notes ([{name, contents}]), which the API showed as [] before.
ALTER TABLE projects ADD COLUMN notes jsonb NOT NULL DEFAULT '[]';

-- An imported log line's id at its source (Determined's is a string: a number from its database,
-- or an Elasticsearch document's id): sent again, it is not written twice; a restarted log
-- import of a trial deletes the lines that carry one.
ALTER TABLE task_logs ADD COLUMN import_log_id text;
CREATE UNIQUE INDEX task_logs_import_idx ON task_logs (trial_id, import_log_id)
    WHERE import_log_id IS NOT NULL;
