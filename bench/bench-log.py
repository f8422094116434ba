"""bench-log.py: what bench/bench.sh reads from the logs of one run, as JSON.

  bench-log.py restore CONTAINERD_LOG CONTAINER FROM_LINE
      one restore of CONTAINER: {"containerd": {phase: seconds},
      "restore_begun_at": time or null, "cache": "miss" | "hit"}
        containerd        containerd's last "restored from checkpoint image X:
                          container-setup=0.012s [task-create=0.03s]
                          criu-restore=0.64s total=0.68s" line for it (containerd-patches/tasks-log-the-phase-times-of-each-restore-from-a-che)
        restore_begun_at  the time of its last "restoring instead of starting"
                          line (containerd-patches/tasks-restore-containers-created-from-checkpoint-ima): what came before is nerdctl's own
                          work (image unpack, container create)
        cache             "miss" when a "checkpoint cache miss" line was logged
                          from line FROM_LINE (1-based) on
  bench-log.py cuda CUDA_CHECKPOINT_LOG FROM_LINE
      the timed steps cuda-checkpoint logged from FROM_LINE on, as
      {"restore": s, "unlock": s} summed over the engine's processes; {} when
      there is no log (a CPU engine)
  bench-log.py layer CONTAINERD_LOG
      the digest of the checkpoint layer the last cache miss built, or nothing
"""
import json
import re
import sys

PHASE = re.compile(r"^([a-z-]*)=([0-9.]*)s$")
RESTORED = re.compile(r'.*restored from checkpoint image [^ ]*: ')
BEGUN = re.compile(r'^time="([^"]*)"')
CUDA_STEP = re.compile(r".*\] pid [0-9]*: (.*) done in ([0-9.]*)s$")
MISS_LAYER = re.compile(r".*checkpoint cache miss: building .* of checkpoint layer (sha256:[0-9a-f]*)")


def lines(path, start=1):
    """The lines of PATH from line START (1-based) on; none when it is absent."""
    try:
        with open(path, errors="replace") as f:
            return f.read().splitlines()[max(start, 1) - 1:]
    except FileNotFoundError:
        return []


def restore_phases(line):
    """The phase=seconds pairs of one "restored from checkpoint image" line."""
    msg = RESTORED.sub("", line, count=1)
    msg = msg.split('" ', 1)[0]
    if msg.endswith('"'):
        msg = msg[:-1]
    phases = {}
    for word in msg.split(" "):
        m = PHASE.match(word)
        if m:
            phases[m.group(1)] = json.loads(m.group(2))
    return phases


def restore(log, container, start):
    every = lines(log)
    mine = [l for l in every if container in l]
    restored = [l for l in mine if "restored from checkpoint image" in l]
    begun = [l for l in mine if "restoring instead of starting" in l]
    at = BEGUN.match(begun[-1]) if begun else None
    miss = any("checkpoint cache miss" in l for l in every[max(int(start), 1) - 1:])
    return {"containerd": restore_phases(restored[-1]) if restored else {},
            "restore_begun_at": at.group(1) if at else None,
            "cache": "miss" if miss else "hit"}


def cuda(log, start):
    steps = {}
    for l in lines(log, int(start)):
        m = CUDA_STEP.match(l)
        if m:
            name = m.group(1).replace(" with GPU remap", "", 1)
            steps[name] = steps.get(name, 0) + json.loads(m.group(2))
    return steps


def layer(log):
    found = [m.group(1) for m in map(MISS_LAYER.match, lines(log)) if m]
    return found[-1] if found else ""


def main(argv):
    if len(argv) == 4 and argv[0] == "restore":
        print(json.dumps(restore(*argv[1:])))
    elif len(argv) == 3 and argv[0] == "cuda":
        print(json.dumps(cuda(*argv[1:])))
    elif len(argv) == 2 and argv[0] == "layer":
        print(layer(argv[1]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
