#!/usr/bin/env python3
"""Draw Rekindle's data path as text: checkpoint -> registry -> restore.

Each box says what happens and names the room a change to it belongs in: a
file or folder of this repository (the restore engine's are in restore/), or a patch of containerd-patches/,
runc-patches/ or criu-patches/. Patches are named by the subject their file
name carries, and numbered from the series as it is now, so renumbering the
series and running `make diagram` keeps the picture right; a path or patch
that is gone stops the script, naming it.

    python3 docs/diagram/datapath.py           # print the diagram
    python3 docs/diagram/datapath.py --write   # put it into docs/architecture.md (make diagram)
    python3 docs/diagram/datapath.py --check   # exit 1 if docs/architecture.md's copy differs

The diagram sits in docs/architecture.md between BEGIN and END below;
test_datapath.py (make test-diagram) checks that it is this script's output.
"""
import difflib
import os
import re
import sys
import textwrap

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
DOC = os.path.join("docs", "architecture.md")
BEGIN = "<!-- datapath: begin (written by docs/diagram/datapath.py; `make diagram` regenerates it) -->"
END = "<!-- datapath: end -->"
WIDTH = 100  # the whole box, borders included

# Patches by a stretch of the file name that format-patch derives from the subject.
PATCHES = {
    "c-restore": ("containerd-patches", "tasks-restore-containers-created-from-checkpoint"),
    "c-base": ("containerd-patches", "checkpointimage-resolve-the-base-image-locally"),
    "c-basehosts": ("containerd-patches", "tasks-pull-a-checkpoint-s-base-image-through-the-con"),
    "c-phases": ("containerd-patches", "tasks-log-the-phase-times-of-each-restore"),
    "c-cri": ("containerd-patches", "cri-restore-checkpoint-images-from-the-extracted"),
    "c-drop": ("containerd-patches", "checkpointimage-drop-a-checkpoint-s-cache-entry"),
    "c-live": ("containerd-patches", "checkpointimage-tell-the-restorer-which-containers-s"),
    "c-readahead": ("containerd-patches", "diff-apply-read-ahead-and-hash"),
    "c-cold-host": ("containerd-patches", "checkpointimage-start-cold-when-a-host-cannot-restor"),
    "c-cold-tasks": ("containerd-patches", "tasks-start-cold-when-the-runtime-fails"),
    "c-cold-cri": ("containerd-patches", "cri-start-cold-when-the-runtime-fails"),
    "c-annotations": ("containerd-patches", "cri-keep-the-kubelet-s-annotations"),
    "c-cri-phases": ("containerd-patches", "cri-log-the-phase-times-of-each-restore"),
    "c-cold-log": ("containerd-patches", "cri-begin-a-cold-started-checkpoint-container"),
    "c-inflight": ("containerd-patches", "runc-shim-leave-out-TCP-connections-not-yet-accepted"),
    "c-gc-unlink": ("containerd-patches", "metadata-unlink-a-collected-snapshot"),
    "c-ckpt-dir": ("containerd-patches", "tasks-remove-the-directory-a-checkpoint-is-extracted"),
    "c-fault": ("containerd-patches", "archive-fault-a-large-file-s-pages"),
    "c-nohash": ("containerd-patches", "diff-apply-do-not-hash-an-uncompressed-layer"),
    "c-direct": ("containerd-patches", "diff-apply-read-a-layer-s-blob-with-O_DIRECT"),
    "c-zstd": ("containerd-patches", "builtins-decode-zstd-layers-several-frames-at-once"),
    "c-pages-zst": ("containerd-patches", "runc-shim-decode-compressed-CRIU-pages-images-into-m"),
    "c-decode-bound": ("containerd-patches", "runc-shim-bound-the-decoded-pages-images-by-the-cont"),
    "c-deadline": ("containerd-patches", "runc-shim-kill-a-restore-that-outlasts-checkpoint_re"),
    "c-erofs": ("containerd-patches", "diff-apply-keep-a-layer-that-asks-for-it-as-an-EROFS"),
    "c-mount": ("containerd-patches", "checkpointimage-read-a-checkpoint-layer-kept-in-plac"),
    "c-pages-ahead": ("containerd-patches", "tasks-read-a-checkpoint-s-pages-images-ahead-from-ta"),
    "c-criu-cause": ("containerd-patches", "runc-shim-name-CRIU-s-errors"),
    "c-logger-dies": ("containerd-patches", "runc-shim-end-the-logging-binary-when-the-shim-dies"),
    "c-who-died": ("containerd-patches", "runtime-name-the-task-and-the-process-when-a-runc-or"),
    "c-force-delete": ("containerd-patches", "runc-shim-delete-a-container-whose-restore-failed-by"),
    "c-task-gone": ("containerd-patches", "tasks-remove-a-restored-container-s-root-filesystem-"),
    "c-preheat": ("containerd-patches", "tasks-keep-named-checkpoint-images-resident-checkpoi"),
    "c-one-task": ("containerd-patches", "tasks-refuse-a-second-task-of-a-container-before-it"),
    "c-devshm": ("containerd-patches", "cri-restore-a-checkpoint-s-dev-shm-into-the-new-sand"),
    "n-failed-hook": ("nerdctl-patches", "ocihook-remove-the-iptables-rules-of-a-failed-create"),
    "c-policy": ("containerd-patches", "checkpointimage-restore-only-the-checkpoint-images"),
    "c-signature": ("containerd-patches", "checkpointimage-restore-only-signed-checkpoint-image"),
    "r-bind": ("runc-patches", "libct-criu-hand-CRIU-the-resolved-source-of-bind"),
    "r-lo": ("runc-patches", "libct-criu-bring-up-the-loopback"),
    "r-enosys": ("runc-patches", "libct-seccomp-patchbpf-emit-the-ENOSYS-stub"),
    "r-program": ("runc-patches", "libct-seccomp-build-a-config-s-program"),
    "r-guard": ("runc-patches", "libct-criu-check-a-restore-s-images-with-Rekindle-s"),
    "r-stdio": ("runc-patches", "libct-criu-inherit-the-new-process-s-stdio-from-the"),
    "r-peer": ("runc-patches", "libct-criu-obey-only-CRIU-s-own-messages-on-the-RPC"),
    "r-criu-died": ("runc-patches", "libct-criu-fail-a-restore-at-once-when-CRIU-dies-and"),
    "r-state-first": ("runc-patches", "libct-criu-save-a-restore-s-state-before-CRIU-runs"),
    "r-hooks-wait": ("runc-patches", "libct-criu-let-delete-wait-for-the-hooks-of-a-restor"),
    "k-zombie": ("criu-patches", "dump-record-a-zombie-s-thread-id-in-pstree.img"),
    "k-shmem-err": ("criu-patches", "shmem-fail-the-restore-when-shared-memory-pages"),
    "k-truncated": ("criu-patches", "restorer-fail-on-a-truncated-pages-image"),
    "k-lsm": ("criu-patches", "restore-apply-lsm-profile-to-tasks-dumped-without"),
    "k-private": ("criu-patches", "restore-fill-private-memory-with-parallel-threads"),
    "k-shared": ("criu-patches", "shmem-fill-shared-memory-content-in-parallel"),
    "k-cow": ("criu-patches", "mem-fill-premapped-private-memory-and-compare-copy"),
    "k-direct": ("criu-patches", "mem-read-pages-images-with-O_DIRECT"),
    "k-root": ("criu-patches", "restore-let-the-root-task-restore-its-memory-beside"),
    "k-warm": ("criu-patches", "restore-read-the-files-of-mappings-ahead"),
    "k-cgns": ("criu-patches", "cgroup-create-the-root-task-s-cgroup-namespace"),
    "k-beneath": ("criu-patches", "files-reg-resolve-ghost-and-link-remap-names-beneath"),
    "k-in-root": ("criu-patches", "files-resolve-FIFO-lease-inotify-and-unix-socket-nam"),
    "k-reap": ("criu-patches", "restore-reap-the-seized-tasks-it-kills-in-a-new-pid"),
    "k-sentinel": ("criu-patches", "restore-tell-device-plugins-when-every-task-has-been"),
    "k-cuda-once": ("criu-patches", "cuda-restore-the-CUDA-state-of-a-tree-s-processes-at"),
    "k-inherit": ("criu-patches", "files-refuse-criu-s-own-descriptors-as-inherit-fds"),
}


