#!/usr/bin/env bats
# A pod's /dev/shm travels in its checkpoint. CRI binds /dev/shm into a
# container from its sandbox (a tmpfs under containerd's state dir), outside
# the container, so CRIU dumps none of its files; an engine that holds one
# open under a name it has since removed (glibc's sem_open links a
# temporary name and unlinks it: vLLM's semaphores) is dumped with a
# link_remap.N beside it that the restore links back. oci-checkpoint create
# writes the sandbox's /dev/shm as devshm-checkpoint.tar, and containerd's
# CRI restore unpacks it into the new sandbox's before runc restores
# (containerd-patches: cri-restore-a-checkpoint-s-dev-shm-into-the-new-sand,
# restore/devshm). Without them the restore fails with CRIU's
#   Can't link dev/shm/link_remap.N -> dev/shm/sem.XXXXXX: No such file or directory

load helpers
load cri
load kube

setup_file() {
	need_built crictl
	need_kube
	# The source pod's own CRIU configuration, through runc's
	# org.criu.config annotation: link-remap, which a GPU host sets in
	# /etc/criu/runc.conf for vLLM (tests/gpu/prepare.sh); this host's
	# /etc is not the test's to change.
	export SHM_CRIU_CONF=$BATS_FILE_TMPDIR/criu-link-remap.conf
	echo link-remap >"$SHM_CRIU_CONF"
	export CONTAINERD_POD_ANNOTATIONS='["org.criu.config"]'
	cri_up
	kube_up
	export SHM_CKPT=rekindle.local/engine:shm
}

teardown_file() {
	kube_down
	stack_down
}

# The engine, holding in /dev/shm a named POSIX semaphore mapped under its
# temporary name (as vLLM's multiprocessing semaphores are) and a file
# written under a temporary name, linked to its real one and the temporary
# name removed, its descriptor kept.
SHM_ENGINE='
import _multiprocessing, os, runpy, sys
sem = _multiprocessing.SemLock(1, 1, 1, "/rekindle-sem", False)
fd = os.open("/dev/shm/data.tmp", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o640)
os.write(fd, b"rekindle shm\n")
os.link("/dev/shm/data.tmp", "/dev/shm/data")
os.unlink("/dev/shm/data.tmp")
sys.argv = ["/engine/server.py"]
runpy.run_path("/engine/server.py", run_name="__main__")
'

# What a pod's engine (pid PID in its container) holds in /dev/shm: the
# semaphore's mapping is the file of its name, and the held file is
# /dev/shm/data; prints that file's content as read through the descriptor.
SHM_CHECK='
import os, sys
pid = sys.argv[1]
maps = [l.split() for l in open(f"/proc/{pid}/maps") if " /dev/shm/sem." in l]
assert maps, "no semaphore of /dev/shm mapped"
assert maps[0][-1] == "(deleted)", f"the semaphore is mapped by its name: {maps[0]}"
assert int(maps[0][4]) == os.stat("/dev/shm/sem.rekindle-sem").st_ino, "the semaphore mapped is not the file of its name"
fds = {os.readlink(f"/proc/{pid}/fd/{n}"): n for n in os.listdir(f"/proc/{pid}/fd")}
held = f"/proc/{pid}/fd/" + fds["/dev/shm/data.tmp (deleted)"]
assert os.stat(held).st_ino == os.stat("/dev/shm/data").st_ino, "the held file is not /dev/shm/data"
print(open(held).read().strip(), oct(os.stat(held).st_mode & 0o7777))
'

shm_check() {
	kube_exec "$1" python3 -c "$SHM_CHECK" "$2"
}

