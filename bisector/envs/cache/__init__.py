"""Administering the environment cache: listing, in-use marks, garbage collection, disk accounting and
prefetching what the bisect will likely need next."""
