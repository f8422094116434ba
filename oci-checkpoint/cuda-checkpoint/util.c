#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

int verbose;

static double mono(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

double step_seconds(void)
{
	static double last;
	double now = mono(), d;
	if (!last)
		last = now;
	d = now - last;
	last = now;
	return d;
}

static void logline(const char *kind, const char *fmt, va_list ap)
{
	const char *path = getenv("REKINDLE_CUDA_CHECKPOINT_LOG");
	if (!path || !*path)
		return;
	FILE *f = fopen(path, "a");
	if (!f)
		return;
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	fprintf(f, "%ld.%03ld [%d] %s", (long)now.tv_sec, now.tv_nsec / 1000000, (int)getpid(), kind);
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
