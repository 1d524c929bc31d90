"""What the API does, a module per concept, between its routes (HTTP) and the database, Temporal
and `activities/`: routes call services; services check policy, run the SQL their concept owns,
start and signal workflows and run activities' shared code. Below `api/`: no service imports an
`api` module, and a refusal is one of `services.errors`' types, which the API answers with a
status (api/errors.py)."""
