"""What bisector knows of each probe's output: labels for its metrics, the facts kept per side, and
the sentences saying what moved (generic for any probe; ga_memory's own; chosen in registry)."""
