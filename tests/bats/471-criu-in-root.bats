#!/usr/bin/env bats
# CRIU itself, run directly and not through runc (whose own checks on the
# images come first), keeps the names of files.img and remap-fpath.img
# beneath the restored mount's root: a ghost file or a link remap named
# with ".." climbing out of its mount, or through a symlink in the rootfs
# that points at a host folder, is refused, naming the entry, and the host
# is untouched: a canary folder and file under the test's temporary
# directory. (criu-patches/files-reg-resolve-ghost-and-link-remap-names-beneath)

load helpers

setup_file() {
	[ -x "$BIN/criu" ] || skip "$BIN/criu is not built (run 'make build/bin/criu')"
	[ -x "$BIN/crit" ] || skip "$BIN/crit is not built (run 'make build')"
	command -v busybox >/dev/null || skip "busybox is not installed (scripts/deps.sh installs busybox-static)"
	command -v unshare >/dev/null || skip "unshare is not installed (util-linux)"
	[ "$(id -u)" = 0 ] || skip "CRIU restores a mount namespace as root only"
}

teardown() {
	local f
	for f in "$BATS_TEST_TMPDIR"/*.pid; do
		[ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null || true
	done
}

# tree DIR: a busybox process tree in mount and pid namespaces of its own,
# its root DIR/rootfs (a bind mount) with /proc and a tmpfs at /dev/shm,
# whose init holds fd 4 on /dev/shm/x ("hi"), deleted: a ghost file, and
# fd 5 on the FIFO /tmp/f, read and write. DIR/rootfs/escape is a symlink to the canary folder. TREE is the init's
# pid on the host.
tree() {
	local dir=$1 r=$1/rootfs up i
	mkdir -p "$r/bin" "$r/proc" "$r/dev/shm" "$r/tmp"
	cp "$(command -v busybox)" "$r/bin/busybox"
	ln -sf busybox "$r/bin/sh"
	mknod "$r/dev/null" c 1 3
	ln -s "$CANARY" "$r/escape"
	mkfifo "$r/tmp/f"
	cat >"$r/tmp/loop.sh" <<-'EOF'
		echo hi >/dev/shm/x; exec 4</dev/shm/x; rm /dev/shm/x; exec 5<>/tmp/f
		for f in $(cd /proc/self/fd && echo *); do [ "$f" -gt 5 ] && eval "exec $f>&-"; done
		exec </dev/null >/dev/null 2>&1
		while :; do sleep 1; done
	EOF
	unshare --mount --pid --fork --propagation private sh -c '
		mount --bind "$1" "$1" && cd "$1" && mkdir .old && pivot_root . .old &&
		/bin/busybox mount -t proc proc /proc && /bin/busybox mount -t tmpfs shm /dev/shm &&
		/bin/busybox umount -l /.old && /bin/busybox rmdir /.old &&
		exec /bin/busybox setsid /bin/busybox sh /tmp/loop.sh' - "$r" </dev/null >"$dir/tree.log" 2>&1 3>&- &
	up=$!
	for i in $(seq 50); do
		TREE=$(cat "/proc/$up/task/$up/children" 2>/dev/null) || true
		TREE=${TREE% }
		[ -n "$TREE" ] && [ -e "/proc/$TREE/fd/5" ] && break
		sleep 0.1
	done
	[ -e "/proc/$TREE/fd/5" ] || die "the tree did not start: $(cat "$dir/tree.log")"
	echo "$TREE" >"$BATS_TEST_TMPDIR/tree.pid"
}

# dump DIR: start a tree in DIR and checkpoint it into DIR/img.orig.
dump() {
	local dir=$1
	tree "$dir"
	mkdir -p "$dir/img.orig" "$dir/work"
	run_cmd "$BIN/criu" dump -t "$TREE" -D "$dir/img.orig" -W "$dir/work" -v4 -o dump.log
}

# restore DIR [EXPECTED]: criu restore of DIR/img into DIR/rootfs, detached.
restore() {
	local dir=$1
	rm -f "$dir/work/restore.log" "$BATS_TEST_TMPDIR/restored.pid"
	run_cmd "${2:-0}" "$BIN/criu" restore -D "$dir/img" -W "$dir/work" --root "$dir/rootfs" -d -v4 -o restore.log \
		--pidfile "$BATS_TEST_TMPDIR/restored.pid"
}

# hostile DIR KIND NAME: DIR/img is DIR/img.orig with one more remap in
# remap-fpath.img, on the mount of the name in files.img: KIND ghost, a
# folder (mode 0777) named NAME, which the root task would create or, when
# it is there, chmod, and remove at the end; KIND linked, NAME linked to
# /dev/shm/y and unlinked at the end.
hostile() {
	local dir=$1 kind=$2 name=$3 img=$1/img
	rm -rf "$img" && cp -a "$dir/img.orig" "$img"
	craft "$img/files.img" "
shm = next(e['reg']['mnt_id'] for e in d['entries'] if e.get('reg', {}).get('name') == '/dev/shm/x')
root = next(e['reg']['mnt_id'] for e in d['entries'] if e.get('reg', {}).get('name') == '/bin/busybox')
mnt = shm if '$name'.startswith('/dev/shm/') else root
def reg(i, name, mnt_id):
    return {'type': 'REG', 'id': i, 'reg': {'id': i, 'flags': 0, 'pos': '0', 'name': name, 'mnt_id': mnt_id,
        'fown': {'uid': 0, 'euid': 0, 'signum': 0, 'pid_type': 0, 'pid': 0}}}
d['entries'].append(reg(100, '$name', mnt))
d['entries'].append(reg(101, '/dev/shm/y' if mnt == shm else '/y', mnt))
"
	case $kind in
	ghost)
		craft "$img/remap-fpath.img" "d['entries'].append({'orig_id': 100, 'remap_id': 2, 'remap_type': 'GHOST'})"
		cp "$img/ghost-file-1.img" "$img/ghost-file-2.img"
		craft "$img/ghost-file-2.img" "
g = d['entries'][0]
g['mode'] = 0o40777
g.pop('extra', None)
g.pop('size', None)
"
		;;
	linked)
		craft "$img/remap-fpath.img" "d['entries'].append({'orig_id': 101, 'remap_id': 100, 'remap_type': 'LINKED'})"
		;;
	esac
}

@test "criu restore: a deleted file held open in /dev/shm comes back as a ghost, its fd reading what it held" {
	canaries
	local d=$BATS_TEST_TMPDIR/b
	dump "$d"
	cp -a "$d/img.orig" "$d/img"
	restore "$d"
	local pid
	pid=$(cat "$BATS_TEST_TMPDIR/restored.pid")
	is "$(readlink "/proc/$pid/fd/4")" "/dev/shm/x (deleted)" "the restored fd 4"
	is "$(cat "/proc/$pid/fd/4")" "hi" "what fd 4 reads"
	# The ghost was removed again from the restored /dev/shm.
	is "$(nsenter -t "$pid" -m ls -A /dev/shm)" "" "the restored /dev/shm"
	canaries_intact
}

@test "criu restore: ghost and link-remap names that climb out of their mount with .. or through a symlink are refused, the host untouched" {
	canaries
	local d=$BATS_TEST_TMPDIR/b up kind name failed=()
	dump "$d"
	up=$(printf '../%.0s' $(seq 24))
	while read -r kind name; do
		echo "# $kind $name" >&2
		rm -rf "$CANARY" && canaries
		hostile "$d" "$kind" "$name"
		restore "$d" '?'
		[ ! -f "$BATS_TEST_TMPDIR/restored.pid" ] || kill -9 "$(cat "$BATS_TEST_TMPDIR/restored.pid")" 2>/dev/null || true
		(canaries_intact) || failed+=("$kind $name: the host changed")
		grep -E "(Ghost file 0x2|Remap 0x64 of file 0x65): .* is not beneath its mount's root, refusing" "$d/work/restore.log" >&2 ||
			failed+=("$kind $name: CRIU's log does not name the refusal: $(grep -E 'Error' "$d/work/restore.log")")
	done <<-EOF
		ghost /dev/shm/$up${CANARY#/}/victim
		ghost /escape/victim
		linked /dev/shm/$up${CANARY#/}/victim/canary
		linked /escape/victim/canary
	EOF
	[ ${#failed[@]} -eq 0 ] || die "$(printf '%s\n' "${failed[@]}")"
}

# fifo DIR NAME: DIR/img is DIR/img.orig with the FIFO's name in files.img
# (its REG entry, /tmp/f) changed to NAME, opened with O_TRUNC as well.
fifo() {
	local dir=$1 name=$2 img=$1/img
	rm -rf "$img" && cp -a "$dir/img.orig" "$img"
	craft "$img/files.img" "
fifo = next(e['fifo'] for e in d['entries'] if e['type'] == 'FIFO')
reg = next(e['reg'] for e in d['entries'] if e['type'] == 'REG' and e['id'] == fifo['regf_id'])
assert reg['name'] == '/tmp/f', reg
reg['name'] = '$name'
reg['flags'] = int(reg['flags'], 0) | 0o1000 if isinstance(reg['flags'], str) else reg['flags'] | 0o1000
"
}

@test "criu restore: a FIFO held open comes back, its name and mode as they were" {
	canaries
	local d=$BATS_TEST_TMPDIR/b
	dump "$d"
	cp -a "$d/img.orig" "$d/img"
	restore "$d"
	local pid
	pid=$(cat "$BATS_TEST_TMPDIR/restored.pid")
	is "$(readlink "/proc/$pid/fd/5")" "/tmp/f" "the restored fd 5"
	is "$(stat -c %F "$d/rootfs/tmp/f")" "fifo" "the restored /tmp/f"
	canaries_intact
}

# A restored task opens its FIFOs by name from the namespace's root, as
# host root, before the restorer chroots it; the name is resolved beneath
# that root (criu-patches/files-resolve-FIFO-lease-inotify-and-unix-socket-nam).
@test "criu restore: FIFO names that climb out of the root with .. or through a symlink are refused, the host untouched" {
	canaries
	local d=$BATS_TEST_TMPDIR/b up name failed=()
	dump "$d"
	up=$(printf '../%.0s' $(seq 24))
	while read -r name; do
		echo "# fifo $name" >&2
		rm -rf "$CANARY" && canaries
		fifo "$d" "$name"
		restore "$d" '?'
		[ ! -f "$BATS_TEST_TMPDIR/restored.pid" ] || kill -9 "$(cat "$BATS_TEST_TMPDIR/restored.pid")" 2>/dev/null || true
		(canaries_intact) || failed+=("fifo $name: the host changed")
		grep -E "File 0x[0-9a-f]+: .* is not beneath its mount namespace's root, refusing to open it" "$d/work/restore.log" >&2 ||
			failed+=("fifo $name: CRIU's log does not name the refusal: $(grep -E 'Error' "$d/work/restore.log")")
	done <<-EOF
		/$up${CANARY#/}/victim/canary
		/escape/victim/canary
	EOF
	[ ${#failed[@]} -eq 0 ] || die "$(printf '%s\n' "${failed[@]}")"
}
