/*
 * memstate [-c COW_MB] [-w WORKERS:MB] HEAP_MB OUTDIR [SHARED_MB]: a process
 * tree whose memory has every shape CRIU must restore, for checking a
 * restore page by page.
 *
 *   heap    HEAP_MB of private anonymous memory, every page written
 *   sparse  256 MiB private, one page in 16 written: the rest must stay unmapped
 *   vmas    1000 two-page mappings that cannot merge (alternating protection)
 *   memfd   SHARED_MB (32) of memfd, mapped shared
 *   shm     SHARED_MB (32) of shared anonymous memory, written by parent and child
 *   cow     COW_MB (128) private, written before fork; the child rewrites
 *           every other page, so the other half stays shared copy-on-write
 *
 * heap, sparse and vmas are mapped after the fork, so that they are the
 * parent's alone (CRIU fills them in its restorer); memfd, shm and cow are
 * inherited by the child. The parent forks one child, and with -w WORKERS
 * more (worker1, ...), each of which, and the child, then maps and writes
 * a heap of its own of MB: a tree of processes with their own memory, as
 * an engine with an API server, a core and helpers. When all are set up
 * the parent writes the roles, one a line, to OUTDIR/roles and its pid to
 * OUTDIR/ready. On SIGUSR1 the parent (and, forwarded, every child) writes
 * OUTDIR/<role>.txt: a digest per region, the sparse region's resident
 * pages and the cow region's shared pages (Shared_Clean + Shared_Dirty in
 * smaps). Compare the files before the checkpoint with those after the
 * restore.
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
#define MAX_WORKERS 16

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
	if (heap) /* the process's own */
		fprintf(f, "heap %016llx\n", (unsigned long long)digest(heap, heap_len));
	if (sparse) { /* the parent's alone */
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

static void serve(const char *role, pid_t *children, int nr_children)
{
	sigset_t set;
	int sig, i;

	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	sigaddset(&set, SIGTERM);
	for (;;) {
		if (sigwait(&set, &sig))
			fail("sigwait");
		for (i = 0; i < nr_children; i++)
			kill(children[i], sig);
		if (sig == SIGTERM)
			exit(0);
		report(role);
	}
}

/*
 * Child nr's own heap, mapped after the fork: its alone. A heap of the
 * parent's size at the parent's address would be taken by CRIU for memory
 * the two may share copy-on-write (it matches VMAs by start and end) and
 * compared page by page on restore; a guard of nr + 1 huge pages ahead of
 * it keeps every heap at an address of its own (the kernel aligns a large
 * anonymous mapping to a huge page, which would swallow a smaller guard).
 */
static void own_heap(size_t len, int nr, uint64_t seed)
{
	if (mmap(NULL, (nr + 1) * 2 * MiB, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) == MAP_FAILED)
		fail("mmap");
	heap_len = len;
	heap = map(heap_len, MAP_PRIVATE | MAP_ANONYMOUS, -1);
	fill(heap, heap_len, seed, 1);
}

int main(int argc, char **argv)
{
	char path[4096], role[32];
	pid_t children[1 + MAX_WORKERS];
	int fd, i, opt, ready[2], nr_workers = 0;
	size_t worker_len = 0;
	sigset_t set;
	FILE *f;

	while ((opt = getopt(argc, argv, "+c:w:")) != -1) {
		switch (opt) {
		case 'c':
			cow_len = strtoul(optarg, NULL, 10) * MiB;
			break;
		case 'w':
			if (sscanf(optarg, "%d:%zu", &nr_workers, &worker_len) != 2 || nr_workers < 0 ||
			    nr_workers > MAX_WORKERS || !worker_len)
				goto usage;
			worker_len *= MiB;
			break;
		default:
			goto usage;
		}
	}
	argc -= optind - 1;
	argv += optind - 1;
	if ((argc != 3 && argc != 4) || !cow_len) {
usage:
		fprintf(stderr, "usage: memstate [-c COW_MB] [-w WORKERS:MB] HEAP_MB OUTDIR [SHARED_MB]\n");
		return 2;
	}
	page = sysconf(_SC_PAGESIZE);
	heap_len = strtoul(argv[1], NULL, 10) * MiB;
	outdir = argv[2];
	if (argc == 4)
		memfd_len = shm_len = strtoul(argv[3], NULL, 10) * MiB;

	/* Signals are taken by sigwait only; the children inherit the mask. */
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

	/* Mapped before the forks: inherited by the children. */
	if (pipe(ready))
		fail("pipe");
	for (i = 0; i <= nr_workers; i++) {
		children[i] = fork();
		if (children[i] < 0)
			fail("fork");
		if (children[i])
			continue;
		close(ready[0]);
		if (i == 0) {
			fill(cow, cow_len, 7UL << 40, 2);
			fill(shm + shm_len / 2, shm_len / 2, 8UL << 40, 1);
			snprintf(role, sizeof(role), "child");
		} else
			snprintf(role, sizeof(role), "worker%d", i);
		heap = NULL;
		if (worker_len)
			own_heap(worker_len, i, (9UL << 40) + ((uint64_t)i << 32));
		close(ready[1]);
		serve(role, NULL, 0);
	}
	close(ready[1]);
	/* Mapped after them: the parent's own, restored by CRIU's restorer. */
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
	/* Every child closes its end when it is set up. */
	if (read(ready[0], path, 1) < 0)
		fail("waiting for the children");
	close(ready[0]);
	snprintf(path, sizeof(path), "%s/roles", outdir);
	f = fopen(path, "w");
	if (!f)
		fail(path);
	fprintf(f, "parent\nchild\n");
	for (i = 1; i <= nr_workers; i++)
		fprintf(f, "worker%d\n", i);
	if (fclose(f))
		fail(path);
	snprintf(path, sizeof(path), "%s/ready", outdir);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0 || dprintf(fd, "%d\n", getpid()) < 0 || close(fd))
		fail(path);
	serve("parent", children, 1 + nr_workers);
	return 0;
}
