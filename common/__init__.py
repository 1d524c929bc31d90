"""What every part of Epochal shares, so no part has to import another's package for it:
Temporal's names (`temporal_names`: queues, workflow ids and types, activities, signals,
queries, updates), the trial tokens agents mint and the API checks (`tokens`), the states
experiments and trials are in (`states`), the agent's command line (`agent_args`) and how
yes/no settings are read (`flags`). Pure: no IO, safe in workflow code."""
