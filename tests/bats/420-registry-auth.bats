#!/usr/bin/env bats
# oci-checkpoint check and inspect reach registries the way nerdctl does:
# credentials from the docker config ($DOCKER_CONFIG, ~/.docker), hosts.toml
# under the --hosts-dir folders (here: a mirror), plain HTTP on loopback; a
# registry that refuses says so, names the fix and shows no secret.

load helpers

# The image, pushed once in setup_file: to the registry that wants a login
# (AUTH_REF) and to an open one that serves as the mirror (MIRROR_REF).
REPO=rekindle/ckpt
USER_NAME=rekindle
PASSWORD=rk-test-pw-7c1e

setup_file() {
	need_built oci-checkpoint
	command -v htpasswd >/dev/null || skip "htpasswd is not installed (make deps: apache2-utils)"
	stack_up
	load_image base
	load_image cpu-engine
	export CONTAINERD_ADDRESS=$RK_DIR/containerd.sock

	export AUTH_PORT MIRROR_PORT AUTH_DIR=$BATS_FILE_TMPDIR/auth-registry MIRROR_DIR=$BATS_FILE_TMPDIR/mirror-registry
	AUTH_PORT=$(free_port)
	MIRROR_PORT=$(free_port)
	mkdir -p "$AUTH_DIR"
	htpasswd -Bbn "$USER_NAME" "$PASSWORD" >"$AUTH_DIR/htpasswd"
	registry_start "$AUTH_DIR" "$AUTH_PORT" "$AUTH_DIR/htpasswd"
	registry_start "$MIRROR_DIR" "$MIRROR_PORT"

	export AUTH_REF=127.0.0.1:$AUTH_PORT/$REPO:auth MIRROR_REF=127.0.0.1:$MIRROR_PORT/$REPO:mirror
	export GOOD_CONFIG=$BATS_FILE_TMPDIR/docker-good
	docker_config "$GOOD_CONFIG" "127.0.0.1:$AUTH_PORT" "$USER_NAME" "$PASSWORD"

	local port src=rekindle.local/ckpt:registry
	port=$(free_port)
	start_engine regsrc "$port"
	ocicp create --quiet regsrc "$src"
	run_nerdctl rm -f regsrc
	run_nerdctl tag "$src" "$AUTH_REF"
	run_nerdctl tag "$src" "$MIRROR_REF"
	DOCKER_CONFIG=$GOOD_CONFIG run_nerdctl push --insecure-registry "$AUTH_REF"
	run_nerdctl push --insecure-registry "$MIRROR_REF"
	# Only the registries have it now: check and inspect must go there.
	run_nerdctl rmi "$src" "$AUTH_REF" "$MIRROR_REF"
}

teardown_file() {
	[ -n "${AUTH_DIR:-}" ] && registry_stop "$AUTH_DIR"
	[ -n "${MIRROR_DIR:-}" ] && registry_stop "$MIRROR_DIR"
	stack_down
}

# mirror_hosts CERTS PORT: CERTS/registry.example:5000/hosts.toml sending
# that name (a registry that does not exist) to the registry on PORT.
mirror_hosts() {
	mkdir -p "$1/registry.example:5000"
	cat >"$1/registry.example:5000/hosts.toml" <<-EOF
		server = "https://registry.example:5000"

		[host."http://127.0.0.1:$2"]
		  capabilities = ["pull", "resolve"]
	EOF
}

# docker_config DIR REGISTRY USER PASSWORD: DIR/config.json as
# `nerdctl login REGISTRY` writes it.
docker_config() {
	mkdir -p "$1"
	jq -n --arg reg "$2" --arg auth "$(printf '%s:%s' "$3" "$4" | base64 -w0)" \
		'{auths: {($reg): {auth: $auth}}}' >"$1/config.json"
}

# no_secret: the last command's output shows no password.
no_secret() {
	[[ $output != *"$PASSWORD"* && $output != *"wrong-pw"* ]] || die "the output shows a password"
}

# not_pulled IMAGE: check and inspect left nothing in the image store.
not_pulled() {
	run_nerdctl images --format '{{.Repository}}:{{.Tag}}'
	[[ $output != *"$1"* ]] || die "$1 was pulled into the image store"
}

