"""EnvManager, the build path: content-addressed candidate environments, built once, reused everywhere.

``recipe`` says what a candidate's environment is (its fingerprint); ``using``/``ensure`` look it
up (os.stat checks and the info file only) and, when it is missing or damaged, build it once
(bisector.envs.builders.once: a lock per fingerprint, so two processes end with one env). Listing and
garbage collection are :class:`bisector.envs.cache.admin.EnvCache`'s.
"""
from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Callable, Iterator, Optional

from bisector.envs.builders import builder
from bisector.envs.builders.backends import Backend, PipBackend, make_backend
from bisector.envs.builders.base_resolve import resolve_base, torch_base_ready
from bisector.envs.model.environment import Environment
from bisector.envs.model.info import EnvInfo, InterpreterStamp, utcnow, write_info
from bisector.envs.cache.inuse import in_use
from bisector.envs.model.layout import CacheLayout
from bisector.envs.builders.once import build_once
from bisector.envs.cache.prefetch import Prefetcher
from bisector.envs.check.readiness import State, quick_check
from bisector.envs.model.recipe import Recipe, make_recipe, spec_for_target
from bisector.envs.model.env_spec import EnvSpec, InstallTarget
from bisector.errors import EnvironmentFailure

log = logging.getLogger("bisector.envs")
LOCK_TIMEOUT_S = 3 * 3600


