"""``bisector diff``: two setups at one version (package pins and probe settings), and the smallest
difference between them that explains the metric (model, setups, knobs, engine, follow, report)."""