@test "a registry that wants a login: refused without credentials (saying what to do), read with the docker config's" {
	local none=$BATS_TEST_TMPDIR/docker-none bad=$BATS_TEST_TMPDIR/docker-bad
	mkdir -p "$none"

	# No config.json at all.
	DOCKER_CONFIG=$none ocicp 2 check "$AUTH_REF"
	[[ $output == *"could not check"*"registry 127.0.0.1:$AUTH_PORT refused access without credentials"* ]] ||
		die "check does not say the registry refused access without credentials"
	[[ $output == *"nerdctl login 127.0.0.1:$AUTH_PORT"* ]] || die "check does not name nerdctl login"
	[[ $output == *"$none/config.json"* ]] || die "check does not name the docker config it read"
	[[ $output == *"hosts.toml"* ]] || die "check does not name hosts.toml"
	DOCKER_CONFIG=$none ocicp 1 inspect "$AUTH_REF"
	[[ $output == *"refused access without credentials"*"nerdctl login 127.0.0.1:$AUTH_PORT"* ]] ||
		die "inspect does not say the registry refused access"

	# Credentials the registry does not take.
	docker_config "$bad" "127.0.0.1:$AUTH_PORT" "$USER_NAME" wrong-pw
	DOCKER_CONFIG=$bad ocicp 2 check "$AUTH_REF"
	[[ $output == *"registry 127.0.0.1:$AUTH_PORT refused the credentials from $bad/config.json"* ]] ||
		die "check does not say the registry refused the credentials, and whose"
	no_secret

	# The right ones, from $DOCKER_CONFIG.
	DOCKER_CONFIG=$GOOD_CONFIG ocicp 0 check "$AUTH_REF"
	is "${lines[-1]}" "$AUTH_REF: this host can restore it" "check with the docker config's credentials"
	no_secret
	DOCKER_CONFIG=$GOOD_CONFIG ocicp inspect --json "$AUTH_REF"
	is "$(jq -r .local <<<"$output")" "false" "inspect read the registry"
	is "$(jq -r .engine <<<"$output")" "sglang" "engine from the registry's manifest"

	# And from ~/.docker/config.json when DOCKER_CONFIG is not set.
	mkdir -p "$BATS_TEST_TMPDIR/home"
	cp -r "$GOOD_CONFIG" "$BATS_TEST_TMPDIR/home/.docker"
	HOME=$BATS_TEST_TMPDIR/home ocicp 0 check "$AUTH_REF"
	is "${lines[-1]}" "$AUTH_REF: this host can restore it" "check with ~/.docker/config.json"

	not_pulled "$REPO:auth"
}

# allow_registry_example: check reads a restore policy that allows
# registry.example:5000's images (the test containerd's allows loopback
# registries only, and check refuses what the restore's policy refuses).
allow_registry_example() {
	export CONTAINERD_CONFIG=$BATS_TEST_TMPDIR/containerd-policy.toml
	printf '%s\n' 'version = 3' "[plugins.'io.containerd.service.v1.tasks-service']" \
		'  checkpoint_restore_images = ["registry.example:5000"]' >"$CONTAINERD_CONFIG"
}

@test "a name that hosts.toml sends to a mirror: check and inspect read it there" {
	# registry.example:5000 does not exist; its hosts.toml names the open
	# registry as a mirror, which has the image under the same repository.
	local name=registry.example:5000/$REPO:mirror certs=$BATS_TEST_TMPDIR/certs.d empty=$BATS_TEST_TMPDIR/empty.d
	mkdir -p "$empty"
	mirror_hosts "$certs" "$MIRROR_PORT"
	allow_registry_example

	ocicp 0 check --hosts-dir "$certs" "$name"
	is "${lines[-1]}" "$name: this host can restore it" "check through the mirror"
	ocicp inspect --json --hosts-dir "$certs" "$name"
	is "$(jq -r .image <<<"$output")" "$name" "inspect names the image as asked"
	is "$(jq -r .local <<<"$output")" "false" "inspect read the mirror"
	is "$(jq -r .engine <<<"$output")" "sglang" "engine from the mirror's manifest"

	# --hosts-dir repeats; the folders are searched in order.
	ocicp 0 check --hosts-dir "$empty" --hosts-dir "$certs" "$name"

	# Without the hosts dir the name's own registry is asked, and is not there.
	ocicp 2 check --hosts-dir "$empty" "$name"
	[[ $output == *"could not check"*"registry.example:5000"* ]] || die "check does not name the unreachable registry"

	not_pulled "$REPO:mirror"
}

@test "a mirror that wants a login: the credentials are the mirror's" {
	# hosts.toml sends registry.example:5000 to the registry that wants a
	# login; config.json holds credentials for that mirror only.
	local name=registry.example:5000/$REPO:auth certs=$BATS_TEST_TMPDIR/certs.d none=$BATS_TEST_TMPDIR/docker-none
	mkdir -p "$none"
	mirror_hosts "$certs" "$AUTH_PORT"
	allow_registry_example

	DOCKER_CONFIG=$GOOD_CONFIG ocicp 0 check --hosts-dir "$certs" "$name"
	is "${lines[-1]}" "$name: this host can restore it" "check through a mirror with its credentials"
	DOCKER_CONFIG=$none ocicp 2 check --hosts-dir "$certs" "$name"
	[[ $output == *"registry 127.0.0.1:$AUTH_PORT refused access without credentials"* ]] ||
		die "check does not name the mirror that refused"
}
