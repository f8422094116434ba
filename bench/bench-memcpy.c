/* bench-memcpy.c [MiB]: memcpy bandwidth for bench/bench.sh, which compiles
 * it when gcc is here (else it runs bench-memcpy.py). Single-threaded, like a
 * page copy; five runs, median and best, as one JSON object.
 * "warm": into a buffer already faulted in; "fresh": into new pages, page
 * faults included, as a restore that maps and fills new memory does. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static double now(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static int cmp(const void *a, const void *b) {
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv) {
	size_t n = (size_t)(argc > 1 ? atol(argv[1]) : 1024) << 20;
	enum { RUNS = 5 };
	double warm[RUNS], fresh[RUNS];
	char *src = malloc(n), *dst = malloc(n);
	if (!src || !dst) { perror("malloc"); return 1; }
	memset(src, 0xa5, n);
	memset(dst, 0x5a, n);
	for (int i = 0; i < RUNS; i++) {
		double t = now();
		memcpy(dst, src, n);
		warm[i] = n / (now() - t) / 1e9;
		char *f = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (f == MAP_FAILED) { perror("mmap"); return 1; }
		t = now();
		memcpy(f, src, n);
		fresh[i] = n / (now() - t) / 1e9;
		if (f[n - 1] != src[n - 1] || dst[0] != src[0]) return 1;
		munmap(f, n);
	}
	qsort(warm, RUNS, sizeof *warm, cmp);
	qsort(fresh, RUNS, sizeof *fresh, cmp);
	printf("{\"method\": \"C memcpy\", \"bytes\": %zu, \"warm_gbps\": %.3f, \"warm_best_gbps\": %.3f, "
	       "\"fresh_gbps\": %.3f, \"fresh_best_gbps\": %.3f}\n",
	       n, warm[RUNS / 2], warm[RUNS - 1], fresh[RUNS / 2], fresh[RUNS - 1]);
	return 0;
}