class Missing(Exception):
    """A path or patch the diagram names is not in the tree."""


def series(folder, root):
    path = os.path.join(root, folder, "series")
    try:
        with open(path) as f:
            return [ln.split("#", 1)[0].strip() for ln in f if ln.split("#", 1)[0].strip()]
    except OSError as e:
        raise Missing(f"{folder}/series: {e.strerror}") from None


def patch(key, root):
    """The patch's folder and number as the series has it now, e.g. ('criu-patches', '0003')."""
    folder, slug = PATCHES[key]
    hits = [name for name in series(folder, root) if re.match(r"\d{4}-" + re.escape(slug), name)]
    if len(hits) != 1:
        raise Missing(
            f"{folder}/series has {len(hits)} patch(es) named like '{slug}': the series changed; "
            f"name the patch as it is now in docs/diagram/datapath.py (PATCHES) and run 'make diagram'"
        )
    return folder, hits[0][:4]


def path(p, root):
    if not os.path.exists(os.path.join(root, p.rstrip("/"))):
        raise Missing(f"{p}: not in the tree; name the file as it is now in docs/diagram/datapath.py and run 'make diagram'")
    return p


# A box: title, what happens, and the rooms. A room is a repo path, or
# ("P", key, "what it does") for a patch.
def P(key, what):
    return ("P", key, what)


