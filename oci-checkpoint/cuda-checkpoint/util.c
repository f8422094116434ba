#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "util.h"

int verbose;

static void logline(const char *kind, const char *fmt, va_list ap)
{
	const char *path = getenv("REKINDLE_CUDA_CHECKPOINT_LOG");
	if (!path || !*path)
		return;
	FILE *f = fopen(path, "a");
	if (!f)
		return;
	fprintf(f, "[%d] %s", (int)getpid(), kind);
	vfprintf(f, fmt, ap);
	fputc('\n', f);
	fclose(f);
}

void fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("cuda-checkpoint: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	va_start(ap, fmt);
	logline("error: ", fmt, ap);
	va_end(ap);
}

void note(const char *fmt, ...)
{
	va_list ap;
	if (verbose) {
		va_start(ap, fmt);
		fputs("cuda-checkpoint: ", stderr);
		vfprintf(stderr, fmt, ap);
		fputc('\n', stderr);
		va_end(ap);
	}
	va_start(ap, fmt);
	logline("", fmt, ap);
	va_end(ap);
}
