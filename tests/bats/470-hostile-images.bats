#!/usr/bin/env bats
# A checkpoint image is hostile until proven otherwise. CRIU restores as host
# root from the image's own files: cgroup.img, mountpoints-N.img, ids-N.img,
# the cores and files.img. Each test here crafts one such file with crit (the
# images a real dump wrote, decoded, changed, encoded again) and checks that
# runc refuses it before CRIU acts, naming the image file and the field, and
# that nothing on the host changed: a canary folder and file under the test's
# temporary directory.

load helpers

setup_file() {
	need_built oci-checkpoint crit
	command -v busybox >/dev/null || skip "busybox is not installed (scripts/deps.sh installs busybox-static)"
	stack_up
	load_image base
	load_image cpu-engine
	export CONTAINERD_ADDRESS=$RK_DIR/containerd.sock
}

teardown() {
	local c
	[ ! -f "$BATS_TEST_TMPDIR/listener.pid" ] || kill "$(cat "$BATS_TEST_TMPDIR/listener.pid")" 2>/dev/null || true
	for c in $(runc_ list -q 2>/dev/null); do runc_ delete -f "$c" >/dev/null 2>&1 || true; done
	[ -z "${RK_DIR:-}" ] || remove_containers
}

teardown_file() {
	stack_down
}

runc_() { PATH=$BIN:$PATH "$BIN/runc" --root "$BATS_FILE_TMPDIR/runc" "$@"; }

# bundle DIR [JQ]: a runc bundle in DIR whose process, busybox as root with
# the default capabilities, loops; JQ changes its config.json.
bundle() {
	local dir=$1 jq=${2:-.}
	mkdir -p "$dir/rootfs/bin" "$dir/rootfs/tmp"
	cp "$(command -v busybox)" "$dir/rootfs/bin/busybox"
	ln -sf busybox "$dir/rootfs/bin/sh"
	(cd "$dir" && "$BIN/runc" spec)
	jq '.process.terminal = false | .root.readonly = false
		| .process.args = ["/bin/sh", "-c", "while :; do sleep 1; done"]' "$dir/config.json" |
		jq "$jq" >"$dir/config.new"
	mv "$dir/config.new" "$dir/config.json"
}

# dump NAME DIR [JQ]: run a bundle (bundle's JQ) as container NAME and
# checkpoint it into DIR/img.
dump() {
	local name=$1 dir=$2
	bundle "$dir" "${3:-.}"
	(cd "$dir" && runc_ run -d "$name" </dev/null >/dev/null 2>&1) || die "runc run $name failed"
	run_cmd runc_ checkpoint --image-path "$dir/img" --work-path "$dir/work" "$name"
}

# ghost_mode IMG MODE: set the mode of ghost file image IMG's header entry
# (crit does not encode ghost images: their content follows the entry).
ghost_mode() {
	python3 - "$1" "$2" <<-'PY' || die "setting the mode of $1"
		import struct, sys
		b = open(sys.argv[1], "rb").read()
		size = struct.unpack_from("<I", b, 8)[0]
		entry, rest = b[12:12 + size], b[12 + size:]
		def varint(b, i):
		    v = shift = 0
		    while True:
		        v |= (b[i] & 0x7F) << shift
		        shift += 7
		        i += 1
		        if b[i - 1] < 0x80:
		            return v, i
		def put(v):
		    out = bytearray()
		    while True:
		        out.append(v & 0x7F | (0x80 if v > 0x7F else 0))
		        v >>= 7
		        if not v:
		            return bytes(out)
		out, i = b"", 0
		while i < len(entry):
		    start = i
		    key, i = varint(entry, i)
		    if key & 7 == 0:
		        v, i = varint(entry, i)
		        out += put(key) + put(int(sys.argv[2], 8)) if key >> 3 == 3 else entry[start:i]
		    elif key & 7 == 2:
		        n, j = varint(entry, i)
		        i = j + n
		        out += entry[start:i]
		    else:
		        sys.exit("unexpected wire type %d" % (key & 7))
		open(sys.argv[1], "wb").write(b[:8] + struct.pack("<I", len(out)) + out + rest)
	PY
}

# refused NAME DIR WHAT...: runc restore of DIR/img as NAME fails before
# CRIU runs, the error naming each WHAT; no task of it runs.
refused() {
	local name=$1 dir=$2 w
	shift 2
	run_cmd 1 runc_ restore -d --image-path "$dir/img" --work-path "$dir/work" --bundle "$dir" "$name"
	for w in "$@"; do
		[[ $output == *"$w"* ]] || die "the error does not name '$w': $output"
	done
	[[ $output == *"refusing to restore"* ]] || die "not refused by runc's check: $output"
	[ ! -e "$dir/work/restore.log" ] || die "CRIU ran: $(tail -5 "$dir/work/restore.log")"
	run runc_ list -q
	[ -z "$output" ] || die "runc lists a container after a refused restore: $output"
}

