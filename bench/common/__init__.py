"""What the benches share: `--smoke` sizes and logging in to a cluster. Not benches."""