# A room that is a setting rather than a file: its text, and the path that writes it.
def N(text, where):
    return ("N", text, where)


CHECKPOINT = "CHECKPOINT, once:  oci-checkpoint create [--engine sglang|vllm|generic] CONTAINER IMAGE"
RESTORE = "RESTORE, every replica:  nerdctl run [--device nvidia.com/gpu=N] IMAGE  (or a CRI pod)"

BOXES = [
    (CHECKPOINT, None, None),
    ("quiesce",
     "Wait for health; the preflight refuses an engine its profile cannot quiesce (a vLLM without sleep "
     "mode) before anything changes; the profile's calls move weights and KV cache off the GPU (SGLang: "
     "release memory; vLLM: sleep).",
     ["oci-checkpoint/pkg/checkpoint/quiesce.go", "oci-checkpoint/pkg/engine/"]),
    ("wake helper, devices, host facts",
     "Copy the static rekindle-wake into the container and start it (it waits for /.rekindle/wake); "
     "write /.rekindle/devices.json; read CPU, kernel, driver and GPUs for the annotations.",
     ["oci-checkpoint/pkg/checkpoint/helper.go", "oci-checkpoint/pkg/hostinfo/"]),
    ("CRIU dump",
     "containerd's task checkpoint, runc checkpoint, CRIU dumps the processes into a work directory; "
     "the engine keeps running until the image is written.",
     ["oci-checkpoint/pkg/checkpoint/dump.go", P("k-zombie", "a zombie's thread id recorded"),
      P("c-inflight", "connections not yet accepted left out"),
      N("CRIU's options for runc: /etc/criu/runc.conf, written by", "ansible/roles/containerd/")]),
    ("CUDA checkpoint",
     "CRIU's CUDA plugin runs our cuda-checkpoint: lock, then the GPU state is copied to host memory and "
     "dumped with the process.",
     ["oci-checkpoint/cuda-checkpoint/cuda-checkpoint.c", "oci-checkpoint/cuda-checkpoint/driver.c"]),
    ("package",
     "The rootfs diff (with /.rekindle/wake) and CRIU's images become one layer, written once with "
     "O_DIRECT into containerd's content store and marked to be read in place (--compression pages: "
     "the pages images compressed in it); org.rekindle.* and org.criu.checkpoint.* annotations; "
     "CRI-O/checkpointctl format.",
     ["oci-checkpoint/pkg/checkpoint/pack.go", "oci-checkpoint/pkg/checkpoint/layer.go",
      "oci-checkpoint/pkg/checkpoint/pageszst.go",
      "oci-checkpoint/pkg/checkpoint/blob.go", "oci-checkpoint/pkg/annotations/"]),
    ("registry",
     "An ordinary OCI image: nerdctl push, skopeo, any registry. oci-checkpoint check and inspect read "
     "its manifest without pulling: can this host restore it?",
     ["oci-checkpoint/pkg/checkpoint/inspect.go", "oci-checkpoint/pkg/registry/"]),
    (RESTORE, None, None),
    ("pull",
     "nerdctl pulls and unpacks like any image; the base image is taken from the local store when "
     "there, pulled through the node's registry hosts (mirrors) when not. Layers that are extracted (compressed ones) are read ahead, decoded "
     "frame by frame on every core, faulted in and hashed once.",
     [P("c-base", "base image found locally"), P("c-basehosts", "base pulled through hosts.toml"),
      P("c-readahead", "read ahead, hash on a goroutine"),
      P("c-zstd", "zstd frames decoded in parallel"), "restore/zstdframes/",
      P("c-fault", "pages faulted in ahead of the writer"), P("c-nohash", "no second hash"),
      P("c-direct", "blob read with O_DIRECT")]),
    ("in-place layer",
     "The checkpoint layer is not extracted: the snapshot hard-links its blob and holds an EROFS tar "
     "index over it; the restore mounts that index, and CRIU reads the pages from the blob (pages "
     "images compressed with --compression pages are first decoded into memory on every core).",
     [P("c-erofs", "EROFS tar index at unpack"), P("c-mount", "read through the EROFS mount"),
      "restore/checkpointimage/inplace.go",
      P("c-pages-ahead", "pages read ahead from task create"),
      P("c-pages-zst", "compressed pages decoded into a tmpfs"),
      P("c-decode-bound", "within the container's memory limit"),
      "scripts/build-erofs-utils.sh"]),
    ("restore on create",
     "containerd's Tasks.Create (nerdctl) or CRI's CreateContainer sees a checkpoint image: the host's "
     "policy must allow its name (and its signature, where the host requires one), the host must be able "
     "to restore it (else a cold start where the image asks for one), then it restores instead of "
     "starting.",
     [P("c-policy", "host's restore policy"), P("c-signature", "signed by a listed key"),
      P("c-cold-host", "host check, cold start"),
      "restore/checkpointimage/gpus.go", "restore/checkpointimage/preflight.go",
      P("c-restore", "tasks: restore on create"), P("c-cri", "CRI restores, holding its entry"),
      P("c-annotations", "the kubelet's annotations kept")]),
    ("cache",
     "The extracted-checkpoint cache, keyed by layer: the second restore unpacks nothing. The rootfs is "
     "the base image plus rootfs-diff.tar applied into the overlay's upper directory; a CRI container "
     "holds its entry, and its pod's /dev/shm (devshm-checkpoint.tar) goes into the new sandbox's; a "
     "failed restore drops it; cache-gc prunes.",
     ["restore/checkpointimage/cache.go", "restore/checkpointimage/unpacked.go",
      "restore/checkpointimage/rootfsdiff_linux.go",
      P("c-devshm", "CRI: the pod's /dev/shm unpacked"), "restore/devshm/",
      P("c-drop", "dropped after a failed restore, tasks and CRI"),
      P("c-live", "removed containers' snapshots go with a damaged entry"),
      P("c-preheat", "named images kept resident, locked in memory"), "restore/checkpointimage/preheat.go",
      "systemd/rekindle-cache-gc.sh"]),
    ("runc restore",
     "runc hands the images to Rekindle's guard (guard/, hooked in by one patch), which refuses CRIU "
     "images that grant a task more than the new container's config (ids, capabilities, no_new_privs, "
     "seccomp, LSM label, limits, scheduling, namespaces, cgroups, mounts, files, leases) and any image "
     "file or file kind it does not read, and runs CRIU in a mount namespace that holds only what it "
     "needs; runc takes the stdio's inherited descriptors from the images, obeys only CRIU's own "
     "messages, fails a restore at once when CRIU dies, hands CRIU the resolved bind-mount sources "
     "(CDI's driver files) and brings up the restored network namespace's loopback.",
     [P("r-guard", "the guard's hook"), "guard/check/", "guard/jail/",
      P("r-stdio", "stdio inherited from the images"), P("r-peer", "only CRIU's messages, in order"),
      "guard/peer/", P("r-criu-died", "fails at once when CRIU dies"), P("r-program", "seccomp program built to compare"),
      P("r-enosys", "seccomp program the same each time"), P("r-bind", "bind-mount sources"),
      P("r-lo", "loopback up"),
      P("r-state-first", "state saved first: runc delete undoes a killed restore"),
      P("r-hooks-wait", "delete waits for the hooks a killed runc left running"),
      P("c-deadline", "killed at checkpoint_restore_timeout")]),
    ("CRIU parallel fill",
     "CRIU restores the process tree; helper threads fill private memory, helper processes shared "
     "memory (memfd, shared anonymous, SysV) and premapped, copy-on-write memory, one per CPU up to 16, "
     "reading with O_DIRECT when the images are not cached, every task at once; a short or unreadable pages image fails "
     "the restore.",
     [P("k-private", "private memory"), P("k-shared", "shared memory"),
      P("k-cow", "premapped and copy-on-write memory"), P("k-direct", "O_DIRECT from a cold cache"),
      P("k-root", "the root task fills beside its children"),
      P("k-warm", "mapped files read ahead"),
      P("k-shmem-err", "unreadable shared pages fail"), P("k-truncated", "truncated image fails"),
      P("k-lsm", "--lsm-profile for every task"), P("k-cgns", "cgroup namespace in ignore mode"),
      P("k-beneath", "ghost and link-remap names kept beneath the mount's root"),
      P("k-in-root", "FIFO, lease, watch and unix socket names kept in the root"),
      P("k-sentinel", "device plugins told when every task is handed over"),
      P("k-cuda-once", "a tree's CUDA processes restored at once"),
      P("k-reap", "a failed restore's tasks killed and reaped"),
      P("k-inherit", "its own descriptors never inherited, keys by kind")]),
    ("CUDA restore",
     "CRIU's CUDA plugin runs cuda-checkpoint again: the GPU state goes back onto the GPUs CDI gave the "
     "new container (old UUIDs mapped onto new ones), then unlock; a service keeps the driver initialized "
     "so that each of these runs starts at once.",
     ["oci-checkpoint/cuda-checkpoint/cuda-checkpoint.c", "oci-checkpoint/cuda-checkpoint/remap.c",
      "systemd/rekindle-cuda-hold.service"]),
    ("wake",
     "rekindle-wake sees /.rekindle/wake and calls the engine's resume (SGLang: resume memory; vLLM: "
     "wake_up, reload_weights), retrying; the outcome and its times go to /.rekindle/status.",
     ["oci-checkpoint/cmd/rekindle-wake/", "oci-checkpoint/pkg/wake/", "oci-checkpoint/pkg/engine/"]),
    ("weights set",
     "Where the engine's weights are a weight set (--device rekindle.dev/weights=NAME), the host service "
     "keeps them in a tmpfs the engine maps and registers with CUDA once, kept mapped across the "
     "checkpoint; the CDI hook loads a missing set before CRIU maps it; the resume copies at PCIe speed.",
     ["oci-checkpoint/pkg/weights/", "oci-checkpoint/cmd/rekindle-weights/", "integrations/weights/"]),
]