# hostile_cgroups IMG DIR: the attack on cgroup.img shown against the
# earlier build: the first controller gets DIR/victim (mode 0777 asked) and
# a new DIR/newdir whose "property" ../victim/canary says pwned, each
# reached from the cgroup yard through "..".
hostile_cgroups() {
	craft "$1" "
up = '../' * 24
c = d['entries'][0]['controllers'][0]
perms = {'mode': 0o40777, 'uid': 0, 'gid': 0}
c.setdefault('dirs', []).append({'dir_name': up + '$2/victim'.lstrip('/'), 'dir_perms': perms})
c['dirs'].append({'dir_name': up + '$2/newdir'.lstrip('/'), 'dir_perms': perms, 'properties': [
    {'name': '../victim/canary', 'value': 'pwned', 'perms': {'mode': 0o100644, 'uid': 0, 'gid': 0}}]})
"
}

@test "runc restore: a cgroup.img whose directories and properties climb out of the cgroup yard is refused, the host untouched" {
	canaries
	local d=$BATS_TEST_TMPDIR/b
	dump h-cg "$d"
	hostile_cgroups "$d/img/cgroup.img" "$CANARY"
	refused h-cg "$d" "checkpoint image cgroup.img" "dir_name" ".."
	canaries_intact

	# A thread moved to another cgroup set (CRIU's cgroupd would move it).
	dump h-cg2 "$d/2"
	craft "$d/2/img/core-1.img" "d['entries'][0]['thread_core']['cg_set'] += 1"
	refused h-cg2 "$d/2" "is in cgroup set"
}

@test "runc restore: a mount image that mounts more than the config is refused" {
	canaries
	local d=$BATS_TEST_TMPDIR/b vol=$CANARY/victim
	# A host folder bound read-only at /data.
	local ro='.mounts += [{"destination": "/data", "type": "bind", "source": "'$vol'", "options": ["rbind", "ro"]}]'
	dump h-mnt "$d" "$ro"
	cp -a "$d/img" "$d/img.orig"
	# The bind comes back read-write.
	craft "$d/img/$(cd "$d/img" && ls mountpoints-*.img)" "
for m in d['entries']:
    if m['mountpoint'] == '/data':
        m['flags'] &= ~1
"
	refused h-mnt "$d" "mountpoints-" "mount " "at /data" "lacks ro, which the config sets"

	# A second proc (its /proc/sys writable) at /tmp.
	rm -rf "$d/img" && cp -a "$d/img.orig" "$d/img"
	craft "$d/img/$(cd "$d/img" && ls mountpoints-*.img)" "
proc = next(m for m in d['entries'] if m['mountpoint'] == '/proc')
extra = dict(proc, mnt_id=999, mountpoint='/tmp')
extra['parent_mnt_id'] = next(m['mnt_id'] for m in d['entries'] if m['mountpoint'] == '/')
d['entries'].append(extra)
"
	refused h-mnt "$d" "mount 999 at /tmp (fstype PROC, root /): the config mounts no such filesystem there"

	# No read-only /proc/sys, which the config asks for.
	rm -rf "$d/img" && cp -a "$d/img.orig" "$d/img"
	craft "$d/img/$(cd "$d/img" && ls mountpoints-*.img)" "
d['entries'] = [m for m in d['entries'] if m['mountpoint'] != '/proc/sys']
"
	refused h-mnt "$d" "does not mask /proc/sys"
	canaries_intact
}

@test "runc restore: an image that gives its task a user namespace of its own is refused" {
	local d=$BATS_TEST_TMPDIR/b
	dump h-userns "$d"
	craft "$d/img/ids-1.img" "d['entries'][0]['user_ns_id'] += 1000"
	refused h-userns "$d" "checkpoint image ids-1.img gives task 1 a user namespace of its own"
}

# What container engines grant by default: CAP_SETUID and CAP_SETGID too.
DEFAULT_CAPS='["CAP_CHOWN","CAP_DAC_OVERRIDE","CAP_FSETID","CAP_FOWNER","CAP_MKNOD","CAP_NET_RAW","CAP_SETGID",
	"CAP_SETUID","CAP_SETFCAP","CAP_SETPCAP","CAP_NET_BIND_SERVICE","CAP_SYS_CHROOT","CAP_KILL","CAP_AUDIT_WRITE"]'

@test "runc restore: a root task restored as user 1000 with no-new-privileges and the default capabilities is refused" {
	local d=$BATS_TEST_TMPDIR/b caps
	caps=".process.capabilities = {bounding: $DEFAULT_CAPS, effective: $DEFAULT_CAPS, permitted: $DEFAULT_CAPS}"
	dump h-user "$d" "$caps"
	# After its exec, such a process holds no capability: none is ambient.
	jq '.process.user = {"uid": 1000, "gid": 1000} | .process.noNewPrivileges = true' "$d/config.json" >"$d/c" &&
		mv "$d/c" "$d/config.json"
	refused h-user "$d" "uid is 0, the config's user is 1000"
}

