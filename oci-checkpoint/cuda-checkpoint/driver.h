/* The few CUDA driver API types and entry points cuda-checkpoint uses,
 * declared here so the tool builds without CUDA headers and loads
 * libcuda.so.1 at run time (dlopen).
 *
 * Layouts follow CUDA 13.0's cuda.h (driver 580):
 *   typedef struct CUuuid_st { char bytes[16]; } CUuuid;
 *   CUprocessState: RUNNING=0, LOCKED=1, CHECKPOINTED=2, FAILED=3
 *   CUcheckpointLockArgs   { unsigned int timeoutMs; unsigned int reserved0;
 *                            cuuint64_t reserved1[7]; }            64 bytes
 *   CUcheckpointGpuPair    { CUuuid oldUuid; CUuuid newUuid; }     32 bytes
 *   CUcheckpointRestoreArgs{ CUcheckpointGpuPair *gpuPairs;
 *                            unsigned int gpuPairsCount;
 *                            char reserved[52 - sizeof(CUcheckpointGpuPair *)];
 *                            cuuint64_t reserved1; }               64 bytes
 *   (gpuPairs at offset 0, gpuPairsCount at 8; reserved must be zero.
 *   CUDA 12.9 has no gpuPairs: the whole struct was reserved there. Later
 *   headers carve more fields out of the reserved bytes, keeping these two
 *   offsets and the 64-byte size, so zeroed reserved bytes stay valid.)
 * Checkpoint and unlock take optional args (all reserved): we pass NULL.
 * cuDeviceGetUuid_v2 is what cuda.h maps cuDeviceGetUuid to since CUDA 11.4.
 */
#ifndef REKINDLE_DRIVER_H
#define REKINDLE_DRIVER_H

#include <stdint.h>

typedef int CUresult;
enum { CUDA_ERROR_NOT_INITIALIZED = 3 };
typedef int CUdevice;
typedef struct { unsigned char bytes[16]; } CUuuid;

enum { CU_PROCESS_STATE_RUNNING, CU_PROCESS_STATE_LOCKED,
       CU_PROCESS_STATE_CHECKPOINTED, CU_PROCESS_STATE_FAILED };

typedef struct {
	unsigned int timeoutMs;
	unsigned int reserved0;
	uint64_t reserved1[7];
} CUcheckpointLockArgs;

typedef struct {
	CUuuid oldUuid;
	CUuuid newUuid;
} CUcheckpointGpuPair;

typedef struct {
	CUcheckpointGpuPair *gpuPairs;
	unsigned int gpuPairsCount;
	char reserved[52 - sizeof(CUcheckpointGpuPair *)];
	uint64_t reserved1;
} CUcheckpointRestoreArgs;

_Static_assert(sizeof(CUcheckpointLockArgs) == 64, "CUcheckpointLockArgs is 64 bytes");
_Static_assert(sizeof(CUcheckpointGpuPair) == 32, "CUcheckpointGpuPair is 32 bytes");
_Static_assert(sizeof(CUcheckpointRestoreArgs) == 64, "CUcheckpointRestoreArgs is 64 bytes");

struct driver {
	CUresult (*Init)(unsigned int flags);
	CUresult (*DeviceGetCount)(int *count);
	CUresult (*DeviceGet)(CUdevice *dev, int ordinal);
	CUresult (*DeviceGetUuid)(CUuuid *uuid, CUdevice dev);
	CUresult (*Lock)(int pid, CUcheckpointLockArgs *args);
	CUresult (*Checkpoint)(int pid, void *args);
	CUresult (*Restore)(int pid, CUcheckpointRestoreArgs *args);
	CUresult (*Unlock)(int pid, void *args);
	CUresult (*GetState)(int pid, int *state);
	CUresult (*GetRestoreThreadId)(int pid, int *tid);
	CUresult (*GetErrorName)(CUresult r, const char **name); /* optional */
};

/* Loads libcuda.so.1 (or $REKINDLE_LIBCUDA) and calls cuInit(0).
 * Returns 0, or prints one error line and returns -1. */
int driver_open(struct driver *d);

/* "CUDA_ERROR_INVALID_VALUE (1)" for any CUresult. */
const char *driver_error(const struct driver *d, CUresult r);

#endif
