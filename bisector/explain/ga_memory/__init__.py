"""The ga_memory probe's explainer: its metric names, the story of one version, and how results moved
between last good and first bad."""
