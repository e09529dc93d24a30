"""The ``bisector`` command line: the parser and the flags' mapping onto config (args), the dispatcher
with run / log / runs / report (main), and the matrix, probe and envs commands."""