# Patches around the restore rather than in one step of it.
AROUND = [
    P("c-phases", "each restore's phase times logged"), P("c-criu-cause", "CRIU's own errors named"),
    P("c-cold-tasks", "a failed restore starts cold (tasks), a wait follows it"),
    P("c-cold-cri", "the same under CRI"), P("c-cold-log", "its log says why"),
    P("c-cri-phases", "CRI's phase times too"), P("c-gc-unlink", "GC unlinks a collected snapshot"),
    P("c-ckpt-dir", "a containerd1 checkpoint's extracted copy removed after the restore"),
    P("c-logger-dies", "a killed shim's logger ends with it"),
    P("c-who-died", "a killed runc or shim named, with its container"),
    P("c-force-delete", "a failed restore deleted by force"),
    P("c-task-gone", "a restored root filesystem removed with its task"),
    P("c-one-task", "a second task refused before the restore begins"),
    P("n-failed-hook", "nerdctl's failed network hook removes its iptables rules"),
]


def room(r, root):
    if isinstance(r, tuple) and r[0] == "P":
        folder, num = patch(r[1], root)
        return folder, f"{num} {r[2]}"
    if isinstance(r, tuple):
        return None, f"{r[1]} {path(r[2], root)}"
    return None, path(r, root)


def rooms_lines(rooms, root):
    """Patches of one series after their folder; paths in a row share a line; notes stand alone."""
    out, groups, order = [], {}, []
    for r in rooms:
        folder, text = room(r, root)
        if folder is None and isinstance(r, str) and order and order[-1][0] == "path":
            order[-1] = ("path", order[-1][1] + ", " + text)
        elif folder is None:
            order.append(("path" if isinstance(r, str) else "note", text))
        else:
            if folder not in groups:
                groups[folder] = []
                order.append(("series", folder))
            groups[folder].append(text)
    for kind, val in order:
        out.append(f"{val}/ " + "; ".join(groups[val]) if kind == "series" else val)
    return out


