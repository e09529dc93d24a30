"""Building environments: the shared base (this interpreter, a prefix, or a torch venv), the installer
backends, commit wheels, the overlay of the base, and build-once staging."""
