"""Probe: extra peak memory of gradient accumulation, in fp32 and in mixed precision.

Run inside a candidate environment as ``python .../probes/ga_memory/__main__.py [options]`` (see --help and
probes/README.md). For each hidden size x precision x gradient-accumulation setting it builds a
causal LM from a config (random weights), runs one warm-up optimizer step and one measured step
under a memory meter, and fits ``peak = a * n_params + b`` over sizes to split per-parameter
from fixed costs. The result (JSON) goes to $BISECTOR_RESULT. Exit 0 when a result was written
with at least one measured cell, 3 when nothing could be measured. Where the result goes to a file it
is also written after every finished cell, as a partial result (``partial``: cells done of planned, no
metrics, an ``error`` saying it did not finish), so a probe killed mid-run keeps the cells it finished;
the final result replaces it.
"""
import time as _time

_T0_EPOCH, _T0_PERF = _time.time(), _time.perf_counter()

import gc  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

# The helpers are siblings (modules and sub-packages), the shared contract and meter library (_meters) one
# level up. Put both on sys.path explicitly: with PYTHONSAFEPATH (or -P) Python does not add the script's own
# directory.
_HERE = os.path.dirname(os.path.abspath(__file__))
for _path in (os.path.dirname(_HERE), _HERE):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from _cli import config_hash, effective_knobs, make_spec, parser  # noqa: E402
from _timings import Timings  # noqa: E402

PROBE_NAME = "ga_memory"
PROBE_VERSION = "2.1.0"  # 2: precision proved per cell, loop knobs, per-phase sites; 2.1: allocator model (est_*)
EXIT_NOTHING_MEASURED = 3
FAKE_CELL_BYTES = 1 << 30   # a worker in a --fake cell holds Python objects only (llama-7b, Trainer: 0.30 GiB RSS)


def _import_stack(args, timings):
    """Import everything the cells use (transformers loads lazily), then freeze the heap. The ML
    stack's import-time deprecation warnings are not the probe's output: they are kept off stderr."""
    import importlib
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("ignore", category=UserWarning)

    start = _time.perf_counter()
    import torch  # noqa: F401
    from accelerate import Accelerator  # noqa: F401

    if args.model_factory:  # the user's own model: transformers only where the Trainer loop needs it
        from _models.build import import_factory_module

        import_factory_module(args.model_factory.partition(":")[0])
    if not args.model_factory or args.loop == "trainer":
        _import_transformers(args, importlib)
    gc.freeze()  # later gc.collect() calls skip the (large, immortal) import graph
    timings.add("imports_s", _time.perf_counter() - start)


def _import_transformers(args, importlib) -> None:
    """transformers loads lazily: its modeling code and Trainer are imported now, not in the first cell."""
    import transformers

    if not args.model_factory:
        family = _family(args)
        try:
            importlib.import_module(f"transformers.models.{family}.modeling_{family}")
        except ImportError:
            pass  # a family this release lacks: the cells say so
        transformers.AutoModelForCausalLM  # noqa: B018 - resolve the lazy attribute now
    if args.loop == "trainer":
        transformers.Trainer  # noqa: B018


WARM_FAMILIES = ("gpt_neox", "llama")
WARM_HELPERS = ("_allocator_model.replay", "_cells", "_fit", "_meters.cpu", "_meters.cuda", "_meters.fake_mode",
                "_models.build", "_result", "_training.accelerate_loop", "_training.precision", "_training.trainer_loop", "_workers")


def warm_imports():
    """The warm worker's opt-in (probes/_probe_contract.py): what any run of this probe may import, done
    once per environment (the built-in families, the Trainer, the probe's own helpers), then the heap
    frozen as ``_import_stack`` freezes it. A run's own ``_import_stack`` then finds them imported."""
    import importlib

    import torch  # noqa: F401
    from accelerate import Accelerator  # noqa: F401
    import transformers

    for family in WARM_FAMILIES:
        try:
            importlib.import_module(f"transformers.models.{family}.modeling_{family}")
        except ImportError:
            pass  # a family this release lacks: a run asking for it says so
    transformers.AutoModelForCausalLM  # noqa: B018 - resolve the lazy attributes now
    transformers.Trainer  # noqa: B018
    for helper in WARM_HELPERS:
        importlib.import_module(helper)
    gc.freeze()