@test "kubelet: an engine holding /dev/shm files under removed names (a POSIX semaphore) restores in a new pod, its files with it" {
	kubectl apply -f - >&2 <<-EOF
		apiVersion: apps/v1
		kind: Deployment
		metadata: {name: shm-src}
		spec:
		  replicas: 1
		  selector: {matchLabels: {app: shm-src}}
		  template:
		    metadata: {labels: {app: shm-src}, annotations: {org.criu.config: $SHM_CRIU_CONF}}
		    spec:
		      automountServiceAccountToken: false
		      terminationGracePeriodSeconds: 2
		      containers:
		      - name: engine
		        image: $ENGINE_IMAGE
		        imagePullPolicy: Never
		        command: [python3, -u, -c, $(jq -Rs . <<<"$SHM_ENGINE")]
		        env: [{name: ENGINE_PORT, value: "30000"}, {name: ENGINE_HOST, value: 0.0.0.0}]
		        readinessProbe:
		          httpGet: {path: /health, port: 30000}
		          periodSeconds: 1
		          failureThreshold: 1
	EOF
	wait_for "Deployment shm-src ready" 120 ready_replicas shm-src 1
	local pod
	pod=$(pods_of shm-src)
	record_pod "$pod"
	run_cmd shm_check "$pod" "$E_PID"
	is "$output" "rekindle shm 0o640" "the held file before the checkpoint"

	local tar=$BATS_FILE_TMPDIR/shm.tar
	run_cmd "$BIN/oci-checkpoint" -n k8s.io create --port 30000 --output "oci-archive:$tar" "default/$pod/engine" "$SHM_CKPT"
	local created=$output
	run_cmd k8s_ctr images import "$tar"
	cp "$tar" "$BATS_FILE_TMPDIR/good.tar"
	rm -f "$tar"
	kube_do delete deployment shm-src --wait
	wait_for "the pods of shm-src to go" 60 no_pods shm-src

	deployment shm "$SHM_CKPT" 1
	pod=
	wait_for "a pod of shm" 30 has_pods shm
	pod=$(pods_of shm)
	ready_or_failed() {
		ready_replicas shm 1 || events_of "$pod" | grep -q 'link_remap'
	}
	wait_for "Deployment shm ready" 120 ready_or_failed
	if ! ready_replicas shm 1; then
		events_of "$pod" | sed 's/^/#   /' >&2
		die "the restore failed on the engine's /dev/shm files"
	fi
	assert_restored "$pod"
	run_cmd shm_check "$pod" "$E_PID"
	is "$output" "rekindle shm 0o640" "the held file after the restore"

	# Killed, the engine is restored again in the same sandbox, whose
	# /dev/shm holds the files the first restore left: they are replaced.
	local id pid
	id=$(container_id "$pod")
	pid=$(cri inspect "$id" | jq -r .info.pid)
	kill -KILL "$pid"
	restarted() { [ "$(kubectl get pod "$pod" -o jsonpath='{.status.containerStatuses[0].restartCount}')" = 1 ]; }
	wait_for "kubelet to restart $pod's engine" 120 restarted
	wait_for "Deployment shm ready again" 120 ready_replicas shm 1
	assert_restored "$pod"
	run_cmd shm_check "$pod" "$E_PID"
	is "$output" "rekindle shm 0o640" "the held file after the second restore in the same sandbox"
	kube_do delete deployment shm --wait
	wait_for "the pods of shm to go" 60 no_pods shm

	output=$created
	tar=$BATS_FILE_TMPDIR/good.tar
	[[ $output == *"/dev/shm of the pod: "*" bytes from "*"/sandboxes/"*"/shm"* ]] ||
		die "oci-checkpoint create did not write the pod's /dev/shm"
	# The archive holds the semaphore's name and CRIU's link_remap of it,
	# one file, and the held file's link_remap and name.
	run_cmd oci_python - "$tar" <<-'PY'
		import io, sys, tarfile
		import oci_tar
		index, a = oci_tar.read(sys.argv[1])
		man = a.get_json(index["manifests"][0]["digest"])
		layer = tarfile.open(fileobj=io.BytesIO(a.get(man["layers"][0]["digest"])))
		shm = tarfile.open(fileobj=layer.extractfile("devshm-checkpoint.tar"))
		for m in shm.getmembers():
		    print(m.name, "link" if m.islnk() else "file" if m.isfile() else "dir", m.linkname)
	PY
	[[ $output == *"link_remap."* ]] || die "no link_remap file in devshm-checkpoint.tar"
	[[ $output == *"sem.rekindle-sem"* && $output == *"data "* ]] || die "devshm-checkpoint.tar lacks the engine's files"
	grep -q ' link ' <<<"$output" || die "no hard link in devshm-checkpoint.tar: a link_remap and its name are one file"
}

