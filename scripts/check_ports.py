"""`make run`'s check before it starts anything: each port given must be free on 127.0.0.1.

For a port in use it prints one line naming the port and the process holding it (found through
/proc, no extra tools) and exits 1, so the quickstart stops before starting half its processes.
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


def main(argv: list[str]) -> int:
    status = 0
    for spec in argv:
        name, _, value = spec.partition("=")
        port = int(value)
        if _in_use(port):
            print(
                f"{name}={port}: port {port} is in use by {holder(port)}; stop it, or run with "
                f"another {name} (e.g. {name}={port + 1} make run)",
                file=sys.stderr,
            )
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
