# shellcheck shell=bash
# registry.sh: what starting Debian's docker-registry on loopback takes,
# shared by the bats helpers (registry_start) and bench/bench-pull.sh.
# Sourced; defines functions only.

# registry_config DIR PORT [HTPASSWD]: write DIR/config.yml for a registry
# on 127.0.0.1:PORT storing in DIR; with HTPASSWD (a bcrypt file, htpasswd
# -B), it takes only the users listed there (basic auth).
registry_config() {
	local dir=$1 port=$2 htpasswd=${3:-}
	mkdir -p "$dir"
	cat >"$dir/config.yml" <<-EOF
		version: 0.1
		log:
		  level: warn
		storage:
		  filesystem:
		    rootdirectory: $dir
		  delete:
		    enabled: true
		http:
		  addr: 127.0.0.1:$port
	EOF
	if [ -n "$htpasswd" ]; then
		cat >>"$dir/config.yml" <<-EOF
			auth:
			  htpasswd:
			    realm: rekindle-test
			    path: $htpasswd
		EOF
	fi
}

# registry_answers PORT: a registry answers /v2/ there (200, or 401 when it
# wants credentials).
registry_answers() {
	local code
	code=$(curl -sS -o /dev/null -w '%{http_code}' "http://127.0.0.1:$1/v2/") || return 1
	[ "$code" = 200 ] || [ "$code" = 401 ]
}
