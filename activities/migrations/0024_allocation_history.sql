-- A record of who used what (issue 38): every allocation of slots, a trial run's or an
-- interactive task's, from when it got its slots to when it gave them back. Written by the
-- master's activities (activities/experiment_store.py's record_trial_state when a trial is
-- recorded RUNNING with its run id, closed at its next state; activities/task_store.py's
-- record_task_state when a task starts, closed when it terminates); read by
-- `det resources raw|aggregated` (api/queries/resources.py).
--
-- Rows outlive what they describe (no foreign keys: deleting an experiment, a task or a
-- workspace keeps the record of what it used). Who and where are kept as they were at the start
-- (user and workspace by id and by name; the reports show the current names while the user and
-- workspace exist). A continued trial numbers its runs from 1 again, so an allocation id may
-- recur once its earlier row is closed: it is unique among open rows, which is what makes a
-- retried start write nothing twice.
CREATE TABLE allocation_history (
    id             bigserial PRIMARY KEY,
    allocation_id  text NOT NULL,        -- `<experiment>.<trial>.<run>`, or a task's `<task>.1`
    task_id        text NOT NULL,        -- `<experiment>.<trial>`, or the task's uuid
    task_type      text NOT NULL
                   CHECK (task_type IN ('TRIAL', 'COMMAND', 'NOTEBOOK', 'SHELL', 'TENSORBOARD')),
    experiment_id  integer,              -- null for a task
    trial_id       integer,
    run_id         integer,
    user_id        integer,
    username       text NOT NULL,
    workspace_id   integer,
    workspace_name text,
    labels         text[] NOT NULL DEFAULT '{}',  -- the experiment's, when the run started
    resource_pool  text NOT NULL,
    slots          integer NOT NULL CHECK (slots >= 0),
    agent_ids      text[] NOT NULL DEFAULT '{}',  -- the agent granted (a run's chief's)
    start_time     timestamptz NOT NULL,
    end_time       timestamptz,          -- null while the slots are held
    CHECK (end_time IS NULL OR end_time >= start_time)
);
CREATE UNIQUE INDEX allocation_history_open ON allocation_history (allocation_id)
    WHERE end_time IS NULL;
CREATE INDEX allocation_history_open_trial ON allocation_history (trial_id)
    WHERE end_time IS NULL;
-- The reports' reads: the allocations that overlap a period.
CREATE INDEX allocation_history_span ON allocation_history
    USING gist (tstzrange(start_time, coalesce(end_time, 'infinity'::timestamptz)));
