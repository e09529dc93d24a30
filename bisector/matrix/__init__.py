"""Scheduled version-matrix checks: the [matrix] table (config), its cells (cells), measuring them with
the bisect's engine (run), each cell against its baseline (compare, model), stored runs (history),
bisects of what moved (bisects) and the reports (report)."""
