#!/bin/sh
# launch.sh [ARGS...]: the GPU engine image's entrypoint. The image carries no
# PyTorch: it runs the GPU host's Python and PyTorch, bound into the container
# (host-python.sh prints the nerdctl flags). The host's interpreter needs the
# host's C library, so it runs through the host's dynamic loader with the
# host's library folders first, not through the image's (older) glibc:
#
#   ENGINE_PYTHON        interpreter, as the container sees it (default: python3)
#   ENGINE_LOADER        dynamic loader to run it with (empty: run it directly)
#   ENGINE_LIBRARY_PATH  library folders for that loader, ':'-separated
#   ENGINE_PYTHON_HOME   exported as PYTHONHOME (the interpreter's prefix)
#   ENGINE_SITE          site-packages folders server.py adds (the venv's, torch_memory_saver's)
#
# torch_memory_saver works by LD_PRELOAD (as SGLang starts its schedulers);
# the hook needs libcudart, so its folder joins the library path.
set -eu
py=${ENGINE_PYTHON:-python3}
server=${ENGINE_SERVER:-/engine/server.py}
libpath=${ENGINE_LIBRARY_PATH:-}

# The driver's libcuda.so.1, wherever CDI (or the runtime hook) put it;
# triton links its launcher against it and has no ldconfig here to ask.
for d in /usr/local/nvidia/lib64 /usr/lib/x86_64-linux-gnu /usr/lib64 /lib64 /usr/local/cuda/compat; do
	if [ -e "$d/libcuda.so.1" ]; then
		libpath=${libpath:+$libpath:}$d
		export TRITON_LIBCUDA_PATH=${TRITON_LIBCUDA_PATH:-$d}
		break
	fi
done

run() {
	if [ -n "${ENGINE_LOADER:-}" ]; then
		"$ENGINE_LOADER" --library-path "$libpath" "$py" "$@"
	else
		LD_LIBRARY_PATH=${libpath}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$py" "$@"
	fi
}
if [ -n "${ENGINE_PYTHON_HOME:-}" ]; then
	export PYTHONHOME=$ENGINE_PYTHON_HOME
fi
export ENGINE_LAUNCHER=$0

if [ $# -eq 0 ] && [ "${ENGINE_MEMORY_SAVER:-1}" != 0 ]; then
	# The reference server beside this script knows where the hook is, also
	# when ENGINE_SERVER is another engine's launcher (vLLM's, SGLang's).
	env=$(run "$(dirname "$0")/server.py" preload-env) || {
		echo "launch.sh: no torch_memory_saver next to torch for $py (ENGINE_SITE=${ENGINE_SITE:-}):" \
			"bind a folder holding it and add it to ENGINE_SITE, or set ENGINE_MEMORY_SAVER=0" >&2
		exit 1
	}
	hook=$(printf '%s\n' "$env" | sed -n 's/^hook=//p')
	libdir=$(printf '%s\n' "$env" | sed -n 's/^libdir=//p')
	[ -n "$libdir" ] && libpath=$libdir${libpath:+:$libpath}
	export LD_PRELOAD=$hook${LD_PRELOAD:+:$LD_PRELOAD}
fi
# The transformers image runs host programs too (gcc for triton, ptxas):
# they need the host's libraries in the environment, not only the loader's.
if [ "${ENGINE_EXPORT_LIBRARY_PATH:-0}" = 1 ]; then
	export LD_LIBRARY_PATH=${libpath}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
if [ -n "${ENGINE_LOADER:-}" ]; then
	exec "$ENGINE_LOADER" --library-path "$libpath" "$py" "$server" "$@"
fi
[ "${ENGINE_EXPORT_LIBRARY_PATH:-0}" = 1 ] || export LD_LIBRARY_PATH=${libpath}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
exec "$py" "$server" "$@"
