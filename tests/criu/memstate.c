/*
 * memstate HEAP_MB OUTDIR [SHARED_MB]: a process whose memory has every shape
 * CRIU must restore, for checking a restore page by page.
 *
 *   heap    HEAP_MB of private anonymous memory, every page written
 *   sparse  256 MiB private, one page in 16 written: the rest must stay unmapped
 *   vmas    1000 two-page mappings that cannot merge (alternating protection)
 *   memfd   SHARED_MB (32) of memfd, mapped shared
 *   shm     SHARED_MB (32) of shared anonymous memory, written by parent and child
 *   cow     128 MiB private, written before fork; the child rewrites one page
 *           in 4, so the other pages stay shared copy-on-write
 *
 * heap, sparse and vmas are mapped after the fork, so that they are the
 * parent's alone (CRIU fills them in its restorer); memfd, shm and cow are
 * inherited by the child. The parent forks one child. When both are set up the parent writes
 * its pid to OUTDIR/ready. On SIGUSR1 the parent (and, forwarded, the child) writes
 * OUTDIR/<role>.txt: a digest per region, the sparse region's resident pages
 * and the cow region's shared pages. Compare the files before the checkpoint
 * with those after the restore.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define MiB (1UL << 20)
#define NR_SMALL 1000

static long page;
static char *outdir;
static char *heap, *sparse, *smalls[NR_SMALL], *memfd_map, *shm, *cow;
static size_t heap_len, sparse_len = 256 * MiB, memfd_len = 32 * MiB, shm_len = 32 * MiB, cow_len = 128 * MiB;

static void fail(const char *what)
{
	fprintf(stderr, "memstate: %s: %s\n", what, strerror(errno));
	exit(1);
}

static void *map(size_t len, int flags, int fd)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, flags, fd, 0);

	if (p == MAP_FAILED)
		fail("mmap");
	return p;
}

/* Fill one page with a stream that depends on seed, so no two pages match. */
static void fill_page(char *p, uint64_t seed)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ULL + 1, *w = (uint64_t *)p;
	long i;

	for (i = 0; i < page / 8; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		w[i] = x;
	}
}

static void fill(char *p, size_t len, uint64_t seed, size_t stride)
{
	size_t off;

	for (off = 0; off < len; off += stride * page)
		fill_page(p + off, seed + off / page);
}

static uint64_t digest(const char *p, size_t len)
{
	const uint64_t *w = (const uint64_t *)p;
	uint64_t h = 0xcbf29ce484222325ULL;
	size_t i;

	for (i = 0; i < len / 8; i++)
		h = (h ^ w[i]) * 0x100000001b3ULL + i;
	return h;
}

static long resident(char *p, size_t len)
{
	size_t n = len / page, i;
	unsigned char *v = malloc(n);
	long r = 0;

	if (!v || mincore(p, len, v))
		fail("mincore");
	for (i = 0; i < n; i++)
		r += v[i] & 1;
	free(v);
	return r;
}

/* Shared_Clean + Shared_Dirty of the mapping at addr, from /proc/self/smaps. */
static long shared_kb(void *addr)
{
	char line[256], want[32];
	long kb = 0, v;
	int in = 0;
	FILE *f = fopen("/proc/self/smaps", "r");

	if (!f)
		fail("/proc/self/smaps");
	snprintf(want, sizeof(want), "%lx-", (unsigned long)addr);
	while (fgets(line, sizeof(line), f)) {
		if (strchr(line, '-') && strchr(line, ' ') && strchr(line, '-') < strchr(line, ' '))
			in = strncmp(line, want, strlen(want)) == 0;
		else if (in && (sscanf(line, "Shared_Clean: %ld", &v) == 1 || sscanf(line, "Shared_Dirty: %ld", &v) == 1))
			kb += v;
	}
	fclose(f);
	return kb;
}

static void report(const char *role)
{
	char path[4096], tmp[4200];
	uint64_t smalls_h = 0;
	FILE *f;
	int i;

	for (i = 0; i < NR_SMALL && smalls[i]; i++)
		smalls_h = smalls_h * 31 + digest(smalls[i], 2 * page);
	snprintf(path, sizeof(path), "%s/%s.txt", outdir, role);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "w");
	if (!f)
		fail(tmp);
	if (heap) { /* the parent's alone */
		fprintf(f, "heap %016llx\n", (unsigned long long)digest(heap, heap_len));
		fprintf(f, "sparse %016llx resident %ld\n", (unsigned long long)digest(sparse, sparse_len),
			resident(sparse, sparse_len));
		fprintf(f, "vmas %016llx\n", (unsigned long long)smalls_h);
	}
	fprintf(f, "memfd %016llx\n", (unsigned long long)digest(memfd_map, memfd_len));
	fprintf(f, "shm %016llx\n", (unsigned long long)digest(shm, shm_len));
	fprintf(f, "cow %016llx shared_kb %ld\n", (unsigned long long)digest(cow, cow_len), shared_kb(cow));
	if (fclose(f) || rename(tmp, path))
		fail(path);
}