class EnvManager:
    """Builds and reuses candidate environments in the cache rooted at ``cache_dir``.

    ``backend`` ("uv" or "virtualenv") overrides the spec's; when uv is not usable the
    manager falls back to virtualenv + pip and logs a warning saying so.
    """

    def __init__(self, cache_dir: Path, backend: Optional[str] = None, defer_health: bool = False,
                 prefetch_bases: bool = False):
        if backend not in (None, "uv", "virtualenv"):
            raise ValueError(f"unknown backend {backend!r}")
        self.defer_health = defer_health   # new envs checked from disk; their probes prove the import
        self.prefetch_bases = prefetch_bases   # torch bases (GBs of download each) only when asked (--prefetch)
        self.layout = CacheLayout(Path(cache_dir).expanduser().resolve()).create()
        self.cache_dir = self.layout.root
        self.backend_override = backend
        self._backends: dict[str, Backend] = {}
        self._prefetcher = Prefetcher(self._ensure_recipe, label=lambda r: f"{r.target.package} {r.target.ref}")
        self._base_prefetcher = Prefetcher(lambda spec: resolve_base(spec, self.layout), key=_base_key,
                                           label=lambda spec: f"base {spec.base}")

    def recipe(self, spec: EnvSpec, target: InstallTarget) -> Recipe:
        """The recipe (fingerprint, requirement set) of ``target`` under ``spec``.

        A torch candidate is a base: its environment is ``spec`` over a ``torch==<candidate>``
        base (built once per version), so building a recipe may build that base.
        """
        spec = spec_for_target(spec, target)
        if spec.torch_base_version:
            self._base_prefetcher.claim(_base_key(spec))  # being built in the background: wait for it
        base = resolve_base(spec, self.layout)
        return make_recipe(spec, target, base, self.backend_override or spec.backend)

    def ensure(self, spec: EnvSpec, target: InstallTarget) -> Environment:
        """The ready env for ``target`` under ``spec``: reused, or built and health-checked.

        Raises EnvironmentFailure (resolution, build or health failure; nothing is left
        behind) or UsageError (contradictory spec).
        """
        recipe = self.recipe(spec, target)
        self._prefetcher.claim(recipe.fingerprint)
        return self._ensure_recipe(recipe)

    @contextlib.contextmanager
    def using(self, recipe: Recipe) -> Iterator[Environment]:
        """The ready env of ``recipe``, kept from ``gc`` (in any process) until the block ends."""
        with in_use(self.layout.use_lock(recipe.fingerprint)):
            self._prefetcher.claim(recipe.fingerprint)
            yield self._ensure_recipe(recipe)

    def prefetch(self, spec: EnvSpec, targets: list[InstallTarget],
                 recipe: Optional[Callable[[InstallTarget], Recipe]] = None) -> None:
        """Build these envs in a background thread, one at a time, replacing earlier requests.

        For targets whose torch base is not built yet (torch candidates), the base is built in the
        background instead when ``prefetch_bases`` (a base is a download of GBs that the search may
        never need: only on request); their environments follow at the next call. ``recipe`` gives a
        target's recipe (default: :meth:`recipe` under ``spec``; a measurer passes the ones it holds)."""
        recipe = recipe or (lambda target: self.recipe(spec, target))
        cheap = [self.recipe_is_cheap(spec, t) for t in targets]
        recipes = [recipe(t) for t, ok in zip(targets, cheap) if ok]
        todo = [r for r in recipes if not self.is_ready(r)]
        self._prefetcher.submit(todo)
        if self.prefetch_bases:
            self._base_prefetcher.submit([spec_for_target(spec, t) for t, ok in zip(targets, cheap) if not ok])

    def is_ready(self, recipe: Recipe) -> bool:
        """Whether the env of ``recipe`` is built and usable as it is (read from disk; nothing is built)."""
        return quick_check(self.env_dir(recipe), recipe.fingerprint)[0] is State.READY

    def wait_prefetch(self, timeout: Optional[float] = None) -> bool:
        """Block until background builds are done (True) or ``timeout`` passes (False)."""
        return self._base_prefetcher.wait_idle(timeout) and self._prefetcher.wait_idle(timeout)

    def env_dir(self, recipe: Recipe) -> Path:
        """Where the env of ``recipe`` lives."""
        return self.layout.env_dir(recipe.dir_name)

    def recipe_is_cheap(self, spec: EnvSpec, target: InstallTarget) -> bool:
        """Whether ``recipe`` needs no base to be built first (what prefetch may compute inline)."""
        spec = spec_for_target(spec, target)
        return spec.torch_base_version is None or torch_base_ready(spec, self.layout)

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

    def settle_health(self, env: Environment, recipe: Recipe, proof: Optional[list[str]]) -> Environment:
        """After a probe ran in an env checked only from disk: ``proof`` is what its imports showed
        (None: it imported nothing of the candidate). Proved, the env is marked so; unproved, the full
        health check runs now, once. EnvironmentFailure when either finds the wrong environment."""
        if env.info.health != "static":
            return env
        if proof:
            raise EnvironmentFailure("health check (the probe's imports): " + "; ".join(proof))
        if proof is None:
            builder.check_health(env.path, recipe)
        info = env.info.model_copy(update={"health": "imported" if proof is None else "proved"})
        try:
            write_info(env.path, info)
        except OSError:
            pass
        return builder.environment(env.path, info, recipe)

    def _recheck(self, env_dir: Path, recipe: Recipe, info: EnvInfo) -> Optional[EnvInfo]:
        """The interpreter changed: a full health check; the refreshed info, or None (rebuild)."""
        try:
            builder.check_health(env_dir, recipe)
        except EnvironmentFailure as exc:
            log.warning("env %s failed its health check (%s): rebuilding", env_dir.name, exc)
            return None
        return info.model_copy(update={"interpreter": InterpreterStamp.of(env_dir / "bin" / "python")})

    def _ensure_recipe(self, recipe: Recipe) -> Environment:
        env_dir = self.env_dir(recipe)

        def build(staging: Path) -> None:
            info = builder.build(recipe, self._backend(recipe.backend), self.layout, staging, env_dir,
                                 defer_health=self.defer_health)
            log.info("built env %s in %.1fs", env_dir.name, info.build_seconds)

        return build_once(self.layout, recipe.fingerprint, env_dir, lambda: self._ready(recipe), build,
                          timeout=LOCK_TIMEOUT_S)

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


def _base_key(spec: EnvSpec) -> str:
    return f"{spec.base} {spec.index_url or ''} {' '.join(spec.extra_index_urls)}"
