"""`make run`'s check before it starts anything: each port given must be free on 127.0.0.1.

For a port in use it prints one line naming the port and the process holding it (found through
/proc, no extra tools), then one command to run instead, valid shell, with free ports that no
other variable of the run uses (`PORT=8001 SIM_PORT=8790 make run`), and exits 1, so the
quickstart stops before starting half its processes. Arguments: `NAME=PORT`, or
`NAME=PORT:COUNT` for COUNT consecutive ports (the simulators, one per platform from SIM_PORT).
Standard library only: it runs before anything else is set up.
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path


def _in_use(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def _listening_inodes(port: int) -> set[str]:
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:  # 0A = LISTEN
                inodes.add(inode)
    return inodes


def holder(port: int) -> str:
    """ "pid N (command line)" of a process listening on `port`, or why it is unknown."""
    inodes = _listening_inodes(port)
    if inodes:
        wanted = {f"socket:[{inode}]" for inode in inodes}
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                fds = list((proc / "fd").iterdir())
                if any(os.readlink(fd) in wanted for fd in fds):
                    cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
                    return f"pid {proc.name} ({cmd or '?'})"
            except OSError:
                continue
    return "a process this user cannot see"


def _parse(spec: str) -> tuple[str, int, int]:
    """`NAME=PORT` or `NAME=PORT:COUNT` (COUNT consecutive ports from PORT: one simulator per
    platform from SIM_PORT up)."""
    name, _, value = spec.partition("=")
    first, _, count = value.partition(":")
    return name, int(first), int(count or 1)


def _suggest(first: int, count: int, taken: set[int]) -> int | None:
    """The next start after `first` whose `count` ports are free and not another variable's."""
    for start in range(first + 1, min(first + 1000, 65536 - count + 1)):
        ports = range(start, start + count)
        if not any(p in taken for p in ports) and not any(_in_use(p) for p in ports):
            return start
    return None


def main(argv: list[str]) -> int:
    specs = [_parse(spec) for spec in argv]
    # Every port this run will use: a suggestion must not collide with another variable's.
    taken = {p for _, first, count in specs for p in range(first, first + count)}
    fixes: list[str] = []
    for name, first, count in specs:
        busy = [p for p in range(first, first + count) if _in_use(p)]
        if not busy:
            continue
        for port in busy:
            what = name if port == first else f"{name}+{port - first}"
            print(f"{what}: port {port} is in use by {holder(port)}", file=sys.stderr)
        start = _suggest(first, count, taken)
        if start is None:
            continue
        taken.update(range(start, start + count))
        fixes.append(f"{name}={start}")
    if fixes:
        command = " ".join([*fixes, "make run"])
        print(
            f"stop it, or run on free ports (keep your other variables): {command}", file=sys.stderr
        )
    return 1 if any(_in_use(p) for _, f, c in specs for p in range(f, f + c)) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
