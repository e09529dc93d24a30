"""The probes' meter library (torch and the stdlib only; imports nothing itself): what the built-in probes
measure memory with, shared by ``ga_memory`` (its phase meters), the command meter (``command``: the
exact live-bytes count inside a user's program) and the repro scripts bisector writes (which embed these
files). Import a module by its dotted name with probes/ on ``sys.path`` (``from _meters.cpu import
StorageMeter``), or load the package by path under a name of your own (``command/_inprocess.py``).

* ``tensor_bytes``: live tensor-storage bytes counted exactly under a ``TorchDispatchMode`` (each untyped
  storage once, from first sight until freed); ``LiveBytes``, the per-step meter of the command probe.
* ``phases``: a measured window and its named phases (start, peak and end bytes), ``DEVICE_METER``.
* ``cpu``: ``StorageMeter``, the exact phase meter on the CPU (``tensor_bytes``'s count with phases), with
  allocation sites (``sites``) and an optional observer of every allocation (ga_memory's allocator model records
  its trace so).
* ``site_bytes``: ``SiteBytes``, ``LiveBytes`` with the allocation sites of each step's peak (storages above a
  floor placed by ``sites.SitePicker``, the rest pooled): the command meter's count.
* ``fake_reads``: ``FakeSession`` (torch's FakeTensorMode entered, data real on demand) and ``FakeReads``, the
  value reads of fake tensors answered or refused: both meters' ``--fake``.
* ``fake_mode``: fake mode for ``ga_memory`` (``--fake``): ``FakeStorageMeter``, the CPU phase meter on fake
  tensors, with ``fake_reads``'s value reads.
* ``cuda``: ``CudaMeter``, the caching allocator's counters per phase, and ``NvmlProbe``: NVML's
  device-wide view of the same GPU, found by its UUID.
"""