@test "runc restore: a socket bound to port 80 is refused where the config neither grants CAP_NET_BIND_SERVICE nor lowers the port range" {
	local d=$BATS_TEST_TMPDIR/b
	# Bound without the capability: this config lets any user bind port 80.
	dump h-port "$d" '.process.args = ["/bin/busybox", "nc", "-l", "-p", "80"]
		| .process.capabilities |= with_entries(.value -= ["CAP_NET_BIND_SERVICE"])
		| .linux.sysctl = {"net.ipv4.ip_unprivileged_port_start": "0"}'
	jq 'del(.linux.sysctl)' "$d/config.json" >"$d/c" && mv "$d/c" "$d/config.json"
	refused h-port "$d" "checkpoint image files.img" "isk.src_port 80" "CAP_NET_BIND_SERVICE"
}

@test "runc restore: a container of its own cgroup namespace keeps it, rooted at its cgroups (CRIU in cgroup mode ignore)" {
	local d=$BATS_TEST_TMPDIR/b
	dump h-cgns "$d" '.linux.namespaces += [{"type": "cgroup"}]'
	run_cmd runc_ restore -d --image-path "$d/img" --work-path "$d/work" --bundle "$d" h-cgns
	run_cmd runc_ exec h-cgns /bin/busybox cat /proc/1/cgroup
	# Each hierarchy's path is the namespace's root, as after a start.
	! grep -v ':/$' <<<"$output" || die "the restored task sees cgroup paths beyond its own: $output"
	local pid
	pid=$(runc_ state h-cgns | jq -r .pid)
	[ "$(readlink "/proc/$pid/ns/cgroup")" != "$(readlink /proc/self/ns/cgroup)" ] ||
		die "the restored task is in the host's cgroup namespace"
}

# The loop of a bundle whose shell keeps a deleted /dev/shm file open (a
# ghost file, as NCCL's are) and a child that outlives each iteration.
GHOST_LOOP='.process.args = ["/bin/sh", "-c", "echo hi >/dev/shm/x; exec 4</dev/shm/x; rm /dev/shm/x; sleep 1000 & while :; do sleep 1; done"]'

# up DIR: DIR named from a container's /dev/shm with "..", up to the host's /.
up() { printf '/dev/shm/%s%s' "$(printf '../%.0s' {1..24})" "${1#/}"; }

@test "runc restore: ghost and link-remap files named out of the container are refused, the host untouched" {
	canaries
	local d=$BATS_TEST_TMPDIR/b
	dump h-ghost "$d" "$GHOST_LOOP"
	cp -a "$d/img" "$d/img.orig"

	# The ghost file a folder, named up to the canary folder, mode 0777:
	# stock CRIU made it 0777 before it entered the container.
	craft "$d/img/files.img" "
r = next(e['reg'] for e in d['entries'] if e.get('reg', {}).get('name') == '/dev/shm/x')
r['name'] = '$(up "$CANARY/victim")'
"
	ghost_mode "$d/img/$(cd "$d/img" && ls ghost-file-*.img)" 40777
	refused h-ghost "$d" "checkpoint image files.img" "not a clean absolute path"
	canaries_intact

	# The same name through a symlink that the rootfs holds.
	rm -rf "$d/img" && cp -a "$d/img.orig" "$d/img"
	ln -s "$CANARY" "$d/rootfs/escape"
	craft "$d/img/files.img" "
r = next(e['reg'] for e in d['entries'] if e.get('reg', {}).get('name') == '/dev/shm/x')
root = min(e['reg']['mnt_id'] for e in d['entries'] if e.get('reg', {}).get('name') == '/')
r['name'], r['mnt_id'] = '/escape/victim', root
"
	refused h-ghost "$d" "checkpoint image remap-fpath.img" "(/escape/victim)" "which the rootfs reaches through a symlink"
	canaries_intact

	# A link remap alone: the file linked to the canary's name and
	# unlinked after the restore (stock CRIU deleted it and restored).
	rm -rf "$d/img" && cp -a "$d/img.orig" "$d/img"
	craft "$d/img/files.img" "
e = next(e for e in d['entries'] if e.get('reg', {}).get('name') == '/dev/shm/x')
link = json.loads(json.dumps(e))
link['id'] = link['reg']['id'] = 9999
link['reg']['name'] = '$(up "$CANARY/victim/canary")'
d['entries'].append(link)
"
	craft "$d/img/remap-fpath.img" "d['entries'][0].update(remap_id=9999, remap_type='LINKED')"
	refused h-ghost "$d" "checkpoint image files.img" "file 9999" "not a clean absolute path"
	canaries_intact
}

@test "runc restore: a child task in a mount namespace of its own is refused" {
	local d=$BATS_TEST_TMPDIR/b child
	dump h-childns "$d" "$GHOST_LOOP"
	child=$(cd "$d/img" && "$BIN/crit" show pstree.img | jq '.entries[1].pid')
	[ -n "$child" ] && [ "$child" != null ] || die "the dump holds no child task"
	# Its own mount namespace: CRIU would mount what mountpoints-ID.img
	# lists for it, a writable /proc/sys among them.
	craft "$d/img/ids-$child.img" "d['entries'][0]['mnt_ns_id'] += 1000"
	refused h-childns "$d" "checkpoint image ids-$child.img puts task $child in a mnt namespace of its own"
}

