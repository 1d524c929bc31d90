"""What one agent registration (its heartbeat) may carry: the master refuses more
(api/routes/agents.py), and the agent sends no more (agent_worker/registration.py)."""

MAX_RUN_PORTS = 4096  # the agent's runs' listening ports
MAX_ADDRESSES = 64  # its host's addresses
