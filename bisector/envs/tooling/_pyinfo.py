"""Describe the interpreter running this file (stdlib only: it runs inside base interpreters).

Printed as JSON when run as a script; :func:`describe` is also called in-process for the
interpreter running bisector.
"""
import json
import os
import platform
import site
import sys


def marker_environment():
    """PEP 508 marker variables of this interpreter (as packaging computes them)."""
    impl = sys.implementation
    iver = "{0.major}.{0.minor}.{0.micro}".format(impl.version)
    if impl.version.releaselevel != "final":
        iver += impl.version.releaselevel[0] + str(impl.version.serial)
    return {
        "implementation_name": impl.name,
        "implementation_version": iver,
        "os_name": os.name,
        "platform_machine": platform.machine(),
        "platform_release": platform.release(),
        "platform_system": platform.system(),
        "platform_version": platform.version(),
        "python_full_version": platform.python_version(),
        "platform_python_implementation": platform.python_implementation(),
        "python_version": ".".join(platform.python_version_tuple()[:2]),
        "sys_platform": sys.platform,
    }


def site_dirs():
    """Existing site-packages dirs in import order (user site first when it is enabled)."""
    dirs = []
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    dirs += site.getsitepackages()
    seen = []
    for d in dirs:
        if os.path.isdir(d) and os.path.realpath(d) not in [os.path.realpath(s) for s in seen]:
            seen.append(d)
    order = {os.path.realpath(p): i for i, p in enumerate(sys.path)}
    return sorted(seen, key=lambda d: order.get(os.path.realpath(d), len(order)))


def describe():
    """executable, version, prefix, site dirs and marker environment."""
    return {
        "executable": sys.executable,
        "version": platform.python_version(),
        "prefix": sys.prefix,
        "base_prefix": getattr(sys, "base_prefix", sys.prefix),
        "site_dirs": site_dirs(),
        "markers": marker_environment(),
    }


if __name__ == "__main__":
    print(json.dumps(describe()))
