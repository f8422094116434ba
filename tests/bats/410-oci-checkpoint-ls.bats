#!/usr/bin/env bats
# oci-checkpoint ls and rm over containerd's image store, check's exit
# statuses (0 can restore, 1 cannot, 2 could not check), checkpointctl's
# standard annotations, and `make install`: every program the installed
# systemd units run is installed and starts.

load helpers

setup_file() {
	need_built oci-checkpoint
	stack_up
	load_image base
	load_image cpu-engine
	export CONTAINERD_ADDRESS=$RK_DIR/containerd.sock
}

teardown_file() {
	stack_down
}

# checkpoint NAME IMAGE...: start the CPU engine as NAME and checkpoint it
# into each IMAGE (the engine keeps running in between), then remove it.
checkpoint() {
	local name=$1 port img
	shift
	port=$(free_port)
	start_engine "$name" "$port"
	for img in "$@"; do
		ocicp create --quiet --leave-running "$name" "$img"
	done
	run_nerdctl rm -f "$name"
}

# ls_json: oci-checkpoint ls --json, checked to be docs/json.md's object
# (schema_version 1, the images in an array); output is that array.
ls_json() {
	ocicp ls --json
	jq -e '.schema_version == 1 and (.images | type == "array")' <<<"$output" >/dev/null ||
		die "ls --json printed no object of schema_version 1 with an images array: $output"
	output=$(jq -c .images <<<"$output")
}

# craft SRC DST KEY VALUE: load DST, a copy of image SRC whose manifest
# annotation KEY is VALUE (the layers stay the same).
craft() {
	run_nerdctl save -o "$BATS_TEST_TMPDIR/src.tar" "$1"
	python3 - "$BATS_TEST_TMPDIR/src.tar" "$BATS_TEST_TMPDIR/dst.tar" "$2" "$3" "$4" <<-'PY'
		import hashlib, io, json, sys, tarfile
		src, dst, name, key, value = sys.argv[1:6]
		blobs = {}
		with tarfile.open(src) as t:
		    for m in t.getmembers():
		        if m.isfile():
		            blobs[m.name] = t.extractfile(m).read()
		index = json.loads(blobs["index.json"])
		desc = index["manifests"][0]
		manifest = json.loads(blobs["blobs/sha256/" + desc["digest"][len("sha256:"):]])
		manifest["annotations"][key] = value
		data = json.dumps(manifest).encode()
		sha = hashlib.sha256(data).hexdigest()
		blobs["blobs/sha256/" + sha] = data
		desc["digest"], desc["size"] = "sha256:" + sha, len(data)
		desc["annotations"] = {"io.containerd.image.name": name,
		                       "org.opencontainers.image.ref.name": name.rsplit(":", 1)[1]}
		index["manifests"] = [desc]
		blobs["index.json"] = json.dumps(index).encode()
		with tarfile.open(dst, "w") as out:
		    for n, b in blobs.items():
		        info = tarfile.TarInfo(n)
		        info.size = len(b)
		        out.addfile(info, io.BytesIO(b))
	PY
	run_nerdctl load -i "$BATS_TEST_TMPDIR/dst.tar"
}

@test "ls lists the checkpoint images only, with engine, size, created and host facts; --json and -q for scripts" {
	ls_json
	is "$output" "[]" "ls --json before any checkpoint (base and engine images are no checkpoints)"
	ocicp ls
	is "${lines[0]}" "~^NAME +ENGINE +SIZE +CREATED +GPUS +DRIVER +CPU$" "table header"
	is "${#lines[@]}" "1" "no rows without checkpoint images"

	local before a=rekindle.local/ckpt:ls-a b=rekindle.local/ckpt:ls-b
	before=$(date -u +%s)
	checkpoint lssrc "$a" "$b"

	ls_json
	local json=$output vendor
	is "$(jq -r '[.[].image] | join(" ")' <<<"$json")" "$a $b" "ls --json names, sorted"
	vendor=$(awk -F': ' '/^vendor_id/ {print $2; exit}' /proc/cpuinfo)
	local img layer size created
	for img in "$a" "$b"; do
		is "$(jq -r --arg n "$img" '.[] | select(.image == $n) | [.engine, .gpu_count, .cpu_vendor, .base_image] | join(" ")' <<<"$json")" \
			"sglang 0 $vendor $ENGINE_IMAGE" "engine, GPUs, CPU vendor and base image of $img"
		# The size is what the image takes in the store: its manifest,
		# config and checkpoint layer.
		layer=$("$BIN/oci-checkpoint" inspect --json "$img" | jq -r .layer_size)
		size=$(jq -r --arg n "$img" '.[] | select(.image == $n) | .size' <<<"$json")
		((size > layer && size < layer + 65536)) || die "ls size $size of $img is not its layer ($layer) plus manifest and config"
		is "$("$BIN/oci-checkpoint" inspect --json "$img" | jq -r .size)" "$size" "inspect's size of $img (docs/json.md: the same as ls's)"
		created=$(date -u -d "$(jq -r --arg n "$img" '.[] | select(.image == $n) | .created' <<<"$json")" +%s)
		((created >= before - 1 && created <= $(date -u +%s))) || die "created $created of $img is not the checkpoint's time"
		# The digest is the image's in containerd's store.
		run_ctr images ls "name==$img"
		[[ $output == *"$(jq -r --arg n "$img" '.[] | select(.image == $n) | .digest' <<<"$json")"* ]] ||
			die "ls --json digest of $img is not the image store's"
	done

	ocicp ls
	is "${#lines[@]}" "3" "header and two rows"
	is "${lines[1]}" "~^rekindle.local/ckpt:ls-a +sglang +[0-9.]+ [KMG]iB +20[0-9-]+ [0-9:]+ UTC +none +- +$vendor$" "table row"
	[[ $output != *cpu-engine* && $output != *base:* ]] || die "ls lists images that are no checkpoints"

	ocicp ls -q
	is "$output" "$a"$'\n'"$b" "ls -q"

	# Another namespace has none.
	ocicp --namespace rekindle-empty ls --json
	is "$(jq -c .images <<<"$output")" "[]" "ls in another namespace"

	ocicp rm "$a" "$b"
	ls_json
	is "$output" "[]" "ls after removing both"
}

