/* GPU remap on restore: which checkpointed GPU goes onto which GPU now. */
#ifndef REKINDLE_REMAP_H
#define REKINDLE_REMAP_H

#include "driver.h"

#define MAX_GPUS 64

/* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (the "GPU-" prefix optional).
 * Returns 0, or -1 on bad syntax (silently). */
int uuid_parse(const char *s, CUuuid *u);
/* Writes the canonical "GPU-..." form; returns buf. */
const char *uuid_str(const CUuuid *u, char buf[48]);

/* Works out the pairs for cuCheckpointProcessRestore on `pid`.
 * map: "old=new,..." or "none" from --device-map or $REKINDLE_DEVICE_MAP,
 * or NULL to work it out from the process's root (see README.md).
 * host: the GPUs the driver sees. pairs must hold 2 * MAX_GPUS. On success returns 0 with *n pairs
 * (0: restore as checkpointed); on error prints one line, returns -1. */
int plan_restore(int pid, const char *map, const CUuuid *host, int nhost,
		 CUcheckpointGpuPair *pairs, int *n);

#endif
