/* cuda-checkpoint: the CLI that CRIU's CUDA plugin runs, on the CUDA
 * driver's checkpoint API, with automatic GPU remap on restore.
 *
 * What CRIU 4.2.1 (plugins/cuda/cuda_plugin.c) relies on:
 *  - `-h` exits 0 and its output contains "--action", else the plugin
 *    disables itself;
 *  - `--get-restore-tid --pid P` prints the thread id (read with atoi);
 *    a non-zero exit means "not a CUDA process";
 *  - `--get-state --pid TID` prints a line starting with running, locked
 *    or checkpointed;
 *  - `--action lock --pid P [--timeout MS]`, `--action checkpoint --pid P`,
 *    and at restore `--action restore --pid P` then `--action unlock --pid P`;
 *    exit status 0 means success.
 * stdout and stderr reach the plugin through one pipe, so nothing but the
 * answer may be printed on success. */
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "driver.h"
#include "remap.h"
#include "util.h"

static const char usage[] =
	"Usage: cuda-checkpoint OPERATION --pid <pid> [OPTIONS]\n"
	"CUDA checkpoint/restore of one process through the CUDA driver (Rekindle).\n"
	"\n"
	"Operations:\n"
	"  --action lock|checkpoint|restore|unlock --pid <pid> [--timeout <ms>]\n"
	"        Lock CUDA in the process, checkpoint its GPU state to host memory,\n"
	"        restore it onto the GPUs, or unlock it. --timeout applies to lock.\n"
	"  --get-state --pid <pid>\n"
	"        Print running, locked, checkpointed or failed.\n"
	"  --get-restore-tid --pid <pid>\n"
	"        Print the thread id of the process's CUDA restore thread.\n"
	"  --toggle --pid <pid>\n"
	"        running -> lock + checkpoint; checkpointed -> restore + unlock.\n"
	"  --hold\n"
	"        Initialize the driver and stay until a signal ends it, so that every\n"
	"        other run initializes it at once (rekindle-cuda-hold.service).\n"
	"\n"
	"Options:\n"
	"  --pid, -p <pid>          the process to act on\n"
	"  --timeout, -t <ms>       lock timeout in milliseconds (0: none)\n"
	"  --device-map <map>       restore remap: OLD=NEW,... with GPU UUIDs\n"
	"                           (GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx), or none;\n"
	"                           completed to a permutation of the host's GPUs\n"
	"  --verbose, -v            say what is done on stderr\n"
	"  --help, -h               print this help\n"
	"\n"
	"Without --device-map, restore remaps from /.rekindle/devices.json (the GPUs\n"
	"at checkpoint) onto the /dev/nvidiaN nodes in the process's root.\n"
	"Environment: REKINDLE_DEVICE_MAP (as --device-map), REKINDLE_LIBCUDA (driver\n"
	"library, default libcuda.so.1), REKINDLE_PROC (default /proc),\n"
	"REKINDLE_CUDA_CHECKPOINT_LOG (append a log of each run to this file),\n"
	"REKINDLE_CUDA_CHECKPOINT_DEADLINE (seconds a checkpoint, restore or unlock\n"
	"may take before the tool gives up and fails; default 300, 0: none).\n";

/* Seconds a checkpoint, restore or unlock may take, the driver's start
 * included (REKINDLE_CUDA_CHECKPOINT_DEADLINE): far above the seconds to a
 * minute that copying a whole GPU's memory takes, and below the runc shim's
 * checkpoint_restore_timeout (10 minutes), so that this message, not the
 * shim's, says which step hung. */
#define DEFAULT_DEADLINE 300

static const char *const state_names[] = { "running", "locked", "checkpointed", "failed" };

static int host_gpus(struct driver *d, CUuuid *out, int *n)
{
	CUresult r = d->DeviceGetCount(n);
	if (r) {
		fail("cuDeviceGetCount failed: %s", driver_error(d, r));
		return -1;
	}
	if (*n > MAX_GPUS)
		*n = MAX_GPUS;
	for (int i = 0; i < *n; i++) {
		CUdevice dev;
		if ((r = d->DeviceGet(&dev, i)) || (r = d->DeviceGetUuid(&out[i], dev))) {
			fail("cannot read the UUID of GPU %d: %s", i, driver_error(d, r));
			return -1;
		}
	}
	return 0;
}

static int checked(struct driver *d, CUresult r, const char *what, int pid)
{
	if (r) {
		fail("%s of pid %d failed: %s", what, pid, driver_error(d, r));
		return -1;
	}
	note("pid %d: %s done in %.3fs", pid, what, step_seconds());
	return 0;
}

