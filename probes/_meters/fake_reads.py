"""Fake mode's parts that any live-bytes meter uses (torch and the stdlib only): ``FakeSession`` (torch's
``FakeTensorMode`` entered, data left real on demand), ``FakeReads`` (the value reads of fake tensors, answered or
refused with the code that read) and ``ValueRead``. ``fake_mode.FakeStorageMeter`` (ga_memory's cells) and the
command meter's ``--fake`` (``command/_fake.py``) are built on them; ``fake_mode`` says what fake mode is.
"""
from __future__ import annotations

import itertools

import torch

from .sites import code_location
from .tensor_bytes import PRE_EXISTING, storage_of, tensors_in

FAKE = " (fake)"   # what a meter's kind gains in fake mode: results say "cpu-dispatch (fake)"


def fake_problem():
    """Why this torch cannot run fake mode (None when it can)."""
    try:
        from torch._subclasses.fake_tensor import FakeTensorMode, unset_fake_temporarily  # noqa: F401
    except ImportError as exc:
        return f"torch {torch.__version__} has no usable FakeTensorMode ({exc}); fake mode needs torch >= 2.1"
    return None


def _same_place(tensor, device, dtype) -> bool:
    if device is not None and (tensor.device.type != device.type
                               or device.index not in (None, tensor.device.index)):
        return False
    return dtype is None or not (tensor.is_floating_point() or tensor.is_complex()) or tensor.dtype == dtype


class FakeSession:
    """Fake mode for one cell: ``with session:`` builds and trains on fake tensors.

    While it is entered, ``nn.Module.to()`` that would change nothing (accelerate's and Trainer's
    ``model.to(device)`` on the model's own device) returns the module as it is, as it does on real
    tensors: torch (2.13) would otherwise swap every fake parameter with a copy of itself and fail
    ("Cannot swap ... weakref")."""

    def __init__(self):
        from torch._subclasses.fake_tensor import FakeTensorMode

        self.mode = FakeTensorMode(allow_non_fake_inputs=True)
        self._original_to = None

    def __enter__(self):
        self.mode.__enter__()
        self._original_to = original = torch.nn.Module.to

        def to(module, *args, **kwargs):
            device, dtype, _, memory_format = torch._C._nn._parse_to(*args, **kwargs)
            tensors = itertools.chain(module.parameters(), module.buffers())
            if memory_format is None and all(_same_place(t, device, dtype) for t in tensors):
                return module
            return original(module, *args, **kwargs)

        torch.nn.Module.to = to
        return self

    def __exit__(self, *exc):
        torch.nn.Module.to = self._original_to
        return self.mode.__exit__(*exc)

    @staticmethod
    def real():
        """A block run outside fake mode (its tensors are real; the meter still sees every op)."""
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        return unset_fake_temporarily()

    def iterate_real(self, loader) -> None:
        """Make ``loader`` (a DataLoader, any subclass) fetch and collate its batches outside fake mode:
        its sampler reads the values of a permutation, which a fake tensor does not have."""
        cls, real = type(loader), self.real

        def __iter__(self):
            return iterate_outside(real, lambda: cls.__iter__(self))

        unfaked = type(cls.__name__, (cls,), {"__iter__": __iter__, "__module__": cls.__module__})
        # object's own setter: accelerate's DataLoaderShard makes ``__class__`` a read-only property
        object.__dict__["__class__"].__set__(loader, unfaked)


def iterate_outside(real, make):
    """What ``make()``'s iterator yields, the iterator made and each item fetched outside fake mode (``real``:
    :meth:`FakeSession.real`): a sampler reads a permutation's values, which a fake tensor does not have."""
    with real():
        items = make()
    while True:
        with real():
            try:
                item = next(items)
            except StopIteration:
                return
        yield item


class ValueRead(RuntimeError):
    """A value read of a fake tensor that fake mode cannot answer (a data-dependent branch)."""


