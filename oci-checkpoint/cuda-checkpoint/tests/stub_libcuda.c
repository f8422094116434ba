/* A stand-in libcuda.so.1 for unit tests: records every call with its
 * arguments, one line each, to $STUB_LOG, and answers from the environment:
 *   STUB_UUIDS  comma-separated GPU UUIDs the "driver" sees (default: none)
 *   STUB_STATE  what cuCheckpointProcessGetState returns (default 0)
 *   STUB_TID    what cuCheckpointProcessGetRestoreThreadId returns
 *   STUB_FAIL   name=code,... : make the named entry point return code
 * It reads CUcheckpointRestoreArgs by raw byte offsets (gpuPairs at 0,
 * gpuPairsCount at 8, reserved to byte 64) rather than through driver.h,
 * so a wrong struct layout in the tool shows up here.
 * It deliberately has no cuGetErrorName: the tool must name errors itself.
 *
 * Loaded with LD_PRELOAD as well, it also stands in for mknodat:
 *   STUB_SWAP_NODE  a path: each node mknodat makes is at once replaced by
 *                   a symlink to that path, as a restored container process
 *                   racing the tool could do. */
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static void logf_(const char *fmt, ...)
{
	const char *path = getenv("STUB_LOG");
	FILE *f = path ? fopen(path, "a") : NULL;
	if (!f)
		return;
	va_list ap;
	va_start(ap, fmt);
	vfprintf(f, fmt, ap);
	va_end(ap);
	fputc('\n', f);
	fclose(f);
}

static int result(const char *name)
{
	/* STUB_HANG=NAME: that call never returns, as a driver stuck on shared
	 * GPU memory did. */
	const char *h = getenv("STUB_HANG");
	if (h && !strcmp(h, name))
		for (;;)
			pause();
	const char *s = getenv("STUB_FAIL");
	size_t n = strlen(name);
	while (s && *s) {
		if (!strncmp(s, name, n) && s[n] == '=')
			return atoi(s + n + 1);
		s = strchr(s, ',');
		s = s ? s + 1 : NULL;
	}
	return 0;
}

static void uuid_text(const unsigned char *b, char *out)
{
	sprintf(out, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
		b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

/* The i-th UUID of STUB_UUIDS as 16 bytes; -1 if there is none. */
static int stub_uuid(int i, unsigned char *b)
{
	const char *s = getenv("STUB_UUIDS");
	for (; s && *s && i > 0; i--) {
		s = strchr(s, ',');
		s = s ? s + 1 : NULL;
	}
	if (!s || !*s)
		return -1;
	s += 4; /* "GPU-" */
	for (int k = 0; k < 16; k++) {
		if (*s == '-')
			s++;
		unsigned v;
		sscanf(s, "%2x", &v);
		b[k] = (unsigned char)v;
		s += 2;
	}
	return 0;
}

int cuInit(unsigned flags)
{
	const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
	logf_("cuInit flags=%u CUDA_VISIBLE_DEVICES=%s", flags, cvd ? cvd : "unset");
	return result("cuInit");
}

int cuDeviceGetCount(int *n)
{
	unsigned char b[16];
	*n = 0;
	while (stub_uuid(*n, b) == 0)
		(*n)++;
	logf_("cuDeviceGetCount -> %d", *n);
	return result("cuDeviceGetCount");
}

int cuDeviceGet(int *dev, int ordinal)
{
	*dev = ordinal;
	return result("cuDeviceGet");
}

int cuDeviceGetUuid_v2(unsigned char *uuid, int dev)
{
	return stub_uuid(dev, uuid) ? 101 /* CUDA_ERROR_INVALID_DEVICE */ : result("cuDeviceGetUuid_v2");
}

int cuCheckpointProcessLock(int pid, const unsigned char *args)
{
	unsigned timeout = 0, dirty = 0;
	if (args) {
		memcpy(&timeout, args, 4);
		for (int i = 4; i < 64; i++)
			dirty |= args[i];
	}
	logf_("cuCheckpointProcessLock pid=%d timeout=%u reserved=%s", pid, timeout, dirty ? "dirty" : "0");
	return result("cuCheckpointProcessLock");
}

int cuCheckpointProcessCheckpoint(int pid, void *args)
{
	logf_("cuCheckpointProcessCheckpoint pid=%d args=%s", pid, args ? "set" : "null");
	return result("cuCheckpointProcessCheckpoint");
}

int cuCheckpointProcessRestore(int pid, const unsigned char *args)
{
	if (!args) {
		logf_("cuCheckpointProcessRestore pid=%d args=null", pid);
		return result("cuCheckpointProcessRestore");
	}
	const unsigned char *pairs;
	unsigned count, dirty = 0;
	memcpy(&pairs, args, sizeof pairs);
	memcpy(&count, args + 8, 4);
	for (int i = 12; i < 64; i++)
		dirty |= args[i];
	char line[8192], a[48], b[48];
	int off = snprintf(line, sizeof line, "cuCheckpointProcessRestore pid=%d pairs=%u reserved=%s",
			   pid, count, dirty ? "dirty" : "0");
	for (unsigned i = 0; i < count && off < (int)sizeof line - 100; i++) {
		uuid_text(pairs + 32 * i, a);
		uuid_text(pairs + 32 * i + 16, b);
		off += snprintf(line + off, sizeof line - off, " %s>%s", a, b);
	}
	logf_("%s", line);
	return result("cuCheckpointProcessRestore");
}

int cuCheckpointProcessUnlock(int pid, void *args)
{
	logf_("cuCheckpointProcessUnlock pid=%d args=%s", pid, args ? "set" : "null");
	return result("cuCheckpointProcessUnlock");
}

int cuCheckpointProcessGetState(int pid, int *state)
{
	const char *s = getenv("STUB_STATE");
	*state = s ? atoi(s) : 0;
	logf_("cuCheckpointProcessGetState pid=%d", pid);
	return result("cuCheckpointProcessGetState");
}

int cuCheckpointProcessGetRestoreThreadId(int pid, int *tid)
{
	const char *s = getenv("STUB_TID");
	*tid = s ? atoi(s) : pid + 1;
	logf_("cuCheckpointProcessGetRestoreThreadId pid=%d", pid);
	return result("cuCheckpointProcessGetRestoreThreadId");
}

int mknodat(int dfd, const char *path, mode_t mode, dev_t dev)
{
	int r = (int)syscall(SYS_mknodat, dfd, path, mode, dev);
	const char *to = getenv("STUB_SWAP_NODE");
	if (r == 0 && to && *to) {
		unlinkat(dfd, path, 0);
		if (symlinkat(to, dfd, path) < 0)
			logf_("mknodat: cannot swap %s for a symlink", path);
		else
			logf_("mknodat: swapped %s for a symlink to %s", path, to);
	}
	return r;
}