@test "rm removes checkpoint images and says so; refuses other images, unknown names and images in use, removing nothing" {
	local a=rekindle.local/ckpt:rm-a b=rekindle.local/ckpt:rm-b
	checkpoint rmsrc "$a" "$b"
	local layer
	layer=$("$BIN/oci-checkpoint" inspect --json "$a" | jq -r .layer_digest)

	ocicp 1 rm "$ENGINE_IMAGE"
	[[ $output == *"$ENGINE_IMAGE: not a checkpoint image"* ]] || die "rm does not say the image is no checkpoint"
	[[ $output == *"nerdctl rmi"* ]] || die "rm does not say how to remove other images"
	run_nerdctl image inspect "$ENGINE_IMAGE"

	# One bad name among good ones: nothing goes.
	ocicp 1 rm "$a" rekindle.local/no:such "$BASE_IMAGE"
	[[ $output == *"nothing removed"* ]] || die "rm does not say it removed nothing"
	[[ $output == *"rekindle.local/no:such: not found: no such image"* ]] || die "rm does not name the unknown image"
	[[ $output == *"$BASE_IMAGE: not a checkpoint image"* ]] || die "rm does not name the image that is no checkpoint"
	[[ $output != *"removed $a"* ]] || die "rm says it removed $a"
	ocicp ls -q
	grep -qx "$a" <<<"$output" && grep -qx "$b" <<<"$output" || die "rm removed a checkpoint image although it refused a name"

	# An image a container was restored from stays until the container goes.
	local port
	port=$(free_port)
	run_nerdctl run -d --name rmdst -p "127.0.0.1:$port:30000" "$a"
	ocicp 1 rm "$a"
	[[ $output == *"container(s) rmdst were created from it"* ]] || die "rm does not name the container using the image"
	run_nerdctl rm -f rmdst

	ocicp rm "$a" "$b"
	is "$output" "removed $a"$'\n'"removed $b" "rm says what it removed"
	ls_json
	[[ $output != *"$a"* && $output != *"$b"* ]] || die "ls still lists removed images"
	run_nerdctl 1 image inspect "$a"
	# The removal is synchronous: the checkpoint layer is gone from the
	# content store when rm returns.
	run_ctr content ls -q
	[[ $output != *"$layer"* ]] || die "the checkpoint layer $layer outlived rm"

	ocicp 2 rm
	[[ $output == *"usage: oci-checkpoint rm"* ]] || die "rm without names shows no usage"
}

