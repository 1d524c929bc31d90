-- Determined's `det user link-with-agent-user`: the Unix identity a user's runs have on agents.
-- Unset, an agent gives the user an identity of its own range (agent_worker/sandbox.py).
ALTER TABLE users
    ADD COLUMN agent_uid   integer,
    ADD COLUMN agent_gid   integer,
    ADD COLUMN agent_user  text,
    ADD COLUMN agent_group text;
