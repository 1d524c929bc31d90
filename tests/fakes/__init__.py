"""Stand-ins for the master that tests talk to: the agent's (a real HTTP server), the CLI's
and the harness's (httpx transports)."""