def box(title, what, rooms, root):
    inner = WIDTH - 4
    top = f"┌─ {title} " + "─" * (WIDTH - 5 - len(title)) + "┐"
    lines = textwrap.wrap(what, inner)
    for r in rooms_lines(rooms, root):
        lines += textwrap.wrap(r, inner, initial_indent="▸ ", subsequent_indent="  ", break_on_hyphens=False)
    body = [f"│ {ln:<{inner}} │" for ln in lines]
    return [top] + body + ["└" + "─" * (WIDTH - 2) + "┘"]


def arrow():
    return [" " * (WIDTH // 2) + "▼"]


def render(root=ROOT):
    out = []
    for i, (title, what, rooms) in enumerate(BOXES):
        if what is None:  # a stage heading
            if out:
                out += arrow()
            out += ["", title, "═" * len(title)]
            continue
        if BOXES[i - 1][1] is not None:
            out += arrow()
        out += box(title, what, rooms, root)
    out += ["", "Around the restore, not one step of it:"]
    for r in rooms_lines(AROUND, root):
        out += textwrap.wrap(r, WIDTH, initial_indent="▸ ", subsequent_indent="  ", break_on_hyphens=False)
    return "\n".join(ln.rstrip() for ln in out).lstrip("\n") + "\n"


def block(text):
    return f"{BEGIN}\n\n```\n{text}```\n\n{END}"


def committed(root=ROOT):
    """docs/architecture.md, the span of its markers (None without them) and the diagram between them."""
    with open(os.path.join(root, DOC)) as f:
        doc = f.read()
    m = re.search(re.escape(BEGIN) + r".*?" + re.escape(END), doc, re.S)
    if m is None:
        return doc, None, None
    inner = re.fullmatch(re.escape(BEGIN) + r"\n\n```\n(.*)```\n\n" + re.escape(END), m.group(0), re.S)
    return doc, m, inner.group(1) if inner else ""


def main(argv):
    mode = argv[1] if len(argv) > 1 else ""
    if mode not in ("", "--write", "--check"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    try:
        text = render()
    except Missing as e:
        print(f"datapath.py: {e}", file=sys.stderr)
        return 1
    if mode == "":
        sys.stdout.write(text)
        return 0
    doc, m, current = committed()
    if m is None:
        print(f"datapath.py: {DOC} has no markers for the diagram:\n{BEGIN}\n{END}", file=sys.stderr)
        return 1
    if mode == "--check":
        if current == text:
            return 0
        diff = difflib.unified_diff(current.splitlines(), text.splitlines(), DOC, "datapath.py", lineterm="")
        print("\n".join(diff), file=sys.stderr)
        print(f"datapath.py: the diagram in {DOC} is not the script's output: run 'make diagram'", file=sys.stderr)
        return 1
    new = doc[:m.start()] + block(text) + doc[m.end():]
    if new != doc:
        tmp = os.path.join(ROOT, DOC + ".tmp")
        with open(tmp, "w") as f:
            f.write(new)
        os.replace(tmp, os.path.join(ROOT, DOC))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
