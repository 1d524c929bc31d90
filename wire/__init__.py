"""What workflows, activities, the API and agents send each other through Temporal: plain
dataclasses, below every part that imports them; and `run_spec.RunSpec`, what an agent runs,
built from the config model (`common.expconf`) and sent as JSON inside them."""
