"""What workflows, activities, the API and agents send each other through Temporal: plain
dataclasses, below every part that imports them."""
