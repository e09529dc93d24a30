"""The vocabulary every stage shares: verdicts, candidates, measurements, criteria, the pure search
core and the typed result. Nothing here does I/O."""