def _family(args) -> str:
    if not args.model_config:
        return args.arch
    from _models.shapes import load_shape

    return str(load_shape(args.model_config).get("model_type", args.arch))


def _quiet_libraries():
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    import warnings

    warnings.filterwarnings("ignore")
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
    except Exception:  # noqa: BLE001 - cosmetics only
        pass


def _cell_mode(args, spec) -> int:
    """Child of an isolated run: measure the one cell and write it to --cell-out."""
    from _cells import run_cell

    record = run_cell(spec, json.loads(args.cell))
    with open(args.cell_out, "w") as fh:
        json.dump(record, fh)
    return 0


def _run_cells(spec, argv, timeout, workers, on_cell=None):
    """The cells' records: each in a fresh interpreter (--isolate, CUDA), else in workers."""
    from _cells import plan, run_cell, run_cell_isolated
    from _workers import run_cells

    todo = plan(spec)
    progress = _Progress(len(todo), on_cell)
    if not spec["isolate"]:
        return run_cells(run_cell, spec, todo, workers["used"], on_done=progress)
    cells = []
    for cell in todo:
        cells.append(run_cell_isolated(os.path.abspath(__file__), argv, cell, timeout))
        progress(cells[-1])
    return cells


def _plan_workers(spec, requested):
    """How many cells at once, and on the CPU why even one cannot run here: the largest cell's
    estimate against this machine's available memory (each worker holds one cell)."""
    from _cells import plan
    from _models.budget import available_memory
    from _models.build import cell_memory, memory_problem
    from _workers import plan_workers, worker_count

    n_cells = len(plan(spec))
    if spec["isolate"] or spec["device"] != "cpu":
        return None, {"asked": 1, "used": 1}
    available = available_memory()
    if spec.get("fake"):  # nothing of the model is allocated: a worker holds its Python objects only
        return None, plan_workers(requested, n_cells, FAKE_CELL_BYTES, available)
    cell_bytes = cell_memory(spec, worker_count(requested, n_cells), available) if available else None
    problem = memory_problem(spec, cell_bytes, available) if cell_bytes else None
    workers = plan_workers(requested, n_cells, cell_bytes, available)
    if workers.get("fewer") and not problem:
        print(f"[ga_memory] {workers['fewer']}", file=sys.stderr, flush=True)
    return problem, workers


class _Progress:
    """One stderr line per measured cell, 'cell k/n', for the orchestrator's live display."""

    def __init__(self, total, on_cell=None):
        self.total, self.done, self.on_cell, self.cells = total, 0, on_cell, []

    def __call__(self, cell):
        self.done += 1
        what = cell.get("error") or f"peak {cell.get('peak_bytes')} B in {cell.get('peak_phase')}"
        print(f"[ga_memory] cell {self.done}/{self.total} h{cell['hidden']} t{cell['seq_len']} {cell['precision']} "
              f"ga{cell['ga']}: {what}", file=sys.stderr, flush=True)
        self.cells.append(cell)
        if self.on_cell:
            self.on_cell(self.cells, self.total)


def _partial_writer(args, spec):
    """After each finished cell: the partial result, where the result goes to a file (never stdout,
    which holds one result only). A failed write is said once and the cells go on."""
    from _result import RESULT_ENV, partial, write

    if not (os.environ.get(RESULT_ENV) or args.result):
        return None
    probe = {"name": PROBE_NAME, "version": PROBE_VERSION, "config_hash": config_hash(spec, PROBE_VERSION)}
    failed = []

    def on_cell(cells, planned):
        if failed:
            return
        try:
            write(partial(probe, spec, cells, planned), args.result)
        except Exception as exc:  # noqa: BLE001 - the final result is what matters
            failed.append(exc)
            print(f"[ga_memory] the partial result could not be written: {type(exc).__name__}: {exc}",
                  file=sys.stderr, flush=True)

    return on_cell


