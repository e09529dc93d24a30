"""Allocation-site labels for the CPU meter's attribution.

A label reads ``<dtype> <autograd node> | <code location>``:

* the dtype of the tensor that created the storage (``bfloat16``, ``float32``...);
* during backward, the autograd node running (``ToCopyBackward0``, ``AccumulateGrad``...);
* the innermost Python frame outside torch's own internals (``torch/optim`` counts as code,
  so optimizer allocations are placed), shortened to ``package/path.py:line func``.
  The meter's own frames are skipped; the probe's loop frames are not.

A user's program (the command meter) places a storage by ``SitePicker``: the innermost frame inside the
package under test, else the outermost frame in any site-packages (torch's internals aside), else the
innermost frame of the program's own files.
"""
from __future__ import annotations

import os
import sys
import sysconfig

import torch

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_KEEP_UNDER_TORCH = (os.path.join(_TORCH_DIR, "optim") + os.sep,)
_HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "")   # the meter library: its frames are skipped
_current_node = getattr(torch._C, "_current_autograd_node", None)


def _is_internal(filename: str) -> bool:
    if filename.startswith(_TORCH_DIR):
        return not filename.startswith(_KEEP_UNDER_TORCH)
    return filename.startswith(_HERE) or filename.startswith("<")


def short_path(filename: str) -> str:
    """``.../site-packages/transformers/models/x.py`` -> ``transformers/models/x.py``."""
    marker = "site-packages" + os.sep
    if marker in filename:
        return filename.rsplit(marker, 1)[1]
    if filename.startswith(_TORCH_DIR):
        return "torch/" + filename[len(_TORCH_DIR):]
    return os.path.basename(filename)


def code_location(max_depth: int = 80) -> str:
    """The innermost frame outside torch internals and the probe, as ``path:line func``."""
    frame = sys._getframe(1)
    depth = 0
    while frame is not None and depth < max_depth:
        code = frame.f_code
        if not _is_internal(code.co_filename):
            return f"{short_path(code.co_filename)}:{frame.f_lineno} {code.co_name}"
        frame = frame.f_back
        depth += 1
    return "?"


def autograd_node() -> str:
    """Name of the autograd node being executed now, or '' outside backward."""
    if _current_node is None:
        return ""
    node = _current_node()
    if node is None:
        return ""
    return node.name().replace("torch::autograd::", "")


def site_of(tensor) -> str:
    """Full site label for a storage first produced as ``tensor``."""
    dtype = str(tensor.dtype).replace("torch.", "")
    node = autograd_node()
    where = code_location()
    return f"{dtype} {node} | {where}" if node else f"{dtype} | {where}"


_LIBRARIES = (os.sep + "site-packages" + os.sep, os.sep + "dist-packages" + os.sep)
_STDLIB = tuple({os.path.join(sysconfig.get_paths()[k], "") for k in ("stdlib", "platstdlib")})


def _where(frame) -> str:
    code = frame.f_code
    return f"{short_path(code.co_filename)}:{frame.f_lineno} {code.co_name}"


class SitePicker:
    """Where a user's program allocated a storage, as ``path:line func``: the innermost frame inside the package
    under test (``package_dirs``: its directories or module files); else the outermost frame in any site-packages, torch's
    internals aside (where the program entered a library); else the innermost frame of the program's own files
    (outside site-packages and the standard library). ``skip``: directories whose frames are never a site (the
    meter's own)."""

    def __init__(self, package_dirs=(), skip=()):
        self.dirs = tuple(os.path.join(os.path.abspath(d), "") if os.path.isdir(d) else os.path.abspath(d)
                          for d in package_dirs if d)   # a single-module package: its file
        self.skip = tuple(os.path.join(os.path.abspath(d), "") for d in skip if d) + (_HERE,)

    def where(self, max_depth: int = 200) -> str:
        frame, depth = sys._getframe(1), 0
        library = own = None
        dirs, skip = self.dirs, self.skip
        while frame is not None and depth < max_depth:
            name = frame.f_code.co_filename
            if dirs and name.startswith(dirs):
                if not name.endswith("_python_dispatch.py"):
                    return _where(frame)
            elif name.startswith(skip) or name.startswith("<") or _is_internal(name):
                pass
            elif any(mark in name for mark in _LIBRARIES):
                library = frame
            elif own is None and not name.startswith(_STDLIB):
                own = frame
            frame = frame.f_back
            depth += 1
        found = library or own
        return _where(found) if found is not None else "?"

    def site(self, tensor) -> str:
        """The full label (``site_of``'s shape) of a storage first produced as ``tensor`` here."""
        dtype = str(tensor.dtype).replace("torch.", "")
        node = autograd_node()
        where = self.where()
        return f"{dtype} {node} | {where}" if node else f"{dtype} | {where}"
