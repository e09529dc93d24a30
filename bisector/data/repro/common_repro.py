# The functions every repro script shares (bisector writes them into each kind's script at its part "common";
# they read the script's settings: USAGE, METRIC, THRESHOLD, DIRECTION, and UNITS / DECLARED_UNITS below).


def fail(message):
    """A usage error: one line on stderr, exit 2 (never a traceback)."""
    print(f"{os.path.basename(sys.argv[0])}: error: {shown(message)}", file=sys.stderr)
    sys.exit(2)


def arguments(argv, takes_command=False):
    """This script's own arguments: none, or (where it measures any command) ``-- COMMAND ...``; -h says so."""
    if argv[:1] in (["-h"], ["--help"]):
        print(f"usage: python {os.path.basename(sys.argv[0])}{USAGE}\n\n{__doc__.strip()}")
        sys.exit(0)
    if takes_command and argv[:1] == ["--"]:
        if len(argv) < 2:
            fail("no command after --")
        return argv[1:]
    if argv:
        fail(f"unknown argument {argv[0]!r}; usage: python {os.path.basename(sys.argv[0])}{USAGE}")
    return None


def shown(text):
    """``text`` with every character that could act on a terminal (a control, a newline, bidi) as its escape."""
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in str(text))


_LOADED = {}


def _units():
    if "units" not in _LOADED:
        module = types.ModuleType("bisector_units")
        exec(compile(UNITS, "units.py", "exec"), module.__dict__)   # noqa: S102 - bisector's own, embedded below
        module.declare(DECLARED_UNITS)
        _LOADED["units"] = module
    return _LOADED["units"]


def human(value, metric):
    """``value`` in ``metric``'s unit, as bisector's reports print it (bisector/core/units.py, below)."""
    return _units().human_value(value, metric)


def write_files(root, files):
    """Each of ``files`` (relative path -> source) written under ``root``."""
    for rel, source in files.items():
        path = os.path.join(root, *rel.split("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as fh:
            fh.write(source if isinstance(source, bytes) else source.encode("utf-8"))


def judged(value):
    """METRIC's verdict by THRESHOLD, printed on stdout; True when BAD."""
    bad = value > THRESHOLD if DIRECTION == "increase" else value < THRESHOLD
    side = ">" if DIRECTION == "increase" else "<"
    print(f"{METRIC} = {human(value, METRIC)}: {'BAD' if bad else 'GOOD'} (BAD when {side} {human(THRESHOLD, METRIC)})")
    return bad
