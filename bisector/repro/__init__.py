"""The repro: the standalone script ``bisector report --repro FILE`` writes (what a maintainer runs without
bisector) and its verification in fresh environments built from the script's own install lines. Used by
cli/cmd_stored only."""
