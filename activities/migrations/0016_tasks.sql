-- Interactive tasks (Determined's NTSC: notebooks, TensorBoards, shells, commands): each holds
-- slots of a resource pool like a trial run, and is run by one TaskWorkflow (`task-<id>`).
CREATE TABLE tasks (
    id             text PRIMARY KEY,  -- a UUID, as Determined's task ids
    task_type      text NOT NULL
                   CHECK (task_type IN ('COMMAND', 'NOTEBOOK', 'SHELL', 'TENSORBOARD')),
    owner_id       integer NOT NULL REFERENCES users (id),
    workspace_id   integer NOT NULL REFERENCES workspaces (id),
    description    text NOT NULL,
    config         jsonb NOT NULL,    -- the task's config, defaults filled in
    context        bytea,             -- the files of --context and --include, a .tar.gz
    -- QUEUED (waiting for slots), STARTING (on an agent, not ready), RUNNING, TERMINATING,
    -- TERMINATED: Determined's taskv1State without its STATE_ prefix.
    state          text NOT NULL DEFAULT 'QUEUED',
    exit_status    text,              -- how it ended, for people
    resource_pool  text NOT NULL,
    slots          integer NOT NULL,
    priority       integer,
    agent_id       text,
    -- Where the task's service listens (host:port on its agent), once it does; the master's
    -- proxy (/proxy/<id>/) forwards there.
    proxy_address  text,
    ready          boolean NOT NULL DEFAULT false,
    agent_user     text,              -- who the task runs as on its agent (a shell's login)
    -- The service's own credential (Jupyter's token), which only the master's proxy sends.
    secret         text NOT NULL,
    public_key     text,              -- a shell's: the key its sshd accepts
    private_key    text,              -- a shell's: what `det shell open` connects with
    -- The owner's session the task's code runs with (DET_USER_TOKEN), minted when an agent
    -- fetches the launch and revoked when the task ends.
    session_hash   bytea,
    experiment_ids integer[] NOT NULL DEFAULT '{}',  -- a TensorBoard's
    trial_ids      integer[] NOT NULL DEFAULT '{}',
    created_at     timestamptz NOT NULL DEFAULT now(),
    started_at     timestamptz,
    ended_at       timestamptz,
    -- The last request through the proxy (a notebook's idle_timeout counts from it).
    last_activity  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX tasks_owner_idx ON tasks (owner_id, created_at);

-- A task's output is kept in task_logs too, by task id, with no trial.
ALTER TABLE task_logs ALTER COLUMN trial_id DROP NOT NULL;
CREATE INDEX task_logs_task_idx ON task_logs (task_id, id) WHERE trial_id IS NULL;
