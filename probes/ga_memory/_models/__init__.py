"""The models a cell trains: causal LMs from configs with random weights (``build``), the shapes of real
models (``shapes``), and what a cell needs at least, from the spec alone (``budget``: stdlib only, read
before a run by ``_preflight.py``)."""
