"""The built-in probes, shipped as the package data ``bisector.data.probes`` (pyproject's package-dir).

Each probe runs inside a candidate environment as a script and imports only the stdlib and the ML
stack, never bisector; nothing imports this package (it exists so importlib.resources finds it).
"""
