#!/usr/bin/env python3
"""free-ports.py [COUNT]: print COUNT distinct TCP ports nobody holds.

The ports come from below the kernel's ephemeral range: a port picked from
inside it (bind to port 0) can be taken as the local end of any outgoing
connection before the caller binds it, and nerdctl then refuses it as
"already allocated", since it counts every socket in /proc/net/tcp, not
only listeners.
"""
import random
import socket
import sys


def held():
    ports = set()
    for name in ("tcp", "tcp6", "udp", "udp6"):
        try:
            with open("/proc/net/" + name) as f:
                next(f)
                for line in f:
                    ports.add(int(line.split()[1].rsplit(":", 1)[1], 16))
        except OSError:
            pass
    return ports


def bindable(port):
    for family, addr in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET, "127.0.0.1")):
        s = socket.socket(family)
        try:
            s.bind((addr, port))
        except OSError:
            return False
        finally:
            s.close()
    return True


def main():
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low = int(f.read().split()[0])
    candidates = list(range(10000, low))
    if len(candidates) < 1000:
        sys.exit("free-ports.py: the ephemeral range starts at %d, leaving too few ports below it; "
                 "raise it (sysctl net.ipv4.ip_local_port_range)" % low)
    random.shuffle(candidates)
    taken = held()
    out = []
    for port in candidates:
        if port not in taken and bindable(port):
            out.append(port)
            if len(out) == count:
                print(" ".join(map(str, out)))
                return
    sys.exit("free-ports.py: no %d free ports in 10000-%d" % (count, low - 1))


if __name__ == "__main__":
    main()
