#!/usr/bin/env bash
# rekindle-cache-gc.sh [OPTIONS]: prune the extracted-checkpoint cache of a patched
# containerd by age and by size.
#
# The cache (restore/checkpointimage/cache.go) is made of snapshots named
#   checkpoint-cache/<layer digest>/data            the extracted checkpoint layer
#   checkpoint-cache/<layer digest>/data-view       a view of it, read by CRIU
#   checkpoint-cache/<layer digest>/rootfs/<chain>  base image + rootfs diff
#   checkpoint-cache/<layer digest>/decoded(-view)  the CRIU images with compressed
#                                                   pages images decoded, if any
# One checkpoint layer's snapshots form one entry. An entry is only derived
# data: removing it keeps the checkpoint image, whose next restore extracts it
# again. Entries go anyway when their image is removed (containerd's GC follows
# their back reference to the layer); this prunes entries of images still kept.
#
# An entry is in use while a container's snapshot sits on top of it (a
# restored root filesystem, or a restore's hold, checkpoint-restore/ID/checkpoint,
# on the data its data-view reads, which may be the image's own unpacked
# snapshot), and is being built while a restore has an active building-*
# snapshot in it; neither is ever removed. Restores begin at any time, so
# an entry is listed again just before it goes and before its data view
# goes, its parts go dependents first (root filesystems, then the data
# view, then the data), and a part the snapshotter refuses because a
# restore took it meanwhile keeps the rest: that entry is kept, not an
# error. A data view of the image's own unpacked snapshot (no extracted
# copy) stays: it takes no space, and a layer kept in place is read
# through its mount. Snapshots that vanish while listed (a restore's
# building-* or check snapshots) are skipped. The age of an entry is the
# time since its newest snapshot was made (restores that hit the cache do
# not renew it).
# With --max-size, the oldest entries go first until the rest fits.
set -euo pipefail

usage() {
	cat <<EOF
usage: $0 [OPTIONS]
  --max-age AGE         remove entries older than AGE: N[s|m|h|d|w], a bare N is days
  --max-size SIZE       then remove the oldest entries until the cache fits in SIZE:
                        N[K|M|G|T] (powers of 1024; a trailing B or iB is allowed)
  --dry-run             say what would be removed, remove nothing
  --address SOCK        containerd socket (default \$CONTAINERD_ADDRESS or
                        /run/containerd/containerd.sock)
  -n, --namespace NS    only this namespace (default: every namespace)
  --snapshotter NAME    snapshotter holding the cache (default overlayfs)
  --ctr PATH            ctr binary (default \$CTR, the repository's build/bin/ctr,
                        a ctr next to this script, then ctr on PATH)
  -h, --help            this text
Without --max-age and --max-size it lists the cache and removes nothing.
EOF
}

die() { echo "cache-gc: error: $*" >&2; exit 2; }
say() { echo "cache-gc: $*"; }

# parse_age N[smhdw] -> seconds
parse_age() {
	[[ $1 =~ ^([0-9]+)([smhdw]?)$ ]] || die "bad age '$1': want N[s|m|h|d|w], e.g. 7d"
	local n=${BASH_REMATCH[1]}
	case ${BASH_REMATCH[2]} in
	s) echo "$n" ;;
	m) echo $((n * 60)) ;;
	h) echo $((n * 3600)) ;;
	'' | d) echo $((n * 86400)) ;;
	w) echo $((n * 604800)) ;;
	esac
}

# parse_size N[KMGT][i][B] -> bytes
parse_size() {
	[[ $1 =~ ^([0-9]+)([KMGT]?)(i?B)?$ ]] || die "bad size '$1': want N[K|M|G|T], e.g. 200G"
	local n=${BASH_REMATCH[1]}
	case ${BASH_REMATCH[2]} in
	'') echo "$n" ;;
	K) echo $((n << 10)) ;;
	M) echo $((n << 20)) ;;
	G) echo $((n << 30)) ;;
	T) echo $((n << 40)) ;;
	esac
}

human_size() { numfmt --to=iec-i --suffix=B "$1"; }
human_age() {
	local s=$1
	if ((s >= 86400)); then echo "$((s / 86400))d$((s % 86400 / 3600))h"
	elif ((s >= 3600)); then echo "$((s / 3600))h$((s % 3600 / 60))m"
	elif ((s >= 60)); then echo "$((s / 60))m$((s % 60))s"
	else echo "${s}s"; fi
}

