-- Experiments, their trials, and everything trials report.

CREATE TABLE experiments (
    id              serial PRIMARY KEY,
    name            text NOT NULL,
    description     text,
    labels          text[] NOT NULL DEFAULT '{}',
    config          jsonb NOT NULL,
    original_config text NOT NULL,
    state           text NOT NULL DEFAULT 'ACTIVE',
    owner           text NOT NULL DEFAULT 'admin',
    seed            bigint NOT NULL,
    progress        double precision NOT NULL DEFAULT 0,
    archived        boolean NOT NULL DEFAULT false,
    best_trial_id   integer,
    start_time      timestamptz NOT NULL DEFAULT now(),
    end_time        timestamptz
);

CREATE TABLE model_definitions (
    experiment_id integer PRIMARY KEY REFERENCES experiments (id) ON DELETE CASCADE,
    tgz           bytea NOT NULL,
    size_bytes    bigint NOT NULL
);

CREATE TABLE trials (
    id                serial PRIMARY KEY,
    experiment_id     integer NOT NULL REFERENCES experiments (id) ON DELETE CASCADE,
    request_id        integer NOT NULL,
    hparams           jsonb NOT NULL,
    seed              bigint NOT NULL,
    state             text NOT NULL DEFAULT 'QUEUED',
    restarts          integer NOT NULL DEFAULT 0,
    run_id            integer NOT NULL DEFAULT 0,
    steps_completed   bigint NOT NULL DEFAULT 0,
    progress          double precision NOT NULL DEFAULT 0,
    preempt_requested boolean NOT NULL DEFAULT false,
    early_exit_reason text,
    agent_id          text,
    start_time        timestamptz NOT NULL DEFAULT now(),
    end_time          timestamptz,
    UNIQUE (experiment_id, request_id)
);
CREATE INDEX trials_experiment_idx ON trials (experiment_id);

-- One row per (trial, group, steps): a retried report replaces its row, never doubles it.
CREATE TABLE metrics (
    id              bigserial PRIMARY KEY,
    trial_id        integer NOT NULL REFERENCES trials (id) ON DELETE CASCADE,
    trial_run_id    integer NOT NULL DEFAULT 0,
    metric_group    text NOT NULL,
    steps_completed bigint NOT NULL,
    metrics         jsonb NOT NULL,
    report_time     timestamptz NOT NULL DEFAULT now(),
    UNIQUE (trial_id, metric_group, steps_completed)
);

CREATE TABLE checkpoints (
    uuid            uuid PRIMARY KEY,
    trial_id        integer NOT NULL REFERENCES trials (id) ON DELETE CASCADE,
    task_id         text NOT NULL,
    allocation_id   text NOT NULL,
    steps_completed bigint NOT NULL,
    metadata        jsonb NOT NULL DEFAULT '{}',
    resources       jsonb NOT NULL DEFAULT '{}',
    storage_path    text NOT NULL,
    state           text NOT NULL DEFAULT 'COMPLETED',
    report_time     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX checkpoints_trial_idx ON checkpoints (trial_id, steps_completed);

CREATE TABLE task_logs (
    id            bigserial PRIMARY KEY,
    trial_id      integer NOT NULL REFERENCES trials (id) ON DELETE CASCADE,
    task_id       text NOT NULL,
    allocation_id text,
    agent_id      text,
    stdtype       text,
    level         text,
    log           text NOT NULL,
    timestamp     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX task_logs_trial_idx ON task_logs (trial_id, id);

CREATE TABLE agents (
    id             text PRIMARY KEY,
    resource_pool  text NOT NULL,
    slots          jsonb NOT NULL,
    version        text,
    enabled        boolean NOT NULL DEFAULT true,
    registered_at  timestamptz NOT NULL DEFAULT now(),
    last_seen      timestamptz NOT NULL DEFAULT now()
);