@test "check exits 0 when this host can restore the image, 1 when it cannot (saying why), 2 when it could not check" {
	local img=rekindle.local/ckpt:check needs=rekindle.local/ckpt:check-needs-criu-99
	checkpoint chksrc "$img"

	ocicp 0 check "$img"
	is "${lines[-1]}" "$img: this host can restore it" "check of a restorable image"

	craft "$img" "$needs" org.rekindle.criu.version 99.0
	ocicp 1 check "$needs"
	[[ $output == *"this host cannot restore $needs"* ]] || die "check does not say the host cannot restore"
	[[ $output == *"criu: CRIU "*" here is older than 99.0"* ]] || die "check does not give the reason"
	ocicp 1 check --json "$needs"
	is "$(sed -n '/^{/,/^}/p' <<<"$output" | jq -r .restorable_here)" "false" "check --json of an image this host cannot restore"

	# The check itself fails: 2, whatever the image would need.
	ocicp 2 check "$ENGINE_IMAGE"
	[[ $output == *"is not a checkpoint image"* ]] || die "check of an image that is no checkpoint"
	local port
	port=$(free_port)
	ocicp 2 check "127.0.0.1:$port/rekindle/ckpt:unreachable"
	[[ $output == *"could not check"*"127.0.0.1:$port"* ]] || die "check does not name the unreachable registry"
	ocicp 2 check 'Not A Name'
	[[ $output == *'image name "Not A Name"'* ]] || die "check does not name the bad image name"
	ocicp 2 check
	[[ $output == *"usage: oci-checkpoint check"* ]] || die "check without an image shows no usage"
	ocicp 2 check --no-such-flag "$img"
	[[ $output == *"no-such-flag"* ]] || die "check does not name the bad flag"
	ocicp 2 --address "$BATS_TEST_TMPDIR/none.sock" check "$img"
	[[ $output == *"no containerd socket at $BATS_TEST_TMPDIR/none.sock"* ]] || die "check does not name the missing socket"
}

@test "checkpointctl's standard org.criu.checkpoint annotations are on the manifest, and checkpointctl inspect shows them" {
	local img=rekindle.local/ckpt:criu-annotations
	checkpoint annsrc "$img"
	ocicp inspect --json "$img"
	local ann
	ann=$(jq -c .annotations <<<"$output")
	a() { jq -r --arg k "org.criu.checkpoint.$1" '.[$k] // "MISSING"' <<<"$ann"; }

	local arch cgroup distro criu runc version
	case $(uname -m) in x86_64) arch=amd64 ;; aarch64) arch=arm64 ;; *) arch=$(uname -m) ;; esac
	[ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ] && cgroup=v2 || cgroup=v1
	distro=$(. /etc/os-release && echo "$ID $VERSION_ID")
	criu=$("$BIN/criu" --version | sed -n 's/^Version: *//p')
	runc=$("$BIN/runc" --version | sed -n 's/^runc version *//p')
	version=$("$BIN/oci-checkpoint" --version | awk '{print $NF}')

	is "$(a container.name)" "annsrc" "container name"
	is "$(a engine.name) $(a engine.version)" "rekindle-oci-checkpoint $version" "checkpointing engine and its version"
	is "$(a runtime.name) $(a runtime.version)" "runc $runc" "runtime and its version"
	is "$(a criu.version)" "$criu" "CRIU version"
	is "$(a host.arch) $(a host.kernel)" "$arch $(uname -r)" "arch and kernel"
	is "$(a cgroup.version)" "$cgroup" "cgroup version"
	is "$(a distribution.name) $(a distribution.version)" "$distro" "distribution"
	is "$(a rootfsImageName)" "$ENGINE_IMAGE" "base image name"
	is "$(a rootfsImageID)" "~^sha256:[0-9a-f]{64}$" "base image digest"
	# A nerdctl container is in no pod: no pod keys, rather than empty ones.
	is "$(a pod.name)" "MISSING" "pod name of a container outside a pod"

	# checkpointctl reads the checkpoint archive (the layer), not the
	# manifest: the same annotations are in its spec.dump.
	local layer
	layer=$("$BIN/oci-checkpoint" inspect --json "$img" | jq -r .layer_digest)
	"$BIN/ctr" --address "$RK_DIR/containerd.sock" -n default content get "$layer" >"$BATS_TEST_TMPDIR/checkpoint.tar"
	run_cmd "$BIN/checkpointctl" inspect --metadata "$BATS_TEST_TMPDIR/checkpoint.tar"
	local k
	for k in engine.name engine.version runtime.name runtime.version criu.version host.arch host.kernel \
		cgroup.version distribution.name distribution.version rootfsImageName container.name; do
		[[ $output == *"org.criu.checkpoint.$k: $(a "$k")"* ]] || die "checkpointctl inspect does not show org.criu.checkpoint.$k: $(a "$k")"
	done
}

# ---- make install and the systemd units ------------------------------------

