"""The repro: the standalone script ``bisector report --repro FILE`` writes (what a maintainer runs without
bisector) and its verification in fresh environments built from the script's own install lines. Used by
cli/cmd_stored only.

script (the script of a stored bisect, by the probe's kind)  kinds (each kind's settings)  template (the one
template style: bisector/data/repro/<kind>_repro.py with marked parts, filled with one-line comments and
Python literals only)  header (what it reproduces, the install lines)  embed (a probe's own files)  carry (the
user's files a command names)  source_mask (their secrets masked, their Python kept)  probe_view (every read
of the probe's fields)  verify (fresh venvs, the verdicts, the record)  fresh_venvs (the lines run as printed)
"""
