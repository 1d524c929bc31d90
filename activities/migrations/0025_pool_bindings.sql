-- Resource pools bound to workspaces (Determined's rp_workspace_bindings): a pool with bindings
-- is usable only by the workspaces bound to it; a pool with none, by every workspace. A
-- workspace's default pools (for submissions that name none) and its slot cap, which the
-- scheduler reads as `workspaces.max_slots` (null: no cap). Slots an admin disabled
-- (`det slot disable`), kept across the agent's restarts as `agents.enabled` is.

CREATE TABLE pool_workspace_bindings (
    pool_name     text NOT NULL,
    workspace_id  integer NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (pool_name, workspace_id)
);
CREATE INDEX pool_workspace_bindings_workspace ON pool_workspace_bindings (workspace_id);

ALTER TABLE workspaces
    ADD COLUMN default_compute_pool text NULL,
    ADD COLUMN default_aux_pool     text NULL,
    ADD COLUMN max_slots            integer NULL CHECK (max_slots >= 0);

CREATE TABLE disabled_slots (
    agent_id     text NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
    slot_id      text NOT NULL,  -- the slot's id as the agent registered it ("0", "1", ...)
    reason       text NOT NULL DEFAULT '',
    disabled_by  text NULL,
    disabled_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (agent_id, slot_id)
);