static int lock(struct driver *d, int pid, unsigned timeout)
{
	CUcheckpointLockArgs a;
	memset(&a, 0, sizeof a);
	a.timeoutMs = timeout;
	return checked(d, d->Lock(pid, &a), "lock", pid);
}

static int restore(struct driver *d, int pid, const char *map)
{
	CUuuid host[MAX_GPUS];
	CUcheckpointGpuPair pairs[2 * MAX_GPUS];
	int nhost, n;
	if (host_gpus(d, host, &nhost) || plan_restore(pid, map, host, nhost, pairs, &n))
		return -1;
	CUcheckpointRestoreArgs a;
	memset(&a, 0, sizeof a);
	a.gpuPairs = pairs;
	a.gpuPairsCount = (unsigned)n;
	return checked(d, d->Restore(pid, n ? &a : NULL), n ? "restore with GPU remap" : "restore", pid);
}

static int toggle(struct driver *d, int pid, unsigned timeout, const char *map)
{
	int st;
	CUresult r = d->GetState(pid, &st);
	if (r)
		return checked(d, r, "get-state", pid);
	if (st == CU_PROCESS_STATE_RUNNING)
		return lock(d, pid, timeout) || checked(d, d->Checkpoint(pid, NULL), "checkpoint", pid) ? -1 : 0;
	if (st == CU_PROCESS_STATE_CHECKPOINTED)
		return restore(d, pid, map) || checked(d, d->Unlock(pid, NULL), "unlock", pid) ? -1 : 0;
	fail("cannot toggle pid %d: its CUDA state is %s (use --action)", pid,
	     st >= 0 && st < 4 ? state_names[st] : "unknown");
	return -1;
}

static long number(const char *s, const char *what);

/* The deadline of a checkpoint or restore: the driver call can wait for
 * ever (seen: SGLang's tensor-parallel worker on driver 580), and CRIU's
 * plugin waits for us with no limit of its own, so a dump or restore would
 * hang with it. Past the deadline the tool says so and exits; the process's
 * CUDA state is left as the driver holds it. The message is written before
 * the alarm, as the handler may only write(2). */
static char deadline_msg[512];
static int deadline_log = -1;

static void deadline_passed(int sig)
{
	(void)sig;
	size_t n = strlen(deadline_msg);
	ssize_t w = write(STDERR_FILENO, deadline_msg, n);
	if (deadline_log >= 0)
		w = write(deadline_log, deadline_msg, n);
	(void)w;
	_exit(1);
}

static int deadline_arm(const char *what, int pid)
{
	const char *s = getenv("REKINDLE_CUDA_CHECKPOINT_DEADLINE");
	long secs = s && *s ? number(s, "REKINDLE_CUDA_CHECKPOINT_DEADLINE") : DEFAULT_DEADLINE;
	if (secs == 0)
		return 0;
	snprintf(deadline_msg, sizeof deadline_msg,
		 "cuda-checkpoint: %s of pid %d did not return within %lds (REKINDLE_CUDA_CHECKPOINT_DEADLINE): the "
		 "driver may be waiting on GPU memory or a peer that this process shares with another; gave up, "
		 "leaving its CUDA state as the driver holds it\n", what, pid, secs);
	const char *log = getenv("REKINDLE_CUDA_CHECKPOINT_LOG");
	if (log && *log)
		deadline_log = open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = deadline_passed;
	sigaction(SIGALRM, &sa, NULL);
	/* A blocked SIGALRM (the mask survives exec) would never fire. */
	sigset_t alrm;
	sigemptyset(&alrm);
	sigaddset(&alrm, SIGALRM);
	sigprocmask(SIG_UNBLOCK, &alrm, NULL);
	alarm((unsigned)secs);
	return 0;
}

static long number(const char *s, const char *what)
{
	char *end;
	long v = strtol(s, &end, 10);
	if (!*s || *end || v < 0 || v > 0x7fffffff) {
		fail("bad %s \"%s\": want a non-negative number", what, s);
		exit(2);
	}
	return v;
}

/* While one process on the host has the driver initialized, cuInit takes
 * 15 ms; with none it takes 180-210 ms on an H100, persistence mode on or
 * not. A restore runs this tool three times per CUDA process, the first
 * ones before any restored process holds the driver: held, that is about
 * 0.35 s less per restore. Holding needs no context, so no GPU memory. */
static int hold(void)
{
	struct driver d;
	sigset_t set;
	int sig;

	if (driver_open(&d))
		return 1;
	note("holding the CUDA driver initialized (pid %d)", getpid());
	fprintf(stderr, "cuda-checkpoint: holding the CUDA driver initialized until a signal ends it\n");
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	sigprocmask(SIG_BLOCK, &set, NULL);
	sigwait(&set, &sig);
	note("released the CUDA driver (signal %d)", sig);
	return 0;
}

