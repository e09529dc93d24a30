"""Checking environments: readiness from disk, the proof from a probe's own imports, the standalone
health check, and what a built package's metadata says."""