# unit_command UNIT_DIR UNIT: the words of UNIT's ExecStart as systemd runs
# it, one per line: drop-ins (UNIT.d/*.conf) applied (an empty ExecStart=
# resets it), continuation lines joined, $VAR and ${VAR} taken from its
# Environment= lines and split on blanks, the leading -@:+! flags dropped.
unit_command() {
	python3 - "$1" "$2" <<-'PY'
		import glob, os, re, shlex, sys
		udir, unit = sys.argv[1:3]
		files = [os.path.join(udir, unit)] + sorted(glob.glob(os.path.join(udir, unit + ".d", "*.conf")))
		env, execs = {}, []
		for f in files:
		    text = re.sub(r"\\\n", " ", open(f).read())
		    for line in text.splitlines():
		        line = line.strip()
		        if line.startswith(("#", ";")) or "=" not in line:
		            continue
		        key, value = (s.strip() for s in line.split("=", 1))
		        if key == "Environment":
		            for assignment in shlex.split(value):
		                k, _, v = assignment.partition("=")
		                env[k] = v
		        elif key == "ExecStart":
		            execs = [] if value == "" else execs + [value]
		if len(execs) != 1:
		    sys.exit(f"{unit}: {len(execs)} ExecStart lines in effect, want 1")
		words = []
		for w in shlex.split(execs[0]):
		    m = re.fullmatch(r"\$\{?(\w+)\}?", w)
		    if m:
		        words += env.get(m.group(1), "").split()
		    else:
		        words.append(re.sub(r"\$\{(\w+)\}", lambda m: env.get(m.group(1), ""), w))
		words[0] = words[0].lstrip("-@:+!")
		print("\n".join(words))
	PY
}

# unit_starts DESTDIR PREFIX UNIT: run UNIT's ExecStart from the install
# under DESTDIR far enough to show that its program is there and starts: the
# cache pruner as a dry run against this file's containerd, anything else
# with --help. Paths under PREFIX are looked up under DESTDIR.
unit_starts() {
	local destdir=$1 prefix=$2 unit=$3 w
	local -a cmd=()
	local words
	words=$(unit_command "$destdir$prefix/lib/systemd/system" "$unit") || { die "cannot read the ExecStart of $unit"; return 1; }
	while IFS= read -r w; do
		[[ $w == "$prefix"/* ]] && w=$destdir$w
		cmd+=("$w")
	done <<<"$words"
	[ -x "${cmd[0]}" ] || { die "$unit runs ${cmd[0]#"$destdir"}, which make install did not install"; return 1; }
	case $(basename "${cmd[0]}") in
	rekindle-cache-gc) cmd+=(--dry-run --address "$RK_DIR/containerd.sock") ;;
	*) cmd+=(--help) ;;
	esac
	run_cmd "${cmd[@]}"
	[ -n "$output" ] || { die "$unit's command printed nothing"; return 1; }
}

@test "make install installs the units and every program they run; each installed unit's ExecStart starts" {
	command -v python3 >/dev/null || skip "python3 is needed to read the unit files"
	local destdir=$BATS_TEST_TMPDIR/dest prefix=/opt/rekindle-test
	run_cmd make -C "$REKINDLE_ROOT" --no-print-directory install DESTDIR="$destdir" PREFIX="$prefix"
	local units=$destdir$prefix/lib/systemd/system f rel
	for f in "$REKINDLE_ROOT"/systemd/*.service "$REKINDLE_ROOT"/systemd/*.timer "$REKINDLE_ROOT"/systemd/*.service.d/*.conf; do
		rel=${f#"$REKINDLE_ROOT/systemd/"}
		[ -f "$units/$rel" ] || die "make install did not install systemd/$rel under $units"
	done
	! grep -rn /usr/local/ "$units" || die "installed units still name /usr/local instead of PREFIX $prefix"
	! grep -rn "$destdir" "$units" || die "installed units name DESTDIR"

	# A timer starts its service: that service must be installed too.
	local t svc
	for t in "$units"/*.timer; do
		svc=$(sed -n 's/^Unit=//p' "$t")
		svc=${svc:-$(basename "${t%.timer}").service}
		[ -f "$units/$svc" ] || die "$(basename "$t") starts $svc, which is not installed"
	done

	local n=0
	for f in "$units"/*.service; do
		unit_starts "$destdir" "$prefix" "$(basename "$f")"
		n=$((n + 1))
	done
	((n >= 3)) || die "only $n units checked"

	# The check fails for a unit whose program is missing.
	cp "$units/rekindle-cache-gc.service" "$units/rekindle-missing.service"
	sed -i "s|^ExecStart=$prefix/bin/rekindle-cache-gc|ExecStart=$prefix/bin/rekindle-no-such-program|" "$units/rekindle-missing.service"
	run unit_starts "$destdir" "$prefix" rekindle-missing.service
	[ "$status" -ne 0 ] || die "a unit naming a missing program passed the check"
	[[ $output == *"rekindle-missing.service runs $prefix/bin/rekindle-no-such-program, which make install did not install"* ]] ||
		die "the check does not name the missing program: $output"

	# SYSTEMDUNITDIR= (the playbook's stage) installs the programs, not the units.
	run_cmd make -C "$REKINDLE_ROOT" --no-print-directory install DESTDIR="$destdir/stage" PREFIX="$prefix" SYSTEMDUNITDIR=
	[ -x "$destdir/stage$prefix/bin/rekindle-cache-gc" ] || die "SYSTEMDUNITDIR= left out the cache pruner"
	[ ! -e "$destdir/stage$prefix/lib/systemd" ] || die "SYSTEMDUNITDIR= still installed units"
}
