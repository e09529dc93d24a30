"""The command meter's part that reads the numbers of each optimizer step, without changing them (torch only).

Per step (``step`` record fields; the probe sums them into ``loss_*``, ``grad_norm_*``, ``update_norm_last`` and
``nonfinite_steps``: ``_step_numbers.py``):

* ``loss``: the scalars the program backpropagated since the last step (``Tensor.backward`` and
  ``torch.autograd.backward``, which the first calls: the meter wraps ``torch.autograd.backward`` when torch is
  imported), as the program computed them, summed over its micro-steps, and ``loss_count`` how many; a backward
  run from inside another backward (reentrant checkpointing) is not the program's loss and is not counted;
* ``grad_norm``: the L2 norm of every gradient the optimizer is about to apply (its pre-step hook);
* ``update_norm``: the L2 norm of the change the step made to the parameters, where that is affordable: the
  stepped parameters are written at the pre-step to a memory file of the kernel's (``memfd``: in the cgroup's
  memory, never in the process's RSS: ``_update_copy.py``) and compared after the step 64 KiB at a time, up to
  ``$BISECTOR_UPDATE_NORM_MAX_MIB`` (default 64) MiB of parameters; else absent with why
  (``update_norm_absent``).

A value that is not finite is written as its word (``"nan"``, ``"inf"``, ``"-inf"``): JSON has no number for it.

Reading changes nothing the program computes: no random draw, no dtype change of the program's tensors (the
meter's own sums run in float32 or float64 on copies of scalars), ``torch.no_grad``, and every op of the meter's
runs with the dispatch modes set aside (``_disable_current_modes``), so the CPU byte meter never counts them and
a program's own mode never sees them. On the CPU nothing waits. On CUDA the values are copied into pinned host
memory without blocking (``non_blocking``) and read at the step's end, after the synchronisation the CUDA part
already makes there: one sync per step, the meter's; the gradient norm's few scalars are freed before the
optimizer runs and the allocator's peak counters reset after them, with the window's peak so far handed to the
CUDA part (``CudaCounters.carry``), so the step's peaks are the program's. ``update_norm`` is not read on CUDA (a
copy of the parameters would sit in the device memory the meter measures), nor of a distributed tensor (its
norm is a collective the program would not make).
"""
import math
import os
import threading
import time

from ._parts import Part

NUMERICS_ENV, UPDATE_NORM_MAX_ENV = "BISECTOR_NUMERICS", "BISECTOR_UPDATE_NORM_MAX_MIB"   # set by the probe
UPDATE_NORM_MAX_MIB = 64


def _number(value):
    """A float as a record holds it: finite as it is, else its word."""
    value = float(value)
    return value if math.isfinite(value) else repr(value)


def update_norm_max():
    """The most bytes of stepped parameters the meter copies to read ``update_norm`` (``$BISECTOR_...``)."""
    try:
        return int(float(os.environ.get(UPDATE_NORM_MAX_ENV, UPDATE_NORM_MAX_MIB)) * (1 << 20))
    except ValueError:
        return UPDATE_NORM_MAX_MIB << 20


