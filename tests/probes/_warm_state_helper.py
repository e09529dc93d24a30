"""Module-level state of tests/probes/warm_state.py: the pids of the runs this image has seen."""
RUNS = []