static void serve(const char *role, pid_t child)
{
	sigset_t set;
	int sig;

	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	sigaddset(&set, SIGTERM);
	for (;;) {
		if (sigwait(&set, &sig))
			fail("sigwait");
		if (sig == SIGTERM) {
			if (child > 0)
				kill(child, SIGTERM);
			exit(0);
		}
		if (child > 0)
			kill(child, SIGUSR1);
		report(role);
	}
}

int main(int argc, char **argv)
{
	char path[4096];
	sigset_t set;
	pid_t child;
	int fd, i, ready[2];

	if (argc != 3 && argc != 4) {
		fprintf(stderr, "usage: memstate HEAP_MB OUTDIR [SHARED_MB]\n");
		return 2;
	}
	page = sysconf(_SC_PAGESIZE);
	heap_len = strtoul(argv[1], NULL, 10) * MiB;
	outdir = argv[2];
	if (argc == 4)
		memfd_len = shm_len = strtoul(argv[3], NULL, 10) * MiB;

	/* Signals are taken by sigwait only; the child inherits the mask. */
	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	sigaddset(&set, SIGTERM);
	sigprocmask(SIG_BLOCK, &set, NULL);

	fd = memfd_create("memstate", 0);
	if (fd < 0 || ftruncate(fd, memfd_len))
		fail("memfd");
	memfd_map = map(memfd_len, MAP_SHARED, fd);
	fill(memfd_map, memfd_len, 4UL << 40, 1);
	shm = map(shm_len, MAP_SHARED | MAP_ANONYMOUS, -1);
	fill(shm, shm_len / 2, 5UL << 40, 1);
	/*
	 * Guard pages keep the parent's later mappings from merging into cow:
	 * CRIU shares a VMA copy-on-write with the child only when it starts
	 * at the same address in both.
	 */
	cow = map(cow_len + 2 * page, MAP_PRIVATE | MAP_ANONYMOUS, -1);
	if (mprotect(cow, page, PROT_NONE) || mprotect(cow + page + cow_len, page, PROT_NONE))
		fail("mprotect");
	cow += page;
	fill(cow, cow_len, 6UL << 40, 1);

	/* Mapped before the fork: inherited by the child. */
	if (pipe(ready))
		fail("pipe");
	child = fork();
	if (child < 0)
		fail("fork");
	if (child == 0) {
		close(ready[0]);
		fill(cow, cow_len, 7UL << 40, 4);
		fill(shm + shm_len / 2, shm_len / 2, 8UL << 40, 1);
		close(ready[1]);
		serve("child", 0);
	}
	close(ready[1]);
	/* Mapped after it: the parent's own, restored by CRIU's restorer. */
	heap = map(heap_len, MAP_PRIVATE | MAP_ANONYMOUS, -1);
	fill(heap, heap_len, 1, 1);
	sparse = map(sparse_len, MAP_PRIVATE | MAP_ANONYMOUS, -1);
	/* Huge pages would make the holes resident. */
	if (madvise(sparse, sparse_len, MADV_NOHUGEPAGE))
		fail("madvise");
	fill(sparse, sparse_len, 2UL << 40, 16);
	for (i = 0; i < NR_SMALL; i++) {
		smalls[i] = map(2 * page, MAP_PRIVATE | MAP_ANONYMOUS, -1);
		fill(smalls[i], 2 * page, (3UL << 40) + 2 * i, 1);
		if (i % 2 && mprotect(smalls[i], 2 * page, PROT_READ))
			fail("mprotect");
	}
	if (read(ready[0], path, 1) < 0)
		fail("waiting for the child");
	close(ready[0]);
	snprintf(path, sizeof(path), "%s/ready", outdir);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0 || dprintf(fd, "%d\n", getpid()) < 0 || close(fd))
		fail(path);
	serve("parent", child);
	return 0;
}
