"""How the command meter learns that torch has arrived, however it arrives (standard library only).

``TorchWatch`` calls ``on_torch(module)`` once, when ``torch`` has finished importing:

* torch already imported when the meter starts (a ``.pth`` file or another ``sitecustomize`` did it): at once;
* any import of torch that reaches the import system (``import torch``, ``__import__``,
  ``importlib.import_module``, a C extension's ``PyImport_ImportModule``, a lazy module's first use): a
  finder at the front of ``sys.meta_path`` finds torch's spec through the finders after it and wraps that
  spec's loader, so whoever executes the spec (the import system, ``importlib.util.LazyLoader``, a library
  that calls ``module_from_spec`` itself) runs torch's ``__init__`` and then the hook. A lookup alone
  (``importlib.util.find_spec("torch")``, as ``datasets`` and ``transformers`` do before importing it) uses
  nothing up: the finder stays in place for the real import;
* torch loaded by a finder ahead of this one: seen at the next import of any module, once torch's module is
  whole (its spec no longer ``_initializing``).

The finder never leaves ``sys.meta_path`` (removing it while an import walks the list would make that import
skip the next finder); once torch is hooked it answers None at once.
"""
import _thread
import sys


class TorchWatch:
    """The meta-path finder that hooks torch once (see the module's docstring)."""

    def __init__(self, on_torch):
        self._on_torch = on_torch
        self.done = False
        self.how = None   # how torch was seen: "present", "loader", "later"
        self._busy = set()   # threads inside this finder's own lookup
        self._running = 0   # torch modules being executed through a wrapped loader now

    def arm(self) -> None:
        if "torch" in sys.modules and self._whole(sys.modules["torch"]):
            self._fire(sys.modules["torch"], "present")
        else:
            sys.meta_path.insert(0, self)

    @staticmethod
    def _whole(module) -> bool:
        """torch's module has run to its end (never touched while a lazy loader holds it: that would load it)."""
        if type(module).__name__ == "_LazyModule":
            return False
        spec = getattr(module, "__spec__", None)
        return spec is not None and not getattr(spec, "_initializing", False)

    def _fire(self, module, how) -> None:
        if self.done:
            return
        self.done, self.how = True, how
        self._on_torch(module)

    def find_spec(self, fullname, path=None, target=None):
        if self.done:
            return None
        if fullname != "torch":
            torch = sys.modules.get("torch")
            if torch is not None and not self._running and self._whole(torch):   # a finder ahead of this one did
                self._fire(torch, "later")
            return None
        me = _thread.get_ident()
        if me in self._busy:
            return None
        self._busy.add(me)
        try:
            import importlib.util

            spec = importlib.util.find_spec(fullname)   # the finders after this one (it answers None to itself)
        finally:
            self._busy.discard(me)
        loader = getattr(spec, "loader", None)
        if loader is not None and hasattr(loader, "exec_module"):
            self._wrap(loader)
        return spec

    def _wrap(self, loader) -> None:
        original = loader.exec_module
        watch = self

        def exec_module(module):
            watch._running += 1   # torch's __init__ is running: not whole yet, whatever its spec says
            try:
                original(module)
            finally:
                watch._running -= 1
            if getattr(module, "__name__", None) == "torch":
                try:
                    del loader.exec_module   # the loader as it was
                except AttributeError:
                    pass
                watch._fire(module, "loader")

        try:
            loader.exec_module = exec_module
        except (AttributeError, TypeError):   # a loader that takes no attribute: seen "later" instead
            pass

    def invalidate_caches(self):
        pass
