"""The memory cgroup's record of out-of-memory kills (stdlib only): how a probe tells a death by SIGKILL that the
kernel's OOM killer dealt from any other (ga_memory's cell workers, the command meter's program)."""


def oom_kills():
    """The kernel's count of OOM kills in this process's memory cgroup (v2 memory.events, v1
    memory.oom_control), or None where it cannot be read."""
    try:
        with open("/proc/self/cgroup") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            where = (f"/sys/fs/cgroup{path.rstrip('/')}/memory.events",)
        elif "memory" in controllers.split(","):
            where = (f"/sys/fs/cgroup/memory{path.rstrip('/')}/memory.oom_control",)
        else:
            continue
        for name in where:
            try:
                with open(name) as fh:
                    for row in fh:
                        key, _, value = row.partition(" ")
                        if key == "oom_kill":
                            return int(value)
            except (OSError, ValueError):
                continue
    return None
