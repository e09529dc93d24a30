"""Fake mode (``--fake``): the CPU meter counting fake tensors' storages exactly as real ones, the value reads
it answers or refuses, the data it leaves real, and the probe's flag (the whole default grid fake against real,
to the byte, is tests/slow/test_fake_exact.py).

In-process, with the probes' helpers on ``sys.path`` as their scripts put them (test_probe_meter.py does the same)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

PROBES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "probes")
sys.path[:0] = [os.path.join(PROBES, "ga_memory"), PROBES]

from _cells import plan, run_cell  # noqa: E402
from _cli import make_spec, parser  # noqa: E402
from _meters.cpu import StorageMeter  # noqa: E402
from _meters.fake_mode import FakeSession, FakeStorageMeter, ValueRead  # noqa: E402
from _models.budget import GIB  # noqa: E402


def _step(meter, model, x):
    """A forward and backward under ``meter``'s window (phases forward / backward)."""
    meter.reset_peak()
    meter.mark("forward")
    loss = model(x).square().mean()
    meter.mark("backward")
    loss.backward()
    meter.mark(None)


def _measured(fake: bool) -> dict:
    """One step of a small MLP (a view, an in-place op, an autograd graph), real or fake; its report."""
    session = FakeSession() if fake else None
    with session or _nothing():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(48, 96), torch.nn.GELU(), torch.nn.Linear(96, 48))
        meter = (FakeStorageMeter if fake else StorageMeter)(attribution=True)
        with session.real() if session else _nothing():
            x = torch.randn(5, 48)
        meter.track(model.parameters())
        meter.track([x])
        with meter:
            _step(meter, model, x[1:].t().contiguous().t())   # the batch's view: real data, no new storage
        meter.close()
    return {**meter.report(), "attribution": meter.attribution(50), "phase_attribution": meter.phase_attribution(50)}


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_a_fake_step_counts_what_the_real_one_counts_to_the_byte():
    real, fake = _measured(False), _measured(True)
    assert real["peak_bytes"] > 48 * 96 * 4 * 2
    assert fake.pop("fake_reads_answered") == {"nan_check": 0, "after_window": 0}
    assert fake == real


def test_a_nan_check_is_answered_finite_and_any_other_value_read_stops_with_its_site():
    meter = FakeStorageMeter()
    with FakeSession(), meter:
        loss = torch.randn(3).sum()
        meter.reset_peak()
        assert not (torch.isnan(loss) or torch.isinf(loss))   # Trainer's NaN filter
        with pytest.raises(ValueRead, match=r"bool scalar tensor .* at test_fake_mode.py:\d+ "):
            if loss > 0:   # a data-dependent branch
                pass
        meter.mark(None)
        assert loss.item() == 0.0   # after the measured window: nothing measured depends on it
    assert meter.reads == {"nan_check": 2, "after_window": 1}
    meter.close()


def test_a_fake_result_is_never_written_into_a_real_tensor():
    real = torch.zeros(4)
    meter = FakeStorageMeter()
    with FakeSession(), meter, pytest.raises(ValueRead, match="add_.*into a real tensor"):
        real.add_(torch.ones(4))
    meter.close()


def test_a_tensor_made_from_python_data_counts_as_the_real_run_counts_it():
    """``torch.tensor(0.0)`` inside a step: real, its storage is first seen as ``lift_fresh``'s input
    (a pre-existing tensor); fake, the op returns a fake one: counted as that, at the same moment."""
    reports = []
    for meter, session in ((StorageMeter(attribution=True), None), (FakeStorageMeter(attribution=True), FakeSession())):
        with session or _nothing(), meter:
            meter.reset_peak()
            acc = torch.tensor(0.0)
            acc += torch.ones(3).sum()
            meter.mark(None)
        report = meter.report()
        report.pop("fake_reads_answered", None)
        reports.append((report, meter.attribution()))
        meter.close()
    assert reports[0] == reports[1]
    assert {"site": "pre-existing", "bytes": 4} in reports[1][1]


