/* Run-time binding to the CUDA driver (libcuda.so.1). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "driver.h"
#include "util.h"

static void *sym(void *h, const char *name, const char *fallback)
{
	void *p = dlsym(h, name);
	if (!p && fallback)
		p = dlsym(h, fallback);
	if (!p)
		fail("libcuda has no %s: the driver is too old for checkpoint/restore (need r570+)", name);
	return p;
}

int driver_open(struct driver *d)
{
	const char *path = getenv("REKINDLE_LIBCUDA");
	if (!path || !*path)
		path = "libcuda.so.1";
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		fail("cannot load %s (%s): is the NVIDIA driver installed?", path, dlerror());
		return -1;
	}
	/* Each of these must exist; sym() reports the first missing one. */
	if (!(d->Init = sym(h, "cuInit", NULL)) ||
	    !(d->DeviceGetCount = sym(h, "cuDeviceGetCount", NULL)) ||
	    !(d->DeviceGet = sym(h, "cuDeviceGet", NULL)) ||
	    !(d->DeviceGetUuid = sym(h, "cuDeviceGetUuid_v2", "cuDeviceGetUuid")) ||
	    !(d->Lock = sym(h, "cuCheckpointProcessLock", NULL)) ||
	    !(d->Checkpoint = sym(h, "cuCheckpointProcessCheckpoint", NULL)) ||
	    !(d->Restore = sym(h, "cuCheckpointProcessRestore", NULL)) ||
	    !(d->Unlock = sym(h, "cuCheckpointProcessUnlock", NULL)) ||
	    !(d->GetState = sym(h, "cuCheckpointProcessGetState", NULL)) ||
	    !(d->GetRestoreThreadId = sym(h, "cuCheckpointProcessGetRestoreThreadId", NULL)))
		return -1;
	d->GetErrorName = dlsym(h, "cuGetErrorName");

	CUresult r = d->Init(0);
	if (r) {
		fail("cuInit failed: %s", driver_error(d, r));
		return -1;
	}
	return 0;
}

/* Names for the results the checkpoint calls document, used when the
 * driver cannot name one itself. */
static const struct { CUresult r; const char *name; } names[] = {
	{ 0, "CUDA_SUCCESS" },
	{ 1, "CUDA_ERROR_INVALID_VALUE" },
	{ 2, "CUDA_ERROR_OUT_OF_MEMORY" },
	{ CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED" },
	{ 4, "CUDA_ERROR_DEINITIALIZED" },
	{ 100, "CUDA_ERROR_NO_DEVICE" },
	{ 101, "CUDA_ERROR_INVALID_DEVICE" },
	{ 304, "CUDA_ERROR_OPERATING_SYSTEM" },
	{ 400, "CUDA_ERROR_INVALID_HANDLE" },
	{ 401, "CUDA_ERROR_ILLEGAL_STATE" },
	{ 500, "CUDA_ERROR_NOT_FOUND" },
	{ 800, "CUDA_ERROR_NOT_PERMITTED" },
	{ 801, "CUDA_ERROR_NOT_SUPPORTED" },
	{ 802, "CUDA_ERROR_SYSTEM_NOT_READY" },
	{ 803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH" },
	{ 909, "CUDA_ERROR_TIMEOUT" },
	{ 999, "CUDA_ERROR_UNKNOWN" },
};

const char *driver_error(const struct driver *d, CUresult r)
{
	static char buf[96];
	const char *name = NULL;
	if (d && d->GetErrorName && d->GetErrorName(r, &name) != 0)
		name = NULL;
	for (size_t i = 0; !name && i < sizeof names / sizeof names[0]; i++)
		if (names[i].r == r)
			name = names[i].name;
	snprintf(buf, sizeof buf, "%s (%d)", name ? name : "unknown CUresult", r);
	return buf;
}
