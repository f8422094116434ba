/*
 * pagefill FILE THREADS [direct]: read FILE with pread() into freshly mapped
 * anonymous memory from THREADS threads, each taking 8 MiB chunks in turn,
 * and print the rate as JSON. This is what a CRIU restore does with a pages
 * image, page faults included, so it is the floor a restore of FILE's bytes
 * is held to. Warm the page cache first (cat FILE >/dev/null) to measure
 * memory, not disk; with "direct" the file is read with O_DIRECT, past the
 * page cache (drop it first to measure the disk: the cold floor).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CHUNK (8L << 20)

static int fd;
static char *dst;
static long size, nr_chunks;
static atomic_long next;

static void *worker(void *arg)
{
	long i;

	(void)arg;
	while ((i = atomic_fetch_add(&next, 1)) < nr_chunks) {
		long off = i * CHUNK, len = size - off < CHUNK ? size - off : CHUNK;

		while (len > 0) {
			ssize_t r = pread(fd, dst + off, len, off);

			if (r <= 0) {
				perror("pread");
				exit(1);
			}
			off += r;
			len -= r;
		}
	}
	return NULL;
}

int main(int argc, char **argv)
{
	struct timespec a, b;
	pthread_t *t;
	struct stat st;
	double secs;
	int n, i, direct;

	if (argc < 3 || argc > 4 || (n = atoi(argv[2])) < 1 || (argc == 4 && strcmp(argv[3], "direct"))) {
		fprintf(stderr, "usage: pagefill FILE THREADS [direct]\n");
		return 2;
	}
	direct = argc == 4;
	/* O_DIRECT: the chunks and the mapping are page-aligned, as is a pages image's size. */
	fd = open(argv[1], O_RDONLY | (direct ? O_DIRECT : 0));
	if (fd < 0 || fstat(fd, &st)) {
		perror(argv[1]);
		return 1;
	}
	size = st.st_size;
	nr_chunks = (size + CHUNK - 1) / CHUNK;
	dst = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	t = calloc(n, sizeof(*t));
	if (dst == MAP_FAILED || !t) {
		perror("mmap");
		return 1;
	}
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (i = 0; i < n; i++)
		pthread_create(&t[i], NULL, worker, NULL);
	for (i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	clock_gettime(CLOCK_MONOTONIC, &b);
	secs = (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9;
	printf("{\"threads\": %d, \"direct\": %s, \"bytes\": %ld, \"seconds\": %.4f, \"gbps\": %.3f}\n", n,
	       direct ? "true" : "false", size, secs, size / secs / 1e9);
	return 0;
}