max_age='' max_size='' dry_run=0 namespace='' snapshotter=overlayfs
address=${CONTAINERD_ADDRESS:-/run/containerd/containerd.sock}
ctr=${CTR:-}
while [ $# -gt 0 ]; do
	case $1 in
	--max-age) [ $# -ge 2 ] || die "$1 needs a value"; max_age=$(parse_age "$2"); shift 2 ;;
	--max-size) [ $# -ge 2 ] || die "$1 needs a value"; max_size=$(parse_size "$2"); shift 2 ;;
	--dry-run) dry_run=1; shift ;;
	--address) [ $# -ge 2 ] || die "$1 needs a value"; address=$2; shift 2 ;;
	-n | --namespace) [ $# -ge 2 ] || die "$1 needs a value"; namespace=$2; shift 2 ;;
	--snapshotter) [ $# -ge 2 ] || die "$1 needs a value"; snapshotter=$2; shift 2 ;;
	--ctr) [ $# -ge 2 ] || die "$1 needs a value"; ctr=$2; shift 2 ;;
	-h | --help) usage; exit 0 ;;
	*) usage >&2; die "unknown argument '$1'" ;;
	esac
done

if [ -z "$ctr" ]; then
	here=$(cd "$(dirname "$0")" && pwd)
	for c in "$here/../build/bin/ctr" "$here/ctr" "$(command -v ctr || true)"; do
		[ -n "$c" ] && [ -x "$c" ] && { ctr=$c; break; }
	done
fi
{ [ -n "$ctr" ] && [ -x "$ctr" ]; } || die "no ctr found: pass --ctr PATH"
CTR_BASE=("$ctr" --address "$address")
errs=$(mktemp)
trap 'rm -f "$errs"' EXIT
# q CMD...: run CMD; its stderr (ctr's deprecation notices) shows only when it fails.
q() {
	"$@" 2>"$errs" && return 0
	local rc=$?
	cat "$errs" >&2
	return $rc
}
q "${CTR_BASE[@]}" version >/dev/null || die "containerd does not answer on $address"

now=$(date +%s)
removed_bytes=0 removed_n=0 failed=0 total_n=0 total_bytes=0

if [ -n "$namespace" ]; then
	namespaces=$namespace
else
	namespaces=$(q "${CTR_BASE[@]}" namespaces ls -q) || die "cannot list namespaces"
fi

# One namespace's cache, as list_entries finds it:
#   parent[key], kind[key]  every snapshot's parent and kind (Active, Committed, View)
#   keys[layer]             the snapshots of one entry (one checkpoint layer)
#   busy[layer]             why the entry must stay: in use or being built
#   rows                    "age bytes layer" per entry, oldest first
# and what decide_entries makes of it: verdict[layer], "keep (...)" or "remove (...)".
declare -A parent=() kind=() keys=() busy=() verdict=()
rows=''

# snaps NS ARGS...: ctr snapshots ARGS in namespace NS, on the cache's snapshotter.
snaps() {
	local ns=$1
	shift
	q "${CTR_BASE[@]}" -n "$ns" snapshots --snapshotter "$snapshotter" "$@"
}