# hostile_shm KIND IN.tar OUT.tar NAME: the checkpoint image IN.tar as NAME,
# its devshm-checkpoint.tar replaced by a hostile one of KIND.
hostile_shm() {
	oci_python - "$@" <<-'PY'
		import io, sys, tarfile
		import oci_tar
		kind, src, dst, name = sys.argv[1:5]
		buf = io.BytesIO()
		if kind == "huge":
		    # A header claiming 1 GiB, more than the pod's 64 MiB /dev/shm;
		    # no content follows: it is refused before any is read.
		    m = tarfile.TarInfo("huge")
		    m.size = 1 << 30
		    buf.write(m.tobuf(tarfile.PAX_FORMAT))
		else:
		    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
		        if kind == "symlink":
		            m = tarfile.TarInfo("evil")
		            m.type, m.linkname = tarfile.SYMTYPE, "/etc"
		            t.addfile(m)
		            data = b"owned\n"
		            m = tarfile.TarInfo("evil/rekindle-shm-canary")
		        else:
		            data = b"owned\n"
		            m = tarfile.TarInfo("/tmp/rekindle-shm-canary")
		        m.size = len(data)
		        t.addfile(m, io.BytesIO(data))
		hostile = buf.getvalue()
		oci_tar.edit_layer(src, dst, name, lambda n, data: hostile if n == "devshm-checkpoint.tar" else data)
	PY
}

@test "kubelet: a checkpoint image whose devshm-checkpoint.tar holds a symbolic link, an absolute path or a file larger than /dev/shm never runs; the event names the entry" {
	[ -f "$BATS_FILE_TMPDIR/good.tar" ] || skip "the restore test did not run"
	rm -f /etc/rekindle-shm-canary /tmp/rekindle-shm-canary
	local kind pod want
	for kind in symlink absolute huge; do
		case $kind in
		symlink) want='devshm-checkpoint.tar entry "evil": is of type' ;;
		absolute) want='devshm-checkpoint.tar entry "/tmp/rekindle-shm-canary": is an absolute path' ;;
		huge) want='devshm-checkpoint.tar entry "huge": its files hold more than [0-9]+ bytes' ;;
		esac
		run_cmd hostile_shm "$kind" "$BATS_FILE_TMPDIR/good.tar" "$BATS_TEST_TMPDIR/$kind.tar" "rekindle.local/engine:shm-$kind"
		run_cmd k8s_ctr images import "$BATS_TEST_TMPDIR/$kind.tar"
		deployment "shm-$kind" "rekindle.local/engine:shm-$kind" 1
		wait_for "a pod of shm-$kind" 30 has_pods "shm-$kind"
		pod=$(pods_of "shm-$kind")
		wait_event "$pod" "$want" 60
		ready_replicas "shm-$kind" 1 && die "the pod of shm-$kind runs"
		kube_do delete deployment "shm-$kind" --wait
		wait_for "the pods of shm-$kind to go" 60 no_pods "shm-$kind"
	done
	[ ! -e /etc/rekindle-shm-canary ] || die "a hostile devshm-checkpoint.tar wrote /etc/rekindle-shm-canary"
	[ ! -e /tmp/rekindle-shm-canary ] || die "a hostile devshm-checkpoint.tar wrote /tmp/rekindle-shm-canary"
}