@test "runc restore: a unix socket connected to a peer that no task holds is refused, the host's listener never reached" {
	local d=$BATS_TEST_TMPDIR/b
	mkdir -p "$d/vol"
	dump h-unix "$d" '.process.args = ["/bin/busybox", "syslogd", "-n", "-O", "/tmp/log"]
		| .mounts += [{"destination": "/vol", "type": "bind", "source": "'"$d/vol"'", "options": ["rbind", "rw"]}]'
	# A host listener in the folder the config binds, which records the
	# credentials of whoever connects.
	python3 -c '
import os, socket, struct, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(sys.argv[1]); s.listen(); open(sys.argv[2], "w").close()
while True:
    c, _ = s.accept()
    pid, uid, gid = struct.unpack("3i", c.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    open(sys.argv[2], "a").write("uid %d\n" % uid)
' "$d/vol/host.sock" "$d/peers" 3>&- &
	echo $! >"$BATS_TEST_TMPDIR/listener.pid"
	for _ in $(seq 50); do [ -e "$d/peers" ] && break; sleep 0.1; done
	# syslogd's /dev/log socket made a stream socket connected to a
	# listener at /vol/host.sock that no task holds.
	craft "$d/img/files.img" "
import base64
sk = next(e for e in d['entries'] if e['type'] == 'UNIXSK')
peer = json.loads(json.dumps(sk))
peer['id'] = peer['usk']['id'] = 9999
peer['usk'].update(ino=99999, name=base64.b64encode(b'/vol/host.sock').decode(), state=10, type=1, peer=0)
sk['usk'].update(name='', state=1, type=1, peer=99999)
d['entries'].append(peer)
"
	refused h-unix "$d" "checkpoint image files.img: unix socket" "has peer 9999 (inode 99999" "which no task of the checkpoint holds"
	is "$(cat "$d/peers")" "" "the connections the host's listener saw"
}

# dump_piped NAME DIR [JQ]: dump, with the task's stdout and stderr a pipe,
# as a shim gives them: runc inherits such stdio into the restore.
dump_piped() {
	local name=$1 dir=$2 i
	bundle "$dir" "${3:-.}"
	(cd "$dir" && runc_ run -d "$name" </dev/null 2>&1 | cat >/dev/null) &
	for i in $(seq 50); do
		[ "$(runc_ state "$name" 2>/dev/null | jq -r .status)" = running ] && break
		sleep 0.1
	done
	run_cmd runc_ checkpoint --image-path "$dir/img" --work-path "$dir/work" "$name"
}

# restore_to NAME DIR [FLAGS...]: runc restore of DIR/img as NAME, detached,
# its output in DIR/restore.out (a restored task holds whatever stdio the
# restore had); at most 60 s, after which status is 124 (or 137 where
# runc ignored the TERM).
restore_to() {
	local name=$1 dir=$2
	shift 2
	status=0
	timeout -k 5 60 "$BIN/runc" --root "$BATS_FILE_TMPDIR/runc" restore -d "$@" --image-path "$dir/img" \
		--work-path "$dir/work" --bundle "$dir" "$name" </dev/null >"$dir/restore.out" 2>&1 || status=$?
	output=$(cat "$dir/restore.out")
	echo "restore of $name: exit $status: $output" >&2
}

# The attack on runc's own control channel: descriptors.json, runc's list of
# the task's stdio, chose the descriptors CRIU hands the restored tasks;
# index 3 is CRIU's end of runc's RPC socket. Today's runc takes the stdio
# from the images and never sends fd 3.
@test "runc restore: a descriptors.json that names CRIU's RPC socket for a file hands the restored task nothing of runc's" {
	local d=$BATS_TEST_TMPDIR/b pid
	dump_piped h-rpc "$d"
	root_file "$d/img" '/pipe:[777]' 50
	jq -c '. + ["pipe:[777]"]' "$d/img/descriptors.json" >"$d/j" && mv "$d/j" "$d/img/descriptors.json"
	touch "$d/rootfs/pipe:[777]"
	restore_to h-rpc "$d"
	[ "$status" -eq 0 ] || die "the restore did not end with the container restored (exit $status; 124: it hung, the task holding runc's socket): $output"
	pid=$(runc_ state h-rpc | jq -r .pid)
	is "$(readlink "/proc/$pid/fd/50")" "/pipe:[777]" "the restored task's fd 50, the file of the images"
	run ls -l "/proc/$pid/fd"
	[[ $output != *socket:* ]] || die "the restored task holds a socket it did not have: $output"
}

@test "runc restore: a regular file named as the key of the stdio pipe runc inherits is refused" {
	local d=$BATS_TEST_TMPDIR/b key
	dump_piped h-key "$d"
	key=$(python3 -c 'import json, sys; print([k for k in json.load(open(sys.argv[1])) if k.startswith("pipe:")][0])' "$d/img/descriptors.json")
	root_file "$d/img" "/$key" 50
	restore_to h-key "$d"
	is "$status" 1 "runc restore's exit status"
	[[ $output == *"refusing to restore: checkpoint image files.img: file 9999 (a regular file) is named "*"/$key"*", the key of a descriptor runc hands CRIU"* ]] ||
		die "the error does not name the file and the key: $output"
	[ ! -e "$d/work/restore.log" ] || die "CRIU ran: $(tail -5 "$d/work/restore.log")"
	run runc_ list -q
	[ -z "$output" ] || die "runc lists a container after a refused restore: $output"
}

# CRIU takes a lease as the file's owner (set_file_lease): restored as uid
# 1000 without CAP_LEASE, the task would hold a lease on a root-owned host
# file, and the host's writers of it would wait up to lease-break-time.
@test "runc restore --file-locks: a lease on a root-owned file the config binds, for a task of uid 1000 without CAP_LEASE, is refused" {
	local d=$BATS_TEST_TMPDIR/b pid
	mkdir -p "$BATS_TEST_TMPDIR/host"
	echo weights >"$BATS_TEST_TMPDIR/host/file"
	# CRIU cannot dump a process of another user here (its rlimits are not
	# root's to read): dump it as root, then make the images those of uid
	# 1000 with no capabilities, as a dump of such a process writes them.
	dump h-lease "$d" '.process.args = ["/bin/sh", "-c", "exec 5</data/file; while :; do sleep 1; done"]
		| .mounts += [{"destination": "/data", "type": "bind", "source": "'"$BATS_TEST_TMPDIR/host"'", "options": ["rbind", "ro"]}]'
	pid=$(python3 -c 'import json, subprocess, sys
print(json.loads(subprocess.check_output([sys.argv[1], "decode", "-i", sys.argv[2]]))["entries"][0]["pid"])' "$BIN/crit" "$d/img/pstree.img")
	local core
	for core in "$d"/img/core-*.img; do
		craft "$core" "
c = d['entries'][0]['thread_core']['creds']
for k in ('uid', 'gid', 'euid', 'egid', 'suid', 'sgid', 'fsuid', 'fsgid'):
    c[k] = 1000
c['cap_prm'] = c['cap_eff'] = c['cap_inh'] = [0, 0]
"
	done
	jq '.process.user = {"uid": 1000, "gid": 1000}' "$d/config.json" >"$d/c" && mv "$d/c" "$d/config.json"
	printf '{"magic": "FILE_LOCKS", "entries": [{"flag": 8, "type": 0, "pid": %d, "fd": 5, "start": 0, "len": 0}]}' "$pid" >"$d/locks.json"
	"$BIN/crit" encode -i "$d/locks.json" -o "$d/img/filelocks.img" || die "crit encode filelocks.img"
	restore_to h-lease "$d" --file-locks
	local rc=$status
	run cat /proc/locks
	[[ $output != *LEASE* ]] || die "a lease is held after the restore: $output"
	is "$rc" 1 "runc restore's exit status (the restore was refused)"
	local want="checkpoint image filelocks.img: entry 0 (flag 8, type 0, pid $pid, fd 5) is a lease on file"
	[[ $(cat "$d/restore.out") == *"$want"*"(/data/file), owned by uid 0: the config's user 1000 could not take it without CAP_LEASE"* ]] ||
		die "the error does not name the entry, the file and its owner: $(cat "$d/restore.out")"
	[ ! -e "$d/work/restore.log" ] || die "CRIU ran: $(tail -5 "$d/work/restore.log")"
}

# CRIU's statistics and logs in the image folder are CRIU's to write, never
# to read on restore: their content changes nothing.
@test "runc restore: CRIU's statistics and logs in the image folder, whatever they hold, change nothing of the restore" {
	local d=$BATS_TEST_TMPDIR/b f pid
	dump_piped h-stats "$d"
	for f in stats-dump stats-restore dump.log restore.log; do
		head -c 65536 /dev/urandom >"$d/img/$f"
		printf 'HOSTILE-%s' "$f" >>"$d/img/$f"
	done
	restore_to h-stats "$d"
	is "$status" 0 "runc restore's exit status"
	pid=$(runc_ state h-stats | jq -r .pid)
	[ -d "/proc/$pid" ] || die "the restored task is not running"
	! grep -q HOSTILE "$d/work/restore.log" || die "CRIU's log took content of the image's: $(grep -a HOSTILE "$d/work/restore.log")"
}

@test "runc restore: an image file runc does not check, or a symlink among the images, is refused" {
	canaries
	local d=$BATS_TEST_TMPDIR/b
	dump h-files "$d"
	cp "$d/img/pstree.img" "$d/img/evil-1.img"
	refused h-files "$d" "checkpoint image evil-1.img is no image that runc checks"
	rm "$d/img/evil-1.img"
	# CRIU writes its statistics through whatever stats-restore is.
	ln -s "$CANARY/victim/canary" "$d/img/stats-restore"
	refused h-files "$d" "checkpoint image stats-restore is not a regular file"
	canaries_intact
}

@test "runc restore: a tmpfs archive with a device node the config does not give is refused" {
	local d=$BATS_TEST_TMPDIR/b shm
	dump h-tmpfs "$d" '.process.capabilities |= with_entries(.value -= ["CAP_MKNOD"])'
	# /dev/shm's archive gains the host's disk as a block device.
	shm=$(cd "$d/img" && "$BIN/crit" show "$(ls mountpoints-*.img)" | jq '.entries[] | select(.mountpoint == "/dev/shm") | .root_dev')
	[ -f "$d/img/tmpfs-dev-$shm.tar.gz.img" ] || die "no archive of /dev/shm (device $shm) in the dump"
	mkdir "$d/shm" && tar -xzf "$d/img/tmpfs-dev-$shm.tar.gz.img" -C "$d/shm"
	mknod "$d/shm/sda" b 8 0
	tar -czf "$d/img/tmpfs-dev-$shm.tar.gz.img" --numeric-owner -C "$d/shm" .
	refused h-tmpfs "$d" "checkpoint image tmpfs-dev-$shm.tar.gz.img (the tmpfs at /dev/shm)" "sda" "is device b 8:0" "CAP_MKNOD"
}

# warm_escape DIR WHERE: dump a busybox bundle in DIR with a host folder
# bound at /vol, put a link to a host file, evicted from the page cache, at
# WHERE in the container (/escape in the rootfs, /vol/escape in the bound
# folder), and rename the mapped busybox in files.img to the link, on the
# link's mount and with the host file's size: what a read-ahead that
# followed the link from the host side would read.
warm_escape() {
	local d=$1 where=$2 secret=$1/secret
	mkdir -p "$d/vol"
	dump "h-warm$RANDOM" "$d" '.mounts += [{"destination": "/vol", "type": "bind", "source": "'"$d/vol"'", "options": ["rbind", "rw"]}]'
	head -c 4M /dev/urandom >"$secret" && sync "$secret"
	python3 -c 'import os, sys; fd = os.open(sys.argv[1], os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' "$secret"
	is "$(resident "$secret")" 0 "the host file's cached pages before the restore"
	case $where in
	/vol/*) ln -s "$secret" "$d/vol/${where#/vol/}" ;;
	*) ln -s "$secret" "$d/rootfs/$where" ;;
	esac
	local mnt
	mnt=$(cd "$d/img" && "$BIN/crit" show "$(ls mountpoints-*.img)" |
		jq --arg m "$(dirname "$where")" '.entries[] | select(.mountpoint == $m) | .mnt_id')
	[ -n "$mnt" ] || die "no mount at $(dirname "$where") in the image"
	craft "$d/img/files.img" "
r = next(e['reg'] for e in d['entries'] if e.get('reg', {}).get('name') == '/bin/busybox')
r['name'], r['size'], r['mnt_id'] = '$where', $(stat -c %s "$secret"), $mnt
"
}

# resident FILE: how many of FILE's pages are in the page cache.
resident() { fincore --raw --noheadings --output PAGES "$1"; }

@test "runc restore: CRIU's read-ahead of mapped files resolves a name that is a symlink out of its folder inside it, and reads nothing of the host's" {
	command -v fincore >/dev/null || skip "fincore is not installed (util-linux)"
	local d where
	for where in /escape /vol/escape; do
		d=$BATS_TEST_TMPDIR/b${where//\//-}
		warm_escape "$d" "$where"
		run_cmd '?' runc_ restore -d --image-path "$d/img" --work-path "$d/work" --bundle "$d" "h-warm${where//\//-}"
		# The link was the one mapped file, and it was not read.
		grep -q "warm: Read ahead 0 of 1 mapped files (0 MiB) under 1 mount(s)" "$d/work/restore.log" ||
			die "CRIU's read-ahead did not pass over the link: $(grep -i warm "$d/work/restore.log")"
		is "$(resident "$d/secret")" 0 "the host file's cached pages after the restore ($where)"
	done
}

@test "nerdctl run: a checkpoint image whose cgroup.img climbs out of the cgroup yard is refused, the host untouched" {
	canaries
	local port image=rekindle.local/ckpt:hostile-cgroups dir=$BATS_TEST_TMPDIR/x
	port=$(free_port)
	start_engine src "$port"
	ocicp create -q --output "oci-archive:$BATS_TEST_TMPDIR/good.tar" src rekindle.local/ckpt:good
	run_nerdctl rm -f src

	# The checkpoint layer as it would come from a registry, its cgroup.img
	# rewritten.
	mkdir -p "$dir"
	oci_python - "$BATS_TEST_TMPDIR/good.tar" "$dir/cgroup.img" extract <<-'PY'
		import sys, tarfile, io
		import oci_tar
		index, a = oci_tar.read(sys.argv[1])
		man = a.get_json(index["manifests"][0]["digest"])
		layer = tarfile.open(fileobj=io.BytesIO(a.get(man["layers"][0]["digest"])))
		open(sys.argv[2], "wb").write(layer.extractfile("checkpoint/cgroup.img").read())
	PY
	hostile_cgroups "$dir/cgroup.img" "$CANARY"
	oci_python - "$BATS_TEST_TMPDIR/good.tar" "$dir/cgroup.img" "$dir/hostile.tar" "$image" <<-'PY'
		import sys
		import oci_tar
		src, img, dst, name = sys.argv[1:5]
		hostile = open(img, "rb").read()
		oci_tar.edit_layer(src, dst, name, lambda n, data: hostile if n == "checkpoint/cgroup.img" else data)
	PY
	run_nerdctl load -i "$dir/hostile.tar"

	run_nerdctl 1 run -d --name h1 -p "127.0.0.1:$(free_port):30000" "$image"
	[[ $output == *"refusing to restore: checkpoint image cgroup.img"*"dir_name"* ]] ||
		die "the error does not name cgroup.img and dir_name: $output"
	run_ctr task ls
	! grep -q RUNNING <<<"$output" || die "a task runs after a refused restore: $output"
	canaries_intact
}

@test "nerdctl run: a checkpoint image whose descriptors.json names CRIU's RPC socket for a file restores with the file, runc's socket nowhere" {
	local port image=rekindle.local/ckpt:hostile-descriptors dir=$BATS_TEST_TMPDIR/x pid
	port=$(free_port)
	start_engine src "$port"
	ocicp create -q --output "oci-archive:$BATS_TEST_TMPDIR/good.tar" src rekindle.local/ckpt:good
	run_nerdctl rm -f src

	# The checkpoint layer as it would come from a registry: the root task
	# holds a regular file "/pipe:[777]" (in the rootfs diff) at fd 50, and
	# descriptors.json names that key at index 3, CRIU's RPC socket.
	mkdir -p "$dir/img"
	oci_python - "$BATS_TEST_TMPDIR/good.tar" "$dir/img" <<-'PY' || die "extracting the checkpoint's images"
		import io, os, sys, tarfile
		import oci_tar
		index, a = oci_tar.read(sys.argv[1])
		man = a.get_json(index["manifests"][0]["digest"])
		layer = tarfile.open(fileobj=io.BytesIO(a.get(man["layers"][0]["digest"])))
		for m in layer.getmembers():
		    n = m.name.split("/")[-1]
		    if m.isfile() and m.name.startswith("checkpoint/") and not n.startswith("pages-"):
		        open(os.path.join(sys.argv[2], n), "wb").write(layer.extractfile(m).read())
	PY
	cp -a "$dir/img" "$dir/orig"
	root_file "$dir/img" '/pipe:[777]' 50
	jq -c '. + ["pipe:[777]"]' "$dir/img/descriptors.json" >"$dir/j" && mv "$dir/j" "$dir/img/descriptors.json"
	oci_python - "$BATS_TEST_TMPDIR/good.tar" "$dir" "$dir/hostile.tar" "$image" <<-'PY' || die "writing the crafted image"
		import filecmp, io, os, sys, tarfile
		import oci_tar
		src, d, dst, name = sys.argv[1:5]
		def edit(n, data):
		    base = n.split("/")[-1]
		    if n.startswith("checkpoint/") and os.path.exists(os.path.join(d, "img", base)) and \
		            not filecmp.cmp(os.path.join(d, "img", base), os.path.join(d, "orig", base), shallow=False):
		        return open(os.path.join(d, "img", base), "rb").read()
		    if n == "rootfs-diff.tar":
		        old = tarfile.open(fileobj=io.BytesIO(data))
		        out = io.BytesIO()
		        with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as t:
		            for m in old.getmembers():
		                t.addfile(m, old.extractfile(m) if m.isfile() else None)
		            t.addfile(tarfile.TarInfo("pipe:[777]"), io.BytesIO(b""))
		        return out.getvalue()
		    return data
		oci_tar.edit_layer(src, dst, name, edit)
	PY
	run_nerdctl load -i "$dir/hostile.tar"

	port=$(free_port)
	run_cmd '?' timeout -k 5 180 "$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" run -d --name h1 -p "127.0.0.1:$port:30000" "$image"
	is "$status" 0 "nerdctl run's exit status (124 or 137: it hung, the task holding runc's socket)"
	wait_healthy "$port"
	run_nerdctl inspect -f '{{.State.Pid}}' h1
	pid=$output
	is "$(readlink "/proc/$pid/fd/50")" "/pipe:[777]" "the restored engine's fd 50, the file of the images"
	! pgrep -f "runc.*restore.*h1" >/dev/null || die "runc's restore is still running"
}

@test "nerdctl run: a checkpoint image whose filelocks.img holds a lease on a root-owned bound file, restored as uid 1000 without CAP_LEASE, is refused" {
	local port image=rekindle.local/ckpt:hostile-lease dir=$BATS_TEST_TMPDIR/x host=$BATS_TEST_TMPDIR/host core pid
	mkdir -p "$host" "$dir/img"
	echo weights >"$host/file"
	port=$(free_port)
	# Without capabilities, so that the restore's seccomp profile (which
	# follows the capabilities) is the checkpoint's.
	start_engine src "$port" --cap-drop ALL -v "$host:/data:ro"
	ocicp create -q --output "oci-archive:$BATS_TEST_TMPDIR/good.tar" src rekindle.local/ckpt:good
	run_nerdctl rm -f src

	# The checkpoint as a registry could serve it: its tasks those of uid
	# 1000, its root task holding /data/file at fd 50
	# with a read lease on it.
	oci_python - "$BATS_TEST_TMPDIR/good.tar" "$dir/img" <<-'PY' || die "extracting the checkpoint's images"
		import io, os, sys, tarfile
		import oci_tar
		index, a = oci_tar.read(sys.argv[1])
		man = a.get_json(index["manifests"][0]["digest"])
		layer = tarfile.open(fileobj=io.BytesIO(a.get(man["layers"][0]["digest"])))
		for m in layer.getmembers():
		    n = m.name.split("/")[-1]
		    if m.isfile() and m.name.startswith("checkpoint/") and not n.startswith("pages-"):
		        open(os.path.join(sys.argv[2], n), "wb").write(layer.extractfile(m).read())
	PY
	root_file "$dir/img" /data/file 50 0
	for core in "$dir"/img/core-*.img; do
		craft "$core" "
c = d['entries'][0]['thread_core']['creds']
for k in ('uid', 'gid', 'euid', 'egid', 'suid', 'sgid', 'fsuid', 'fsgid'):
    c[k] = 1000
c['cap_prm'] = c['cap_eff'] = c['cap_inh'] = [0, 0]
c['groups'], c['cap_bnd'] = [], [0, 0]
"
	done
	pid=$(python3 -c 'import json, subprocess, sys
print(json.loads(subprocess.check_output([sys.argv[1], "decode", "-i", sys.argv[2]]))["entries"][0]["pid"])' "$BIN/crit" "$dir/img/pstree.img")
	printf '{"magic": "FILE_LOCKS", "entries": [{"flag": 8, "type": 0, "pid": %d, "fd": 50, "start": 0, "len": 0}]}' "$pid" >"$dir/locks.json"
	"$BIN/crit" encode -i "$dir/locks.json" -o "$dir/img/filelocks.img" || die "crit encode filelocks.img"
	oci_python - "$BATS_TEST_TMPDIR/good.tar" "$dir/img" "$dir/hostile.tar" "$image" <<-'PY' || die "writing the crafted image"
		import os, sys
		import oci_tar
		src, img, dst, name = sys.argv[1:5]
		def edit(n, data):
		    p = os.path.join(img, n.split("/")[-1])
		    return open(p, "rb").read() if n.startswith("checkpoint/") and os.path.exists(p) else data
		oci_tar.edit_layer(src, dst, name, edit, add={"checkpoint/filelocks.img": open(os.path.join(img, "filelocks.img"), "rb").read()})
	PY
	run_nerdctl load -i "$dir/hostile.tar"

	run_nerdctl 1 run -d --name h1 --user 1000:1000 --cap-drop ALL -v "$host:/data:ro" -p "127.0.0.1:$(free_port):30000" "$image"
	[[ $output == *"refusing to restore: checkpoint image filelocks.img: entry 0"*"is a lease on file 9999 (/data/file), owned by uid 0"* ]] ||
		die "the error does not name the entry, the file and its owner: $output"
	run cat /proc/locks
	[[ $output != *LEASE* ]] || die "a lease is held after the refused restore: $output"
	run_ctr task ls
	! grep -q RUNNING <<<"$output" || die "a task runs after a refused restore: $output"
}

@test "nerdctl run: a checkpoint image whose compressed pages image claims less than a frame holds is refused before CRIU, naming the file and frame" {
	local port image=rekindle.local/ckpt:hostile-pages dir=$BATS_TEST_TMPDIR/x
	port=$(free_port)
	start_engine src "$port"
	ocicp create -q --compression pages --output "oci-archive:$BATS_TEST_TMPDIR/good.tar" src rekindle.local/ckpt:good
	run_nerdctl rm -f src

	# The layer as it would come from a registry: the first frame of a
	# pages image said to hold a page less than it decodes to, so that a
	# decoder trusting the table would write past it.
	mkdir -p "$dir"
	local edited
	edited=$(oci_python - "$BATS_TEST_TMPDIR/good.tar" "$dir/hostile.tar" "$image" <<-'PY'
		import struct, sys
		import oci_tar
		src, dst, name = sys.argv[1:4]
		edited = []
		def edit(n, data):
		    if edited or not (n.startswith("checkpoint/pages-") and n.endswith(".img.zst")):
		        return data
		    frames = struct.unpack_from("<I", data, len(data) - 9)[0]
		    if frames == 0:
		        return data
		    entry = len(data) - 9 - 8 * frames  # the first frame's sizes
		    size, content = struct.unpack_from("<II", data, entry)
		    edited.append(n)
		    return data[:entry] + struct.pack("<II", size, content - 4096) + data[entry + 8:]
		oci_tar.edit_layer(src, dst, name, edit)
		assert edited, "no compressed pages image with a frame"
		print(edited[0].split("/")[-1])
	PY
	) || die "crafting the image failed"
	run_nerdctl load -i "$dir/hostile.tar"

	run_nerdctl 1 run -d --name h1 -p "127.0.0.1:$(free_port):30000" "$image"
	[[ $output == *"$edited: frame 0: decodes to more than"* ]] || die "the error does not name $edited and its frame: $output"
	run_ctr task ls
	! grep -q RUNNING <<<"$output" || die "a task runs after a refused restore: $output"
	! grep -q criu-pages /proc/self/mountinfo || die "the decoded pages are still mounted: $(grep criu-pages /proc/self/mountinfo)"
}