# list_snapshots NS: read the namespace's snapshots into parent, kind, keys
# and busy.
list_snapshots() {
	local ns=$1 listing key p k layer view
	parent=() kind=() keys=() busy=()
	listing=$(snaps "$ns" ls) || die "cannot list $snapshotter snapshots in namespace $ns"

	while read -r key p k; do
		[ "$key" = KEY ] && continue
		# An empty PARENT column leaves two fields.
		[ -z "$k" ] && { k=$p; p=''; }
		parent[$key]=$p kind[$key]=$k
	done <<<"$listing"

	for key in "${!parent[@]}"; do
		if [[ $key == checkpoint-cache/* ]]; then
			layer=${key#checkpoint-cache/}
			layer=${layer%%/*}
			keys[$layer]+="$key "
			# Only a restore building a part of the entry holds an active one.
			[ "${kind[$key]}" = Active ] && busy[$layer]="being built by a restore"
		fi
	done
	# A snapshot outside an entry on top of one of its snapshots: in use.
	for key in "${!parent[@]}"; do
		p=${parent[$key]}
		[[ $p == checkpoint-cache/* ]] || continue
		layer=${p#checkpoint-cache/}
		layer=${layer%%/*}
		[[ $key == "checkpoint-cache/$layer/"* ]] && continue
		busy[$layer]="in use by snapshot $key"
	done
	# A snapshot beside the data view on the data it reads (a restore's
	# hold), where that data is outside the entry (the image's unpacked
	# snapshot): in use too.
	for layer in "${!keys[@]}"; do
		view=checkpoint-cache/$layer/data-view
		p=${parent[$view]:-}
		[ -n "$p" ] && [[ $p != checkpoint-cache/* ]] || continue
		for key in "${!parent[@]}"; do
			[ "${parent[$key]}" = "$p" ] && [[ $key == checkpoint-restore/*/checkpoint ]] &&
				busy[$layer]="held by snapshot $key"
		done
	done
	return 0
}

# list_entries NS: list_snapshots, and rows.
list_entries() {
	local ns=$1 key layer
	rows=''
	list_snapshots "$ns"
	[ ${#keys[@]} -gt 0 ] || return 0

	# Age and size per entry; rows "age bytes layer", oldest first.
	local t newest bytes created info live
	for layer in "${!keys[@]}"; do
		newest=0 live=''
		for key in ${keys[$layer]}; do
			if ! info=$(snaps "$ns" info "$key" 2>/dev/null); then
				# Gone since the listing (a restore's building-* snapshot).
				gone "$ns" "$key" || die "cannot read snapshot $key"
				continue
			fi
			live+="$key "
			created=$(jq -r '[.Created, .Updated] | max' <<<"$info") || die "cannot read snapshot $key"
			t=$(date -u -d "$created" +%s) || die "bad time '$created' on snapshot $key"
			((t > newest)) && newest=$t
		done
		keys[$layer]=$live
		[ -n "$live" ] || { unset "keys[$layer]"; continue; }
		# shellcheck disable=SC2086 # keys are whitespace-free snapshot names
		bytes=$({ snaps "$ns" usage -b ${keys[$layer]} 2>/dev/null || true; } | awk 'NR > 1 {s += $2} END {print s + 0}')
		rows+="$((now - newest)) $bytes $layer"$'\n'
	done
	rows=$(sort -k1,1nr <<<"${rows%$'\n'}")
}

# decide_entries NS: a verdict per entry of rows: busy entries stay; too old
# ones go; then the oldest until the rest fits. Counts every entry in
# total_n and total_bytes.
decide_entries() {
	local ns=$1 age bytes layer left=0
	verdict=()
	while read -r age bytes layer; do
		total_n=$((total_n + 1)) total_bytes=$((total_bytes + bytes))
		if [ -n "${busy[$layer]:-}" ]; then
			verdict[$layer]="keep (${busy[$layer]})"
		elif [ -n "$max_age" ] && ((age > max_age)); then
			verdict[$layer]="remove (older than $(human_age "$max_age"))"
			continue
		fi
		left=$((left + bytes))
	done <<<"$rows"
	if [ -n "$max_size" ] && ((left > max_size)); then
		while read -r age bytes layer; do
			((left > max_size)) || break
			[ -z "${verdict[$layer]:-}" ] || continue
			verdict[$layer]="remove (cache over $(human_size "$max_size"))"
			left=$((left - bytes))
		done <<<"$rows"
		((left <= max_size)) ||
			say "warning: namespace $ns: entries in use keep the cache at $(human_size "$left"), over $(human_size "$max_size")"
	fi
}

# gone NS KEY: snapshot KEY no longer exists.
gone() {
	! "${CTR_BASE[@]}" -n "$1" snapshots --snapshotter "$snapshotter" info "$2" >/dev/null 2>&1
}

# rm_snapshot NS KEY: remove KEY; 0 when removed or already gone, 3 when
# the snapshotter keeps it for a snapshot on top (a restore took it since
# the listing), 1 otherwise.
rm_snapshot() {
	local out
	out=$("${CTR_BASE[@]}" -n "$1" snapshots --snapshotter "$snapshotter" rm "$2" 2>&1) && return 0
	case $out in
	*"not found"*) return 0 ;;
	*"with child"* | *"failed precondition"*) return 3 ;;
	esac
	printf '%s\n' "$out" >&2
	return 1
}

