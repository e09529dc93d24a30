"""A fresh venv that sees this interpreter's packages (the shared torch among them), whether the tests run in the
system interpreter or in a venv (as the README's set-up advises where the system Python refuses pip).

``python -m venv --system-site-packages`` from a venv's interpreter sees the *base* interpreter's packages, not the
venv's: a test run from a venv would find no torch there. A ``.pth`` line that adds this interpreter's own
site-packages (with ``site.addsitedir``, so their ``.pth`` files, editable installs among them, are read too) makes
the new venv see what this one sees, and packages installed into the new venv still come first."""
from __future__ import annotations

import site
import subprocess
import sys
import sysconfig
from pathlib import Path


def venv_over_this_interpreter(path: Path, pip: bool = False) -> Path:
    """Make a venv at ``path`` over this interpreter's packages; its python."""
    argv = [sys.executable, "-m", "venv", "--system-site-packages", *([] if pip else ["--without-pip"]), str(path)]
    subprocess.run(argv, check=True)
    python = Path(path) / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    ours = [p for p in dict.fromkeys([sysconfig.get_paths()["purelib"], *site.getsitepackages()]) if Path(p).is_dir()]
    lines = [f"import site; site.addsitedir({p!r})" for p in ours]
    (Path(purelib) / "_over_this_interpreter.pth").write_text("\n".join(lines) + "\n")
    return python