int main(int argc, char **argv)
{
	enum { OP_NONE, OP_ACTION, OP_STATE, OP_TID, OP_TOGGLE, OP_HOLD };
	static const struct option opts[] = {
		{ "help", no_argument, NULL, 'h' },
		{ "pid", required_argument, NULL, 'p' },
		{ "timeout", required_argument, NULL, 't' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "action", required_argument, NULL, 'A' },
		{ "get-state", no_argument, NULL, 'S' },
		{ "get-restore-tid", no_argument, NULL, 'R' },
		{ "toggle", no_argument, NULL, 'T' },
		{ "hold", no_argument, NULL, 'H' },
		{ "device-map", required_argument, NULL, 'M' },
		{ 0 },
	};
	int op = OP_NONE, nops = 0, pid = 0, c;
	unsigned timeout = 0;
	const char *action = NULL, *map = NULL;

	while ((c = getopt_long(argc, argv, "hp:t:v", opts, NULL)) != -1) {
		switch (c) {
		case 'h': fputs(usage, stdout); return 0;
		case 'p': pid = (int)number(optarg, "pid"); break;
		case 't': timeout = (unsigned)number(optarg, "timeout"); break;
		case 'v': verbose = 1; break;
		case 'A': op = OP_ACTION; nops++; action = optarg; break;
		case 'S': op = OP_STATE; nops++; break;
		case 'R': op = OP_TID; nops++; break;
		case 'T': op = OP_TOGGLE; nops++; break;
		case 'H': op = OP_HOLD; nops++; break;
		case 'M': map = optarg; break;
		default: fprintf(stderr, "Try cuda-checkpoint --help\n"); return 2;
		}
	}
	if (optind < argc) {
		fail("unexpected argument \"%s\" (see --help)", argv[optind]);
		return 2;
	}
	if (nops != 1) {
		fail("give exactly one of --action, --get-state, --get-restore-tid, --toggle, --hold (see --help)");
		return 2;
	}
	/* The tool must see every GPU of the host, whatever CRIU's environment
	 * restricts for CUDA programs. */
	unsetenv("CUDA_VISIBLE_DEVICES");
	if (op == OP_HOLD)
		return hold();
	if (pid <= 0) {
		fail("--pid <pid> is required");
		return 2;
	}
	if (op == OP_ACTION && strcmp(action, "lock") && strcmp(action, "checkpoint") &&
	    strcmp(action, "restore") && strcmp(action, "unlock")) {
		fail("unknown action \"%s\": want lock, checkpoint, restore or unlock", action);
		return 2;
	}
	if (map && !(op == OP_TOGGLE || (op == OP_ACTION && !strcmp(action, "restore")))) {
		fail("--device-map applies only to --action restore and --toggle");
		return 2;
	}

	/* Armed before the driver starts: a driver stuck on the GPU can hang
	 * its start too. */
	if (op == OP_TOGGLE)
		deadline_arm("toggle", pid);
	else if (op == OP_ACTION && strcmp(action, "lock"))
		deadline_arm(action, pid);

	struct driver d;
	if (driver_open(&d))
		return 1;

	int v, r = 0;
	step_seconds();
	switch (op) {
	case OP_STATE:
		if ((r = checked(&d, d.GetState(pid, &v), "get-state", pid)) == 0) {
			if (v >= 0 && v < 4)
				printf("%s\n", state_names[v]);
			else
				printf("unknown state %d\n", v);
		}
		break;
	case OP_TID:
		/* CRIU's plugin asks this of every process it dumps; most use no
		 * CUDA, and the driver says so with NOT_INITIALIZED. That answer is
		 * expected, so it is logged as such rather than as an error. */
		if ((r = d.GetRestoreThreadId(pid, &v)) == CUDA_ERROR_NOT_INITIALIZED) {
			fprintf(stderr, "cuda-checkpoint: pid %d uses no CUDA (%s)\n", pid, driver_error(&d, r));
			note("pid %d: uses no CUDA", pid);
		} else if ((r = checked(&d, r, "get-restore-tid", pid)) == 0) {
			printf("%d\n", v);
		}
		break;
	case OP_TOGGLE:
		r = toggle(&d, pid, timeout, map);
		break;
	default:
		if (!strcmp(action, "lock"))
			r = lock(&d, pid, timeout);
		else if (!strcmp(action, "checkpoint"))
			r = checked(&d, d.Checkpoint(pid, NULL), "checkpoint", pid);
		else if (!strcmp(action, "restore"))
			r = restore(&d, pid, map);
		else
			r = checked(&d, d.Unlock(pid, NULL), "unlock", pid);
	}
	return r ? 1 : 0;
}
