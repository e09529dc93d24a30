"""EnvManager: content-addressed candidate environments, built once, reused everywhere.

``ensure`` looks the env up by fingerprint (os.stat checks and the info file only); when it
is missing or damaged it takes ``<cache>/locks/<fingerprint>.lock`` (so two processes end
with one env), looks again, and builds into a temp dir renamed into place.
"""
from __future__ import annotations

import contextlib
import logging
import time
from collections import Counter
from pathlib import Path
from typing import Iterator, Optional

from filelock import FileLock, Timeout

from bisector.envs import builder
from bisector.envs.backends import Backend, PipBackend, make_backend
from bisector.envs.base import described_prefixes, resolve_base, torch_base_ready
from bisector.envs.environment import Environment
from bisector.envs.gc import select_for_removal
from bisector.envs.info import EnvInfo, InterpreterStamp, read_info, utcnow, write_info
from bisector.envs.inuse import in_use, is_in_use, unused
from bisector.envs.prefetch import Prefetcher
from bisector.envs.recipe import Recipe, make_recipe, spec_for_target
from bisector.envs.spec import EnvSpec, InstallTarget
from bisector.envs.store import State, discard, quick_check, sweep
from bisector.envs.torchbase import remove_unused_bases, torch_bases
from bisector.errors import EnvironmentFailure

log = logging.getLogger("bisector.envs")
LOCK_TIMEOUT_S = 3 * 3600
STALE_TMP_S = 6 * 3600
BASE_GRACE_S = 3600