def _finish(args, spec, cells, timings, workers) -> int:
    from _fit import derive
    from _result import assemble, write

    metrics, fits = derive(cells, spec["precisions"], spec["ga"])
    measured = [c for c in cells if "peak_bytes" in c and not c.get("error")]
    error = None if measured else "no cell could be measured: " + "; ".join(
        sorted({str(c.get("error"))[:300] for c in cells})
    )
    probe = {"name": PROBE_NAME, "version": PROBE_VERSION, "config_hash": config_hash(spec, PROBE_VERSION)}
    result = assemble(probe, spec, cells, metrics, fits, error)
    result["knobs"] = effective_knobs(spec)
    result["workers"] = workers
    result["ignored_env"] = sorted(k for k in os.environ if k.startswith("ACCELERATE_"))
    if args.timings:
        timings.add_cells(cells)
        result["timings"] = timings.report()
    where = write(result, args.result)
    print(f"[ga_memory] result written to {where}", file=sys.stderr)
    return 0 if measured else EXIT_NOTHING_MEASURED


def _cuda_problem(spec):
    """Why CUDA, when asked for, cannot run here (never a silent fall back to the CPU)."""
    if spec["device"] != "cuda":
        return None
    import torch

    if torch.cuda.is_available():
        count = torch.cuda.device_count()
        if count > 1:
            visible = os.environ.get("CUDA_VISIBLE_DEVICES", "unset")
            return (f"{count} GPUs are visible (CUDA_VISIBLE_DEVICES={visible}): the probe measures one; "
                    f"set CUDA_VISIBLE_DEVICES to one GPU")
        return None
    return (f"CUDA was asked for (--device {spec['device_requested']}) but torch {torch.__version__} "
            f"cannot use it here (CUDA build: {torch.version.cuda or 'none'})")


def _nothing_measured(args, spec, error) -> int:
    from _result import SCHEMA_VERSION, write

    probe = {"name": PROBE_NAME, "version": PROBE_VERSION, "config_hash": config_hash(spec, PROBE_VERSION),
             "config": spec}
    write({"schema_version": SCHEMA_VERSION, "probe": probe, "metrics": {}, "error": error}, args.result)
    print(f"[ga_memory] {error}", file=sys.stderr)
    return EXIT_NOTHING_MEASURED


def _broken_environment(args, exc) -> int:
    from _result import SCHEMA_VERSION, write

    error = f"cannot import the ML stack: {type(exc).__name__}: {exc}"
    probe = {"name": PROBE_NAME, "version": PROBE_VERSION}
    write({"schema_version": SCHEMA_VERSION, "probe": probe, "metrics": {}, "error": error}, args.result)
    print(f"[ga_memory] {error}", file=sys.stderr)
    return EXIT_NOTHING_MEASURED


def main(argv=None) -> int:
    """Entry point; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser().parse_args(argv)
    timings = Timings(_T0_EPOCH, _T0_PERF)
    try:
        _import_stack(args, timings)
    except Exception as exc:  # noqa: BLE001 - a broken environment is a result too
        return _broken_environment(args, exc)
    _quiet_libraries()
    spec = make_spec(args)
    if spec["device"] == "cpu" and spec["threads"] > 0:
        import torch

        torch.set_num_threads(spec["threads"])
    if args.cell:
        return _cell_mode(args, spec)
    too_big, workers = _plan_workers(spec, args.workers)
    unusable = _cuda_problem(spec) or too_big
    if unusable:
        return _nothing_measured(args, spec, unusable)
    cells = _run_cells(spec, argv, args.cell_timeout, workers, _partial_writer(args, spec))
    return _finish(args, spec, cells, timings, workers)


if __name__ == "__main__":
    sys.exit(main())
