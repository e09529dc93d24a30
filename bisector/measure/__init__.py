"""Measuring one candidate: which probe (spec), what it writes (protocol), running it (execute),
building or reusing the environment and storing the measurement (measurer), one GPU per probe (gpus)."""