class EnvManager:
    """Builds and reuses candidate environments under ``cache_dir``.

    ``backend`` ("uv" or "virtualenv") overrides the spec's; when uv is not usable the
    manager falls back to virtualenv + pip and logs a warning saying so.
    """

    def __init__(self, cache_dir: Path, backend: Optional[str] = None):
        if backend not in (None, "uv", "virtualenv"):
            raise ValueError(f"unknown backend {backend!r}")
        self.cache_dir = Path(cache_dir).expanduser().resolve()
        self.backend_override = backend
        self._backends: dict[str, Backend] = {}
        self._prefetcher = Prefetcher(self._ensure_recipe)
        self._base_prefetcher = Prefetcher(lambda spec: resolve_base(spec, self.cache_dir), key=_base_key)
        for sub in ("envs", "locks", "tmp"):
            (self.cache_dir / sub).mkdir(parents=True, exist_ok=True)

    # -- public API -------------------------------------------------------------------
    def ensure(self, spec: EnvSpec, target: InstallTarget) -> Environment:
        """The ready env for ``target`` under ``spec``: reused, or built and health-checked.

        Raises EnvironmentFailure (resolution, build or health failure; nothing is left
        behind) or UsageError (contradictory spec).
        """
        recipe = self.recipe(spec, target)
        self._prefetcher.claim(recipe.fingerprint)
        return self._ensure_recipe(recipe)

    @contextlib.contextmanager
    def using(self, spec: EnvSpec, target: InstallTarget) -> Iterator[Environment]:
        """``ensure``, and keep the environment from ``gc`` (in any process) until the block ends."""
        recipe = self.recipe(spec, target)
        with in_use(self._use_lock_path(recipe.fingerprint)):
            self._prefetcher.claim(recipe.fingerprint)
            yield self._ensure_recipe(recipe)

    def in_use(self, fingerprint: str) -> bool:
        """Whether a process is using the environment with this fingerprint right now."""
        return is_in_use(self._use_lock_path(fingerprint))

    def prefetch(self, spec: EnvSpec, targets: list[InstallTarget]) -> None:
        """Build these envs in a background thread, one at a time, replacing earlier requests.

        For targets whose torch base is not built yet (torch candidates), the base is built
        in the background instead; their environments follow at the next call."""
        cheap = [self.recipe_is_cheap(spec, t) for t in targets]
        recipes = [self.recipe(spec, t) for t, ok in zip(targets, cheap) if ok]
        todo = [r for r in recipes if quick_check(self.env_dir(r), r.fingerprint)[0] is not State.READY]
        self._prefetcher.submit(todo)
        self._base_prefetcher.submit([spec_for_target(spec, t) for t, ok in zip(targets, cheap) if not ok])

    def wait_prefetch(self, timeout: Optional[float] = None) -> bool:
        """Block until background builds are done (True) or ``timeout`` passes (False)."""
        return self._base_prefetcher.wait_idle(timeout) and self._prefetcher.wait_idle(timeout)

    def list(self) -> list[EnvInfo]:
        """Info of every ready env, most recently used first."""
        infos = [i for d in sorted((self.cache_dir / "envs").iterdir()) if (i := read_info(d))]
        return sorted(infos, key=lambda i: i.last_used, reverse=True)

    def gc(self, keep_last: Optional[int] = None, max_size: Optional[int] = None) -> list[EnvInfo]:
        """Remove least recently used envs beyond ``keep_last`` / ``max_size`` bytes; return them.

        Envs being built, or used by a probe (see ``using``), in any process are skipped.
        Leftover temp and trash dirs, env dirs without a valid info file and overlays no env
        uses (after a while) are removed too.
        """
        removed = []
        for info in select_for_removal(self.list(), keep_last, max_size):
            if self._remove_if_free(info.dir_name, info.fingerprint):
                removed.append(info)
        self._sweep()
        return removed

    def bases(self) -> list[tuple[Path, int]]:
        """The ``torch==X`` base venvs in the cache, each with how many environments use it."""
        users = Counter(self._base_prefixes_in_use())
        return [(prefix, users[prefix]) for prefix in torch_bases(self.cache_dir)]

    def gc_bases(self, grace_s: float = BASE_GRACE_S) -> list[Path]:
        """Remove the ``torch==X`` bases no environment uses and none used for ``grace_s`` seconds
        (a base is used just before its first environment exists); return their prefixes."""
        return remove_unused_bases(self.cache_dir, set(self._base_prefixes_in_use()), grace_s)

    def _base_prefixes_in_use(self) -> list[Path]:
        """The base prefix of every ready environment (one entry per environment)."""
        prefixes = described_prefixes(self.cache_dir)
        return [prefixes[i.base_fingerprint] for i in self.list() if i.base_fingerprint in prefixes]

    # -- internals ----------------------------------------------------------------------
    def recipe(self, spec: EnvSpec, target: InstallTarget) -> Recipe:
        """The recipe (fingerprint, requirement set) of ``target`` under ``spec``.

        A torch candidate is a base: its environment is ``spec`` over a ``torch==<candidate>``
        base (built once per version), so building a recipe may build that base.
        """
        spec = spec_for_target(spec, target)
        if spec.torch_base_version:
            self._base_prefetcher.claim(_base_key(spec))  # being built in the background: wait for it
        base = resolve_base(spec, self.cache_dir)
        return make_recipe(spec, target, base, self.backend_override or spec.backend)

    def recipe_is_cheap(self, spec: EnvSpec, target: InstallTarget) -> bool:
        """Whether ``recipe`` needs no base to be built first (what prefetch may compute inline)."""
        spec = spec_for_target(spec, target)
        return spec.torch_base_version is None or torch_base_ready(spec, self.cache_dir)

    def env_dir(self, recipe: Recipe) -> Path:
        """Where the env of ``recipe`` lives."""
        return self.cache_dir / "envs" / recipe.dir_name

    def _use_lock_path(self, fingerprint: str) -> Path:
        return self.cache_dir / "locks" / f"{fingerprint}.use"

    def _lock(self, fingerprint: str, timeout: float = LOCK_TIMEOUT_S) -> FileLock:
        return FileLock(str(self.cache_dir / "locks" / f"{fingerprint}.lock"), timeout=timeout)

    def _ready(self, recipe: Recipe) -> Optional[Environment]:
        env_dir = self.env_dir(recipe)
        state, info = quick_check(env_dir, recipe.fingerprint)
        if state is State.STALE:
            info = self._recheck(env_dir, recipe, info)
        elif state is not State.READY:
            info = None
        if info is None:
            return None
        info = info.model_copy(update={"last_used": utcnow()})
        try:
            write_info(env_dir, info)
        except OSError:
            pass
        return builder.environment(env_dir, info, recipe)

    def _recheck(self, env_dir: Path, recipe: Recipe, info: EnvInfo) -> Optional[EnvInfo]:
        """The interpreter changed: a full health check; the refreshed info, or None (rebuild)."""
        try:
            builder.check_health(env_dir, recipe)
        except EnvironmentFailure as exc:
            log.warning("env %s failed its health check (%s): rebuilding", env_dir.name, exc)
            return None
        return info.model_copy(update={"interpreter": InterpreterStamp.of(env_dir / "bin" / "python")})

    def _ensure_recipe(self, recipe: Recipe) -> Environment:
        env = self._ready(recipe)
        if env is not None:
            return env
        try:
            with self._lock(recipe.fingerprint):
                env = self._ready(recipe)
                if env is not None:
                    return env
                env_dir = self.env_dir(recipe)
                discard(env_dir, self.cache_dir / "trash")
                info = builder.build(recipe, self._backend(recipe.backend), self.cache_dir, env_dir)
                log.info("built env %s in %.1fs", env_dir.name, info.build_seconds)
                return builder.environment(env_dir, info, recipe)
        except Timeout:
            raise EnvironmentFailure(f"timed out waiting for another build of {recipe.dir_name}") from None

    def _backend(self, name: str) -> Backend:
        if name not in self._backends:
            backend = make_backend(name)
            problem = backend.unusable()
            if problem and name == "uv":
                log.warning("uv is not usable (%s): falling back to virtualenv + pip", problem)
                backend, problem = PipBackend(), PipBackend().unusable()
            if problem:
                raise EnvironmentFailure(f"backend {name} is not usable: {problem}")
            self._backends[name] = backend
        return self._backends[name]

    def _remove_if_free(self, dir_name: str, fingerprint: str) -> bool:
        try:
            with self._lock(fingerprint, timeout=0), unused(self._use_lock_path(fingerprint)) as free:
                if free:
                    discard(self.cache_dir / "envs" / dir_name, self.cache_dir / "trash")
                return free
        except Timeout:
            return False

    def _sweep(self) -> None:
        sweep(self.cache_dir / "trash", 0)
        sweep(self.cache_dir / "tmp", STALE_TMP_S)
        for env_dir in (self.cache_dir / "envs").iterdir():
            if read_info(env_dir) is None:
                self._remove_if_free(env_dir.name, env_dir.name.rsplit("-", 1)[-1])
        used = {i.base_fingerprint for i in self.list()}
        overlays = self.cache_dir / "overlays"
        for overlay in overlays.iterdir() if overlays.is_dir() else []:
            if overlay.name not in used and not overlay.name.startswith("."):
                if time.time() - overlay.stat().st_mtime > STALE_TMP_S:
                    discard(overlay, self.cache_dir / "trash")


def _base_key(spec: EnvSpec) -> str:
    return f"{spec.base} {spec.index_url or ''} {' '.join(spec.extra_index_urls)}"
