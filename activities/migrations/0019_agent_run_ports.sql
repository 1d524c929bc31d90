-- The ports each agent's runs listen on (port, the run's uid) and the addresses the agent's host
-- is reached at: every other agent closes them to other users' runs (agent_worker/trial_firewall.py).
ALTER TABLE agents
    ADD COLUMN run_ports jsonb NOT NULL DEFAULT '[]',
    ADD COLUMN addresses jsonb NOT NULL DEFAULT '[]';
