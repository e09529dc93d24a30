"""Where the package under test lives in this environment (standard library only): the command meter places an
allocation at the innermost frame inside it (``_meters.sites.SitePicker``)."""
import os


def _top_names(dist):
    """The importable top-level names a distribution installs (``top_level.txt``, else its files)."""
    text = dist.read_text("top_level.txt")
    if text and text.split():
        return text.split()
    names = []
    for path in dist.files or ():
        parts = path.parts
        if len(parts) > 1 and parts[0].isidentifier() and parts[-1].endswith(".py") and parts[0] not in names:
            names.append(parts[0])
        elif len(parts) == 1 and parts[0].endswith(".py") and parts[0][:-3].isidentifier():
            names.append(parts[0][:-3])
    return names


def package_dirs(package):
    """The directories (or single module files) of ``package``'s top-level modules here, found without importing
    them; [] for no package or one this environment lacks."""
    if not package:
        return []
    from importlib import metadata, util

    names = []
    try:
        names = _top_names(metadata.distribution(package))
    except Exception:  # noqa: BLE001 - not installed, or odd metadata: the name itself below
        pass
    guess = package.replace("-", "_").replace(".", "_").lower()
    out = []
    for name in names or [guess]:
        try:
            spec = util.find_spec(name)
        except (ImportError, ValueError):
            continue
        if spec is None:
            continue
        if spec.submodule_search_locations:
            out += [os.path.abspath(p) for p in spec.submodule_search_locations]
        elif spec.origin and os.path.isfile(spec.origin):
            out.append(os.path.abspath(spec.origin))
    return sorted(set(out))