_LOCAL_SCALAR = torch.ops.aten._local_scalar_dense.default
_NAN_CHECKS = (torch.ops.aten.isnan.default, torch.ops.aten.isinf.default)
_LIFTS = (torch.ops.aten.lift_fresh.default,)


def _is_fake(tensor) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(tensor, FakeTensor)


def _refuse_fake_into_real(func, args, kwargs) -> None:
    """An op that writes a fake result into a real tensor (``real.add_(fake)``) would leave the real one
    beside a fake copy, each counted: not the real run's bytes, so the cell stops."""
    schema = func._schema
    for i, arg in enumerate(schema.arguments):
        if arg.alias_info is None or not arg.alias_info.is_write:
            continue
        value = args[i] if i < len(args) and not arg.kwarg_only else kwargs.get(arg.name)
        if isinstance(value, torch.Tensor) and not _is_fake(value):
            raise ValueRead(f"fake mode cannot write {schema.name}'s fake result into a real tensor at "
                            f"{code_location()}: this step cannot be measured fake")


class FakeReads:
    """The value reads of fake tensors, for a meter of live bytes (a ``TorchDispatchMode`` built on
    ``tensor_bytes.LiveBytes``, mixed in before it): NaN / inf checks answered "finite", reads after the measured
    window (``_window_closed``) answered zero, any other read refused (:class:`ValueRead`, naming the code);
    ``reads`` counts the answered ones by kind, ``refused`` is the first refusal's message."""

    def __init__(self, *args, **kwargs):
        self._nan_checks = set()   # storages holding the result of a NaN / inf check
        self.reads = {"nan_check": 0, "after_window": 0}
        self.refused = None
        super().__init__(*args, **kwargs)

    def _window_closed(self) -> bool:
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        tensors = tensors_in(args) + tensors_in(kwargs)
        fakes = sum(1 for t in tensors if _is_fake(t))
        if func is _LOCAL_SCALAR and fakes and getattr(args[0], "constant", None) is None:
            return self._value_of(args[0])   # (a fake tensor made from a Python number keeps it: fake mode reads it)
        if func in _LIFTS:
            return self._lifted(func, args, kwargs)
        if tensors and not fakes:  # data (token ids, labels): computed for real, as real storages
            with FakeSession.real():
                return super().__torch_dispatch__(func, types, args, kwargs)
        if fakes < len(tensors):
            self._refuse(_refuse_fake_into_real, func, args, kwargs)
        out = super().__torch_dispatch__(func, types, args, kwargs)
        if func in _NAN_CHECKS:
            storage = storage_of(out)
            if storage is not None:
                self._nan_checks.add(storage._cdata)
        return out

    def _refuse(self, check, *args):
        try:
            check(*args)
        except ValueRead as exc:
            self.refused = self.refused or str(exc)
            raise

    def _lifted(self, func, args, kwargs):
        """``torch.tensor(data)`` inside the step: the real tensor it made from Python data becomes a fake
        one. A real run first sees that storage here, as the op's input: the fake one is counted as that."""
        out = func(*args, **kwargs)
        for t in tensors_in(out):
            self._see(t, PRE_EXISTING)
        return out

    def _value_of(self, tensor):
        storage = storage_of(tensor)
        if storage is not None and storage._cdata in self._nan_checks:
            self.reads["nan_check"] += 1
            return False
        if self._window_closed():
            self.reads["after_window"] += 1
            return False if tensor.dtype == torch.bool else (0.0 if tensor.is_floating_point() else 0)
        shape = "x".join(str(n) for n in tensor.shape) or "scalar"
        message = (f"fake mode cannot read the value of a {str(tensor.dtype).replace('torch.', '')} {shape} tensor "
                   f"(a data-dependent branch or .item()) at {code_location()}: this step cannot be measured fake")
        self.refused = self.refused or message
        raise ValueRead(message)

    def _freed(self, key):
        self._nan_checks.discard(key)
        super()._freed(key)