def _spec(*flags):
    return make_spec(parser().parse_args(["--device", "cpu", *flags]))


def test_a_step_too_big_for_this_machine_runs_fake_with_nothing_allocated():
    """llama-7b's shape at 4x its width and 2 layers (7.5 G parameters, fast: few layers): more live bytes at
    the step's peak than this machine has memory at all."""
    spec = _spec("--fake", "--model-config", "llama-7b", "--sizes", "16384", "--layers", "2", "--heads", "128",
                 "--loop", "accelerate", "--precisions", "fp32", "--ga", "1", "--no-attribution")
    record = run_cell(spec, plan(spec)[0])
    assert record.get("error") is None and record["meter"] == "cpu-dispatch (fake)"
    with open("/proc/meminfo") as fh:
        total = int(fh.readline().split()[1]) * 1024
    assert record["n_params"] > 7 * 10**9
    assert record["peak_bytes"] > max(total, 56 * GIB)
    assert record["peak_bytes"] >= 8 * record["n_params"]   # fp32 weights and gradients at least


def test_a_cell_whose_model_reads_a_value_stops_with_the_reason(tmp_path, monkeypatch):
    (tmp_path / "branchy.py").write_text(textwrap.dedent("""
        import torch

        class Branchy(torch.nn.Module):
            def __init__(self, hidden, vocab):
                super().__init__()
                self.emb, self.out = torch.nn.Embedding(vocab, hidden), torch.nn.Linear(hidden, vocab)

            def forward(self, input_ids, labels):
                h = self.emb(input_ids)
                if h.mean() > 0:   # data-dependent
                    h = h * 2
                logits = self.out(h)
                loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten())
                return type("Out", (), {"loss": loss})()

        def build(hidden, layers, heads, vocab, max_positions, use_cache):
            return Branchy(hidden, vocab)
        """))
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = _spec("--fake", "--model-factory", "branchy:build", "--sizes", "16", "--vocab", "32", "--precisions", "fp32",
                 "--ga", "1")
    record = run_cell(spec, plan(spec)[0])
    assert "peak_bytes" not in record
    assert record["error"].startswith("ValueRead: fake mode cannot read the value of a bool scalar tensor")
    assert "branchy.py:11 forward" in record["error"]


@pytest.mark.parametrize("flags, says", [
    (["--device", "cuda"], "--fake runs on fake CPU tensors"),
    (["--cuda-memory-fraction", "0.5"], "--fake allocates nothing"),
])
def test_what_fake_mode_cannot_do_is_refused_in_one_line(flags, says):
    with pytest.raises(SystemExit, match=says):
        make_spec(parser().parse_args(["--fake", *flags]))


def test_the_preflight_refuses_a_shape_too_big_here_unless_it_runs_fake():
    preflight = os.path.join(PROBES, "ga_memory", "_preflight.py")
    env = {**os.environ, "BISECTOR_DEVICE": "cpu"}

    def run(*flags):
        return subprocess.run([sys.executable, "-I", "-S", preflight, "--model-config", "llama-7b", *flags],
                              capture_output=True, text=True, env=env)

    real, fake = run(), run("--fake")
    assert fake.returncode == 0 and fake.stderr == ""
    with open("/proc/meminfo") as fh:
        available = next(int(line.split()[1]) * 1024 for line in fh if line.startswith("MemAvailable:"))
    if available < 48 * GIB:   # this machine (a bigger one holds the real step: nothing to refuse)
        assert real.returncode == 2 and "GiB of memory is available" in real.stderr


def test_fake_is_part_of_the_configuration_and_its_cells_need_no_memory():
    from _cli import config_hash

    assert config_hash(_spec(), "v") != config_hash(_spec("--fake"), "v")
    assert _spec("--fake", "--isolate", "auto")["isolate"] is False