# remove_entry NS LAYER: remove the entry's snapshots, listed again first,
# dependents first: root filesystems, the data view, then the data (a
# parent after its children). Returns 3, removing nothing more, when the
# entry is in use by then or a part of it is taken meanwhile; 1 when a
# snapshot cannot be removed.
remove_entry() {
	local ns=$1 layer=$2
	list_snapshots "$ns"
	if [ -n "${busy[$layer]:-}" ]; then
		why="${busy[$layer]}"
		return 3
	fi
	local todo='' next rc progress key other has_child view=checkpoint-cache/$layer/data-view
	for key in ${keys[$layer]:-}; do [[ $key == */rootfs/* ]] && todo+="$key "; done
	# A data view of the image's own unpacked snapshot takes no space and
	# carries the mount a layer kept in place is read through: it stays
	# with the image.
	[[ ${parent[$view]:-} == "checkpoint-cache/$layer/"* ]] && todo+="$view "
	for key in ${keys[$layer]:-}; do [[ $key == */rootfs/* || $key == */data-view ]] || todo+="$key "; done
	if [ -z "$todo" ]; then
		why="only the data view of the image's unpacked snapshot is left, which stays with the image"
		return 4
	fi
	while [ -n "$todo" ]; do
		next='' progress=0
		for key in $todo; do
			has_child=0
			for other in $todo; do
				[ "${parent[$other]:-}" = "$key" ] && { has_child=1; break; }
			done
			if [ $has_child = 1 ]; then
				next+="$key "
				continue
			fi
			# The last look before a part goes that a restore may read.
			if [[ $key == */data-view || $key == */data || $key == */decoded-view || $key == */decoded ]]; then
				list_snapshots "$ns"
				if [ -n "${busy[$layer]:-}" ]; then
					why="${busy[$layer]}"
					return 3
				fi
			fi
			rc=0
			rm_snapshot "$ns" "$key" || rc=$?
			case $rc in
			0) progress=1 ;;
			3) why="snapshot $key taken by a restore meanwhile"; return 3 ;;
			*) say "error: cannot remove snapshot $key in namespace $ns"; return 1 ;;
			esac
		done
		todo=$next
		[ $progress = 1 ] || { [ -z "$todo" ] || return 1; break; }
	done
	return 0
}

# prune_namespace NS: one namespace's entries listed, decided and removed
# (or, with --dry-run, named).
prune_namespace() {
	local ns=$1 age bytes layer v what rc why
	list_entries "$ns"
	[ -n "$rows" ] || return 0
	decide_entries "$ns"

	while read -r age bytes layer; do
		v=${verdict[$layer]:-keep}
		what="$ns/$snapshotter checkpoint-cache/$layer $(human_size "$bytes") age $(human_age "$age")"
		if [[ $v != remove* ]]; then
			say "$what: $v"
		elif [ "$dry_run" = 1 ]; then
			say "$what: would ${v}"
			removed_n=$((removed_n + 1)) removed_bytes=$((removed_bytes + bytes))
		else
			rc=0 why=''
			remove_entry "$ns" "$layer" || rc=$?
			case $rc in
			0)
				say "$what: ${v/remove/removed}"
				removed_n=$((removed_n + 1)) removed_bytes=$((removed_bytes + bytes))
				;;
			3) say "$what: kept (in use since it was listed: $why)" ;;
			4) say "$what: kept ($why)" ;;
			*)
				say "$what: removal failed, entry kept in part"
				failed=1
				;;
			esac
		fi
	done <<<"$rows"
}

for ns in $namespaces; do
	prune_namespace "$ns"
done
if [ "$dry_run" = 1 ]; then
	say "$total_n entries, $(human_size "$total_bytes"); would remove $removed_n, $(human_size "$removed_bytes") (dry run)"
else
	say "$total_n entries, $(human_size "$total_bytes"); removed $removed_n, $(human_size "$removed_bytes")"
fi
exit $failed
