"""Process facts for the chaos tests and tools/soak.py, read from /proc (Linux): children, zombies, open
file descriptors, resident memory, CPU time. Standard library only."""
import os
import time


def children(pid):
    """Pids whose parent is `pid` (any state, zombies included)."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[1]) == pid:
            out.append(int(d))
    return out


def state(pid):
    """The one-letter state of `pid` ('R', 'S', 'Z', ...), or None when it is gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2:].split()[0]


def zombies(pid):
    """Children of `pid` that are zombies (exited, not waited for)."""
    return [c for c in children(pid) if state(c) == "Z"]


def live_children(pid):
    return [c for c in children(pid) if state(c) not in (None, "Z")]


def fds(pid):
    """{fd: target} of `pid`'s open descriptors ("pipe:[..]", "socket:[..]", paths)."""
    out = {}
    base = "/proc/%d/fd" % pid
    for name in os.listdir(base):
        try:
            out[int(name)] = os.readlink(os.path.join(base, name))
        except OSError:
            pass
    return out


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def cpu_seconds(pid):
    """User + system CPU time of `pid` in seconds."""
    with open("/proc/%d/stat" % pid) as f:
        stat = f.read()
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_gone(pid, timeout):
    """True once `pid` no longer exists (or is a zombie), polling for `timeout` seconds."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if state(pid) in (None, "Z"):
            return True
        time.sleep(0.01)
    return False
