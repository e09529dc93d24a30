"""Deciding what measurements mean, for every engine that measures (bisect, diff, matrix): ``judge`` (one
candidate's verdict), ``paired`` (stats mode's interleaved comparisons), ``change_search`` (ddmin over the
changes between two setups) and ``seam`` (the measuring protocol they call)."""
