"""What an environment is: its spec, the recipe and fingerprint made from it, the cache layout, and a
ready environment with its info file."""
