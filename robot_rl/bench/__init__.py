"""Benchmarks: `robot-rl bench NAME [--quick] [--json]`."""
