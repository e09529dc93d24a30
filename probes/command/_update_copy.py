"""The parameters before an optimizer step, kept outside the process's memory, to read the step's update norm.

``ParameterCopy.write`` puts the stepped parameters' bytes in a memory file of the kernel's (``memfd_create``: in
the cgroup's memory, never in the process's resident set, so ``rss_peak_bytes`` does not see the copy) on a
descriptor moved above the program's range and checked before each use (a program that closes every descriptor
loses the meter its copy, never its own files); ``change_norm`` reads it back after the step 64 KiB at a time
into buffers made once (192 KiB: the raw bytes and their float32 widening) and sums the squares of the change,
chunk by chunk, in float32 (float64 parameters in their own dtype). Every op runs where the caller set the dispatch modes aside. torch and the stdlib only.
"""
import math
import os

CHUNK_BYTES = 64 * 1024


class ParameterCopy:
    """The parameters before a step, in a kernel memory file (``memfd``) on a descriptor moved above the
    program's range and checked before each use; read back 64 KiB at a time."""

    def __init__(self, torch):
        self.torch, self.fd, self.why = torch, None, None
        make = getattr(os, "memfd_create", None)
        if make is None:
            self.why = "this system has no memfd_create (the meter keeps no copy of the parameters in the process)"
            return
        from ._records import _high

        self.fd = _high(make("bisector-update-norm", getattr(os, "MFD_CLOEXEC", 0)))
        st = os.fstat(self.fd)
        self._id = (st.st_dev, st.st_ino)
        self.raw = torch.empty(CHUNK_BYTES, dtype=torch.uint8)
        self.wide = torch.empty(CHUNK_BYTES // 2, dtype=torch.float32)   # a chunk of 2-byte parameters, widened
        self.norm = torch.empty((), dtype=torch.float32)

    def _ours(self):
        try:
            st = os.fstat(self.fd)
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == self._id

    def write(self, params):
        """None when every parameter is in the file; else why not."""
        if self.fd is None or not self._ours():
            self.why = self.why or "the program closed or reused the meter's descriptor of its parameter copy"
            self.fd = None
            return self.why
        import ctypes

        os.lseek(self.fd, 0, os.SEEK_SET)
        for p in params:
            view = memoryview((ctypes.c_char * (p.numel() * p.element_size())).from_address(p.data_ptr()))
            while view:
                view = view[os.write(self.fd, view):]
        return None

    def change_norm(self, params):
        """(the L2 norm of the parameters' change since ``write``, None) or (None, why)."""
        torch = self.torch
        if self.fd is None or not self._ours():
            return None, "the program closed or reused the meter's descriptor of its parameter copy"
        os.lseek(self.fd, 0, os.SEEK_SET)
        raw, squares = memoryview(_buffer(self.raw)).cast("B"), 0.0
        for p in params:
            flat, size = p.detach().view(-1), p.element_size()
            step = CHUNK_BYTES // size if size > 4 else min(CHUNK_BYTES // size, self.wide.numel())
            for start in range(0, flat.numel(), step):
                new = flat[start:start + step]
                count = new.numel() * size
                got = 0
                while got < count:
                    n = os.readv(self.fd, [raw[got:count]])
                    if n <= 0:
                        return None, "the meter's parameter copy ended early"
                    got += n
                old = self.raw[:count].view(p.dtype)
                wide = self.wide[:new.numel()] if size <= 4 else None
                if wide is None:   # float64 and wider: their own dtype
                    diff = new - old
                    squares += float(torch.linalg.vector_norm(diff).item()) ** 2
                    continue
                wide.copy_(new)
                wide.sub_(old)
                torch.linalg.vector_norm(wide, out=self.norm)
                squares += float(self.norm.item()) ** 2
        return math.sqrt(squares), None

    def close(self):
        if self.fd is not None and self._ours():
            try:
                os.close(self.fd)
            except OSError:
                pass
        self.fd = None


def _buffer(tensor):
    """A writable memoryview of a CPU tensor's bytes (no numpy needed)."""
    import ctypes

    return (ctypes.c_char * (tensor.numel() * tensor.element_size())).from_address(tensor.data_ptr())
