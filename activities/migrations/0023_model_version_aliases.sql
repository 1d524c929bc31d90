-- MLflow's aliases in the model registry: a name ("production", "champion") that points at one
-- version of a model. Unique within the model, so setting it on another version moves it;
-- deleting the version (or the model) deletes its aliases.

CREATE TABLE model_version_aliases (
    model_id    integer NOT NULL REFERENCES models (id) ON DELETE CASCADE,
    alias       text NOT NULL,
    version_id  integer NOT NULL REFERENCES model_versions (id) ON DELETE CASCADE,
    owner       text NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (model_id, alias)
);
CREATE INDEX model_version_aliases_version ON model_version_aliases (version_id);