class Numerics(Part):
    """``loss``, ``grad_norm`` and ``update_norm`` of each optimizer step (see the module's docstring)."""

    kind = "numerics"

    def __init__(self, cuda_part=None, max_update_bytes=None):
        self.cuda_part = cuda_part
        self.max_update_bytes = update_norm_max() if max_update_bytes is None else max_update_bytes
        self._original, self._copy = None, None

    # --- the part's protocol ------------------------------------------------------------------------------
    def start(self, torch):
        from torch.utils._python_dispatch import _disable_current_modes

        self.torch, self._unseen, self._local = torch, _disable_current_modes, threading.local()
        self._in_backward = getattr(torch._C, "_current_graph_task_id", lambda: -1)
        original = torch.autograd.backward
        part = self

        def backward(tensors, *args, **kwargs):
            part.saw(tensors)
            return original(tensors, *args, **kwargs)

        backward.__wrapped__, backward.__doc__, backward.__name__ = original, original.__doc__, original.__name__
        backward.__module__, backward.__qualname__ = original.__module__, original.__qualname__
        torch.autograd.backward, self._original = backward, original
        return {"numerics": f"loss, grad_norm; update_norm up to {self.max_update_bytes / (1 << 20):g} MiB of "
                            "parameters on the CPU"}

    def step_begin(self, optimizer):
        local = self._state()
        local.grad, local.update = None, None
        start = time.perf_counter()
        try:
            with self.torch.no_grad(), self._unseen():
                params = [p for group in optimizer.param_groups for p in group["params"]]
                local.grad = self._grad_norm([p.grad for p in params if p.grad is not None])
                local.update = self._before_step([p for p in params if p.grad is not None])
        except Exception as exc:  # noqa: BLE001 - the program's step goes on; the record says why
            local.grad = local.grad or ("absent", f"the meter could not read the gradients: {type(exc).__name__}: "
                                                  f"{str(exc)[:200]}")
        local.spent += time.perf_counter() - start

    def step_end(self, optimizer, record):
        local = self._state()
        start = time.perf_counter()
        try:
            with self.torch.no_grad(), self._unseen():
                self._wait(local)
                self._loss_fields(local, record)
                self._grad_fields(local.grad, record)
                self._update_fields(local.update, record)
        except Exception as exc:  # noqa: BLE001
            record["numerics_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
        finally:
            record["numerics_seconds"] = local.spent + time.perf_counter() - start   # the meter's own reading time
            local.losses, local.pending, local.nonscalar, local.unread, local.spent = [], [], 0, None, 0.0
            local.grad = local.update = None

    def after_fork(self):
        self._local = threading.local()
        self._copy = None   # the parent's memory file is the parent's: the child makes its own when it needs one

    def stop(self):
        if self._original is not None and getattr(self.torch.autograd.backward, "__wrapped__", None) is self._original:
            self.torch.autograd.backward = self._original
        if self._copy is not None:
            self._copy.close()

    # --- the loss ------------------------------------------------------------------------------------------
    def _state(self):
        local = self._local
        if not hasattr(local, "losses"):
            local.losses, local.pending, local.nonscalar, local.unread, local.slots = [], [], 0, None, []
            local.grad = local.update = None
            local.spent = 0.0
        return local

    def saw(self, tensors):
        """A backward the program runs: its scalar(s), as computed, kept for the step (never raises)."""
        start = time.perf_counter()
        try:
            if self._in_backward() != -1:   # a backward inside a backward (reentrant checkpointing): not a loss
                return
            torch = self.torch
            local = self._state()
            with torch.no_grad(), self._unseen():
                for t in [tensors] if isinstance(tensors, torch.Tensor) else list(tensors):
                    if not isinstance(t, torch.Tensor) or t.numel() != 1:
                        local.nonscalar += 1
                    elif t.device.type == "cpu" and type(t) in (torch.Tensor, torch.nn.Parameter):
                        local.losses.append(t.item())
                    elif t.device.type == "cuda" and type(t) in (torch.Tensor, torch.nn.Parameter):
                        local.pending.append(self._to_host(local, t.detach().reshape(())))
                    else:   # a loss on another device, or not a plain tensor (fake, distributed): not read
                        local.unread = f"a {type(t).__name__} on {t.device.type}"
        except Exception as exc:  # noqa: BLE001 - the program's backward runs as it would; this loss is not read
            self._state().unread = f"reading it failed: {type(exc).__name__}"
        self._state().spent += time.perf_counter() - start

    def _to_host(self, local, value):
        """A CUDA scalar copied into a pinned slot of the meter's without waiting (read at the step's end); the
        slots are made once and reused, step after step."""
        taken = {id(slot) for slot in local.pending}
        slot = next((s for s in local.slots if s.dtype == value.dtype and id(s) not in taken), None)
        if slot is None:
            slot = self.torch.empty((), dtype=value.dtype, pin_memory=True)
            local.slots.append(slot)
        slot.copy_(value, non_blocking=True)
        return slot

    def _wait(self, local):
        """CUDA: the pinned copies are done (a no-op wait where the CUDA part synchronised already)."""
        if local.pending or isinstance(local.grad, tuple) and local.grad[0] == "cuda":
            self.torch.cuda.synchronize()

    def _loss_fields(self, local, record):
        values = list(local.losses) + [float(slot.item()) for slot in local.pending]
        if values:
            record["loss"] = _number(math.fsum(values))
            record["loss_count"] = len(values)
        if local.nonscalar:
            record["loss_nonscalar"] = local.nonscalar
        if local.unread:
            record["loss_unread"] = local.unread

    # --- the gradients ---------------------------------------------------------------------------------------
    def _grad_norm(self, grads):
        """("cpu", norm) read now; ("cuda", pinned slot, count) read at the step's end; ("absent", why)."""
        torch = self.torch
        if not grads:
            return ("absent", "no parameter of the stepped optimizer has a gradient")
        odd = next((g for g in grads if type(g) is not torch.Tensor or g.is_sparse), None)
        if odd is not None:
            return ("absent", f"a gradient is a {'sparse tensor' if odd.is_sparse else type(odd).__name__}, not a "
                              "plain tensor (a distributed one's norm would be a collective the program does not make)")
        devices = {g.device.type for g in grads}
        if devices == {"cpu"}:
            squares = 0.0
            for g in grads:
                norm = torch.linalg.vector_norm(g, dtype=torch.float32 if g.element_size() < 4 else None).item()
                squares += norm * norm
            return ("cpu", math.sqrt(squares), len(grads))
        if devices == {"cuda"} and len({g.device for g in grads}) == 1:
            return ("cuda", *self._cuda_norm(grads))
        return ("absent", f"gradients on {', '.join(sorted(devices))}: read on one CPU or one CUDA device only")

    def _cuda_norm(self, grads):
        torch = self.torch
        cuda, device = torch.cuda, grads[0].device
        before = {"peak_allocated": int(cuda.max_memory_allocated(device)),
                  "peak_reserved": int(cuda.max_memory_reserved(device))}
        norms = [torch.linalg.vector_norm(g, dtype=torch.float32) for g in grads]
        total = torch.linalg.vector_norm(torch.stack(norms))
        del norms
        local = self._state()
        if getattr(local, "grad_slot", None) is None:
            local.grad_slot = torch.empty((), dtype=torch.float32, pin_memory=True)
        slot = local.grad_slot
        slot.copy_(total, non_blocking=True)
        del total
        cuda.reset_peak_memory_stats(device)   # the scalars are gone: the window's peak is the program's again
        if self.cuda_part is not None:
            self.cuda_part.carry(before)
        return slot, len(grads)

    def _grad_fields(self, grad, record):
        if grad is None:
            return
        if grad[0] == "absent":
            record["grad_norm_absent"] = grad[1]
            return
        value = grad[1] if grad[0] == "cpu" else float(grad[1].item())
        record["grad_norm"], record["grad_count"] = _number(value), grad[2]

    # --- the update --------------------------------------------------------------------------------------------
    def _before_step(self, params):
        """("copied", params) when the parameters went to the memory file, else ("absent", why)."""
        torch = self.torch
        if not params:
            return None
        nbytes = sum(p.numel() * p.element_size() for p in params)
        if any(p.device.type != "cpu" for p in params):
            return ("absent", "read on the CPU only: on a GPU a copy of the parameters would sit in the device "
                              "memory the meter measures")
        if any(type(p) not in (torch.Tensor, torch.nn.Parameter) or not p.is_contiguous() or not p.is_floating_point()
               for p in params):
            return ("absent", "a parameter is not a plain contiguous floating-point tensor")
        if nbytes > self.max_update_bytes:
            return ("absent", f"the stepped parameters hold {nbytes / (1 << 20):.0f} MiB, beyond the "
                              f"{self.max_update_bytes / (1 << 20):g} MiB the meter copies to read it "
                              f"(${UPDATE_NORM_MAX_ENV})")
        if self._copy is None:
            from ._update_copy import ParameterCopy

            self._copy = ParameterCopy(torch)
        why = self._copy.write(params)
        return ("absent", why) if why else ("copied", params)

    def _update_fields(self, update, record):
        if update is None:
            return
        if update[0] == "absent":
            record["update_norm_absent"] = update[1]
            return
        value, why = self._copy.change_norm(update[1])
        if why:
            record["update_norm_absent"] = why
        else:
            record["update_norm"] = _number(value)


def parts_for(meter):
    """The parts the meter attaches for the program's numbers (after its memory parts: never the first); none
    with ``$BISECTOR_NUMERICS=off`` (the probe's ``--numerics off``) or under ``--fake``."""
    if os.environ.get(NUMERICS_ENV, "on") == "off" or meter.options.get("fake"):
        return []   # off, or fake tensors (--fake), which carry no values to read
    cuda = next((p for p in meter.parts if p.kind == "cuda"), None)
    return [Numerics(cuda_part=cuda)]
