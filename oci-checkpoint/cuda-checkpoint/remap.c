/* GPU remap on restore. Rules (also in README.md):
 *  - old GPUs: /proc/<pid>/root/.rekindle/devices.json, in file order;
 *  - new GPUs: the /dev/nvidiaN nodes in the process's root, by minor,
 *    minor -> UUID from /proc/driver/nvidia/gpus/<bus>/information;
 *  - as many new GPUs as old, each of the model devices.json records
 *    (when it does), or the restore is refused before anything changes;
 *  - GPUs in both stay put; the rest pair up in order;
 *  - the pairs are completed to a permutation of all the host's GPUs,
 *    because the driver rejects a partial map (measured on driver 580:
 *    a lone pair GPU1->GPU0 fails with CUDA_ERROR_INVALID_VALUE, the
 *    full swap works);
 *  - an identity permutation means no pairs at all.
 * $REKINDLE_PROC replaces /proc (tests use a fake tree). */
#define _GNU_SOURCE /* O_PATH */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "remap.h"
#include "util.h"

#define NVIDIA_MAJOR 195 /* char major of /dev/nvidiaN */
#define UUID_FORM "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"

/* A GPU model as the driver names it ("NVIDIA H200"): CUDA state restores
 * only onto the model it was checkpointed on. */
#define MODEL_LEN 96

struct node {
	int minor;
	CUuuid uuid;
	char model[MODEL_LEN]; /* "" when the driver names none */
};

static const char *proc_root(void)
{
	const char *p = getenv("REKINDLE_PROC");
	return p && *p ? p : "/proc";
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9') return c - '0';
	if (c >= 'a' && c <= 'f') return c - 'a' + 10;
	if (c >= 'A' && c <= 'F') return c - 'A' + 10;
	return -1;
}

int uuid_parse(const char *s, CUuuid *u)
{
	if (strncmp(s, "GPU-", 4) == 0)
		s += 4;
	if (strlen(s) != 36)
		return -1;
	int nib = 0;
	for (int i = 0; i < 36; i++) {
		if (i == 8 || i == 13 || i == 18 || i == 23) {
			if (s[i] != '-')
				return -1;
			continue;
		}
		int v = hexval(s[i]);
		if (v < 0)
			return -1;
		if (nib % 2 == 0)
			u->bytes[nib / 2] = (unsigned char)(v << 4);
		else
			u->bytes[nib / 2] |= (unsigned char)v;
		nib++;
	}
	return 0;
}

const char *uuid_str(const CUuuid *u, char buf[48])
{
	const unsigned char *b = u->bytes;
	snprintf(buf, 48, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
		 b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7],
		 b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
	return buf;
}

static int find(const CUuuid *set, int n, const CUuuid *u)
{
	for (int i = 0; i < n; i++)
		if (!memcmp(&set[i], u, sizeof *u))
			return i;
	return -1;
}

/*
 * Open path inside the process's root, as the process would: a symlink in
 * the container resolves within it, never to a host file (we run as root
 * on the host). -1 with errno on failure.
 */
static int open_in_root(int pid, const char *path, int flags)
{
	char root[4096];
	snprintf(root, sizeof root, "%s/%d/root", proc_root(), pid);
	int rfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (rfd < 0)
		return -1;
	struct open_how how = {
		.flags = (unsigned long long)(flags | O_CLOEXEC),
		.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
	};
	int fd = (int)syscall(SYS_openat2, rfd, path, &how, sizeof how);
	int err = errno;
	close(rfd);
	errno = err;
	return fd;
}

/*
 * Opens path in pid's root for reading only when it is a regular file: the
 * entry is looked at through an O_PATH descriptor first, so a FIFO (whose
 * open would block the restore for good), a device (whose open can act) or
 * a symlink is never opened; the checked inode is then opened through that
 * descriptor. -1 with errno (ELOOP: a symlink; EINVAL: not a regular file).
 */
static int open_regular_in_root(int pid, const char *path)
{
	int pfd = open_in_root(pid, path, O_PATH | O_NOFOLLOW);
	if (pfd < 0)
		return -1;
	struct stat st;
	int fd = -1, err;
	if (fstat(pfd, &st) < 0) {
		err = errno;
	} else if (S_ISLNK(st.st_mode)) {
		err = ELOOP;
	} else if (!S_ISREG(st.st_mode)) {
		err = EINVAL;
	} else {
		char self[64];
		snprintf(self, sizeof self, "/proc/self/fd/%d", pfd);
		fd = open(self, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
		err = errno;
	}
	close(pfd);
	errno = err;
	return fd;
}

/* devices.json lists a few GPUs: anything larger is not ours. */
#define SLURP_MAX (1 << 20)

/* The whole file up to SLURP_MAX bytes, NUL-terminated; NULL with errno
 * (EFBIG: larger). Reads to EOF: /proc files report no size. */
static char *slurp(int fd)
{
	struct stat st;
	if (fstat(fd, &st) < 0)
		return NULL;
	if (!S_ISREG(st.st_mode)) {
		errno = EINVAL;
		return NULL;
	}
	size_t cap = 1 << 16, len = 0;
	char *buf = malloc(cap + 1);
	while (buf) {
		ssize_t got = read(fd, buf + len, cap - len);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0) {
			int err = errno;
			free(buf);
			errno = err;
			return NULL;
		}
		if (got == 0)
			break;
		len += (size_t)got;
		if (len > SLURP_MAX) {
			free(buf);
			errno = EFBIG;
			return NULL;
		}
		if (len == cap) {
			char *more = realloc(buf, 2 * cap + 1);
			if (!more) {
				free(buf);
				buf = NULL;
				break;
			}
			buf = more;
			cap *= 2;
		}
	}
	if (buf)
		buf[len] = 0;
	return buf;
}

static char *slurp_path(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	char *text = slurp(fd);
	int err = errno;
	close(fd);
	errno = err;
	return text;
}

/* The string value of member "key" in the JSON object obj[0..len) into
 * out, "" when absent or not a string. Escapes are left as they are: the
 * values read (model names) have none. */
static void member(const char *obj, size_t len, const char *key, char *out, size_t outlen)
{
	char pat[32];
	snprintf(pat, sizeof pat, "\"%s\"", key);
	size_t pl = strlen(pat);
	const char *end = obj + len;
	out[0] = 0;
	for (const char *p = obj; p + pl <= end; p++) {
		if (memcmp(p, pat, pl))
			continue;
		const char *q = p + pl;
		while (q < end && isspace((unsigned char)*q)) q++;
		if (q == end || *q != ':')
			continue;
		for (q++; q < end && isspace((unsigned char)*q); q++)
			;
		const char *e = q < end && *q == '"' ? memchr(q + 1, '"', (size_t)(end - q - 1)) : NULL;
		if (e) {
			size_t n = (size_t)(e - q - 1) < outlen - 1 ? (size_t)(e - q - 1) : outlen - 1;
			memcpy(out, q + 1, n);
			out[n] = 0;
		}
		return;
	}
}

/* The GPUs the container saw at checkpoint, with their models where
 * recorded ("" otherwise). 1: no file, 0: read, -1: error. */
static int read_old(int pid, const char *path, CUuuid *out, char (*models)[MODEL_LEN], int *n)
{
	*n = 0;
	int fd = open_regular_in_root(pid, "/.rekindle/devices.json");
	if (fd < 0 && errno == ENOENT)
		return 1;
	char *text = fd < 0 ? NULL : slurp(fd);
	int err = errno;
	if (fd >= 0)
		close(fd);
	if (!text) {
		if (err == EFBIG)
			fail("%s is larger than %d bytes: not a devices.json oci-checkpoint wrote", path, SLURP_MAX);
		else if (err == ELOOP)
			fail("%s is a symlink: refusing to follow it (rewrite it as a file)", path);
		else if (err == EINVAL)
			fail("%s is not a regular file: refusing to open it", path);
		else
			fail("cannot read %s: %s", path, strerror(err));
		return -1;
	}
	/* Every "uuid": "..." member, wherever it sits, and the "model" of the
	 * flat object around it: the file is a list of such objects. */
	for (char *p = text; (p = strstr(p, "\"uuid\"")); ) {
		char *obj = p, *close = strchr(p, '}');
		while (obj > text && obj[-1] != '{' && obj[-1] != '}')
			obj--;
		if (*n < MAX_GPUS)
			member(obj, (size_t)((close ? close : p + strlen(p)) - obj), "model", models[*n], MODEL_LEN);
		p += 6;
		while (isspace((unsigned char)*p)) p++;
		if (*p != ':')
			continue;
		p++;
		while (isspace((unsigned char)*p)) p++;
		char *end = *p == '"' ? strchr(p + 1, '"') : NULL;
		if (!end) {
			fail("%s: a \"uuid\" value is not a string", path);
			goto bad;
		}
		*end = 0;
		if (*n == MAX_GPUS) {
			fail("%s lists more than %d GPUs", path, MAX_GPUS);
			goto bad;
		}
		if (uuid_parse(p + 1, &out[*n])) {
			fail("%s: bad GPU UUID \"%s\" (want %s)", path, p + 1, UUID_FORM);
			goto bad;
		}
		if (find(out, *n, &out[*n]) >= 0) {
			fail("%s lists GPU %s twice", path, p + 1);
			goto bad;
		}
		(*n)++;
		p = end + 1;
	}
	free(text);
	return 0;
bad:
	free(text);
	return -1;
}

/* Minor and UUID of every GPU the driver exposes in /proc. */
static int read_driver_gpus(struct node *out, int *n)
{
	char dir[4096], path[4400];
	snprintf(dir, sizeof dir, "%s/driver/nvidia/gpus", proc_root());
	DIR *d = opendir(dir);
	if (!d) {
		fail("cannot list %s: %s (is the NVIDIA driver loaded?)", dir, strerror(errno));
		return -1;
	}
	*n = 0;
	struct dirent *e;
	int ret = 0;
	while (ret == 0 && (e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof path, "%s/%s/information", dir, e->d_name);
		char *text = slurp_path(path);
		if (!text) {
			fail("cannot read %s: %s", path, strerror(errno));
			ret = -1;
			break;
		}
		char *uuid = strstr(text, "GPU UUID:"), *minor = strstr(text, "Device Minor:");
		char *model = strstr(text, "Model:");
		if (*n == MAX_GPUS) {
			fail("%s lists more than %d GPUs, the most this tool handles", dir, MAX_GPUS);
			ret = -1;
		} else if (!uuid || !minor) {
			fail("%s: no \"GPU UUID:\" or \"Device Minor:\" line", path);
			ret = -1;
		} else {
			out[*n].model[0] = 0;
			if (model) {
				model += 6;
				model += strspn(model, " \t");
				size_t len = strcspn(model, "\n");
				while (len > 0 && isspace((unsigned char)model[len - 1]))
					len--;
				snprintf(out[*n].model, MODEL_LEN, "%.*s", (int)len, model);
			}
			uuid += 9;
			while (*uuid == ' ' || *uuid == '\t') uuid++;
			uuid[strcspn(uuid, " \t\n")] = 0;
			out[*n].minor = atoi(minor + 13);
			if (uuid_parse(uuid, &out[*n].uuid)) {
				fail("%s: bad GPU UUID \"%s\" (want %s)", path, uuid, UUID_FORM);
				ret = -1;
			}
			(*n)++;
		}
		free(text);
	}
	closedir(d);
	return ret;
}

static int is_gpu_node(const char *name)
{
	if (strncmp(name, "nvidia", 6) || !name[6])
		return 0;
	for (const char *p = name + 6; *p; p++)
		if (!isdigit((unsigned char)*p))
			return 0;
	return 1;
}

/* The GPUs the restored process can open: /dev/nvidiaN in its root, by
 * minor, among the host's gpus. */
static int read_visible(int pid, const struct node *gpus, int ngpus, CUuuid *out, int *n)
{
	int minors[MAX_GPUS], nm = 0;

	char dir[4096];
	snprintf(dir, sizeof dir, "%s/%d/root/dev", proc_root(), pid);
	int dfd = open_in_root(pid, "/dev", O_RDONLY | O_DIRECTORY);
	DIR *d = dfd < 0 ? NULL : fdopendir(dfd);
	if (!d) {
		fail("cannot list %s: %s", dir, strerror(errno));
		if (dfd >= 0)
			close(dfd);
		return -1;
	}
	struct dirent *e;
	while ((e = readdir(d)) && nm < MAX_GPUS) {
		if (!is_gpu_node(e->d_name))
			continue;
		/* The node's own minor counts, not its name. A plain file (test
		 * trees) falls back to the number in the name. */
		struct stat st;
		int m = atoi(e->d_name + 6);
		/* Not followed: a symlink in the container's /dev is not a GPU node. */
		if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISCHR(st.st_mode) &&
		    major(st.st_rdev) == NVIDIA_MAJOR)
			m = (int)minor(st.st_rdev);
		note("%s/%s: GPU minor %d", dir, e->d_name, m);
		int i = nm++;
		for (; i > 0 && minors[i - 1] > m; i--) /* insertion sort */
			minors[i] = minors[i - 1];
		minors[i] = m;
	}
	closedir(d);

	*n = 0;
	for (int i = 0; i < nm; i++) {
		if (i > 0 && minors[i] == minors[i - 1])
			continue;
		int j = 0;
		while (j < ngpus && gpus[j].minor != minors[i])
			j++;
		if (j == ngpus) {
			fail("%s has GPU minor %d, which %s/driver/nvidia/gpus does not list", dir, minors[i], proc_root());
			return -1;
		}
		out[(*n)++] = gpus[j].uuid;
	}
	if (*n == 0) {
		fail("%s holds no /dev/nvidiaN: the restored process has no GPU to restore onto", dir);
		return -1;
	}
	return 0;
}

static int parse_map(const char *map, CUcheckpointGpuPair *p, int *n)
{
	char *copy = strdup(map), *save = NULL, buf[48];
	int ret = 0;
	*n = 0;
	for (char *tok = strtok_r(copy, ", ", &save); tok && !ret; tok = strtok_r(NULL, ", ", &save)) {
		char *eq = strchr(tok, '=');
		if (!eq) {
			fail("bad device map entry \"%s\": want OLD=NEW (GPU UUIDs)", tok);
			ret = -1;
			break;
		}
		*eq = 0;
		const char *bad = NULL;
		if (uuid_parse(tok, &p[*n].oldUuid))
			bad = tok;
		else if (uuid_parse(eq + 1, &p[*n].newUuid))
			bad = eq + 1;
		if (bad) {
			fail("bad GPU UUID \"%s\" in the device map (want %s)", bad, UUID_FORM);
			ret = -1;
		} else if (*n == MAX_GPUS) {
			fail("the device map names more than %d GPUs", MAX_GPUS);
			ret = -1;
		} else {
			for (int i = 0; i < *n && !ret; i++) {
				if (!memcmp(&p[i].oldUuid, &p[*n].oldUuid, sizeof(CUuuid))) {
					fail("the device map is not a bijection: %s is mapped twice", uuid_str(&p[i].oldUuid, buf));
					ret = -1;
				} else if (!memcmp(&p[i].newUuid, &p[*n].newUuid, sizeof(CUuuid))) {
					fail("the device map is not a bijection: two GPUs are mapped onto %s", uuid_str(&p[i].newUuid, buf));
					ret = -1;
				}
			}
			(*n)++;
		}
	}
	free(copy);
	if (!ret && *n == 0) {
		fail("empty device map: want OLD=NEW,... or none");
		ret = -1;
	}
	return ret;
}

static int same_set(const CUuuid *a, int na, const CUuuid *b, int nb)
{
	if (na != nb)
		return 0;
	for (int i = 0; i < na; i++)
		if (find(b, nb, &a[i]) < 0)
			return 0;
	return 1;
}

/* Gives the restored process a /dev/nvidiaN for each of gpus that its /dev
 * lacks, as the container runtime would have made it: the driver opens
 * the node of the GPU it restores onto, in the process's own root. */
static int make_nodes(int pid, const struct node *all, int nall, const CUuuid *gpus, int n)
{
	int dfd = open_in_root(pid, "/dev", O_RDONLY | O_DIRECTORY);
	if (dfd < 0) {
		fail("cannot open /dev of pid %d: %s", pid, strerror(errno));
		return -1;
	}
	int ret = 0;
	for (int i = 0; i < n && !ret; i++) {
		int j = 0;
		while (j < nall && memcmp(&all[j].uuid, &gpus[i], sizeof(CUuuid)))
			j++;
		if (j == nall)
			continue;
		char name[32], b[48];
		struct stat st;
		snprintf(name, sizeof name, "nvidia%d", all[j].minor);
		if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0)
			continue;
		/* The node is made 0666 at once, with no umask: a chmod by name
		 * after it would follow a symlink that the restored (running,
		 * untrusted) process may put in its place, and chmod a host
		 * file. The umask is the process's, but is cleared only for this
		 * one call. An entry that appeared since the fstatat (EEXIST)
		 * is an error, never touched. */
		mode_t mask = umask(0);
		int r = mknodat(dfd, name, S_IFCHR | 0666, makedev(NVIDIA_MAJOR, all[j].minor));
		int err = errno;
		umask(mask);
		if (r < 0) {
			fail("cannot create /dev/%s for %s in pid %d's root: %s", name, uuid_str(&gpus[i], b), pid,
			     strerror(err));
			ret = -1;
		} else {
			note("pid %d: created /dev/%s (%s) in its root", pid, name, uuid_str(&gpus[i], b));
		}
	}
	close(dfd);
	return ret;
}

/* Pairs from devices.json and the process's /dev. 1: restore without remap. */
static int auto_pairs(int pid, const CUuuid *host, int nhost, CUcheckpointGpuPair *p, int *n)
{
	struct node gpus[MAX_GPUS];
	CUuuid old[MAX_GPUS], vis[MAX_GPUS];
	char models[MAX_GPUS][MODEL_LEN], a[48], b[48];
	int ngpus, nold, nvis;
	char json[4096];
	snprintf(json, sizeof json, "%s/%d/root/.rekindle/devices.json", proc_root(), pid);

	if (read_driver_gpus(gpus, &ngpus) || read_visible(pid, gpus, ngpus, vis, &nvis))
		return -1;
	/* In a container, CRIU restores /dev as it was dumped, with the nodes of
	 * the GPUs the process ran on, while the new container's device cgroup
	 * lets the driver show this process only the GPUs it was given. When
	 * /dev names a GPU outside that narrowed view, the view is the truth. */
	int stale = 0;
	for (int i = 0; i < nvis; i++)
		stale |= find(host, nhost, &vis[i]) < 0;
	int narrowed = stale && nhost > 0 && nhost < ngpus;
	char view[128] = "";
	if (narrowed) {
		note("pid %d: its /dev holds the checkpoint's GPU nodes; the driver shows it %d of the host's %d GPUs:"
		     " restoring onto those", pid, nhost, ngpus);
		memcpy(vis, host, (size_t)nhost * sizeof *host);
		nvis = nhost;
		snprintf(view, sizeof view, " (the driver shows it %d of this host's %d GPUs)", nhost, ngpus);
	}
	int r = read_old(pid, json, old, models, &nold);
	if (r < 0)
		return -1;
	if (r == 1) {
		if (same_set(vis, nvis, host, nhost)) {
			note("pid %d: no %s and it sees all %d GPUs: restoring without remap", pid, json, nhost);
			return narrowed && make_nodes(pid, gpus, ngpus, vis, nvis) ? -1 : 1;
		}
		fail("no %s, so the GPUs pid %d was checkpointed on are unknown, and it sees %d of this host's %d GPUs"
		     " (record devices.json at checkpoint, or set REKINDLE_DEVICE_MAP=OLD=NEW,...|none)",
		     json, pid, nvis, nhost);
		return -1;
	}
	if (nold == 0) {
		fail("%s lists no GPUs", json);
		return -1;
	}
	/* Counts and models are refused before anything changes: no driver
	 * call, no device node made. */
	if (nold > ngpus) {
		fail("the checkpoint used %d GPUs but this host has %d", nold, ngpus);
		return -1;
	}
	if (nold != nvis) {
		fail("the checkpoint used %d GPU(s) but the restored container sees %d%s: give it %d GPU(s)%s%s"
		     " (one --device nvidia.com/gpu=N each)", nold, nvis, view, nold,
		     models[0][0] ? " of model " : "", models[0]);
		return -1;
	}
	/* GPUs in both stay put; the others pair up in order. */
	int used_old[MAX_GPUS] = { 0 }, used_vis[MAX_GPUS] = { 0 }, from[MAX_GPUS];
	*n = 0;
	for (int i = 0; i < nold; i++) {
		int j = find(vis, nvis, &old[i]);
		if (j >= 0) {
			p[*n].oldUuid = p[*n].newUuid = old[i];
			from[(*n)++] = i;
			used_old[i] = used_vis[j] = 1;
		}
	}
	for (int i = 0, j = 0; i < nold; i++) {
		if (used_old[i])
			continue;
		while (used_vis[j])
			j++;
		p[*n].oldUuid = old[i];
		p[*n].newUuid = vis[j++];
		from[(*n)++] = i;
	}
	for (int k = 0; k < *n; k++) {
		const char *was = models[from[k]];
		int j = 0;
		while (j < ngpus && memcmp(&gpus[j].uuid, &p[k].newUuid, sizeof(CUuuid)))
			j++;
		if (was[0] && j < ngpus && gpus[j].model[0] && strcmp(was, gpus[j].model)) {
			fail("the checkpoint ran on %s (%s) but the restored container's GPU %s is %s: CUDA state restores"
			     " only onto the same GPU model; give it %d GPU(s) of model %s", was, uuid_str(&p[k].oldUuid, a),
			     uuid_str(&p[k].newUuid, b), gpus[j].model, nold, was);
			return -1;
		}
	}
	return narrowed && make_nodes(pid, gpus, ngpus, vis, nvis) ? -1 : 0;
}

/* Extends the pairs to a permutation of the host's GPUs: a host GPU that
 * is neither source nor target keeps its place; the remaining sources
 * (host GPUs vacated) take the remaining targets in order. */
static void complete(CUcheckpointGpuPair *p, int *n, const CUuuid *host, int nhost)
{
	CUuuid from[MAX_GPUS], to[MAX_GPUS];
	int m = *n, nf = 0, nt = 0;
	for (int h = 0; h < nhost; h++) {
		int src = 0, dst = 0;
		for (int k = 0; k < m; k++) {
			src |= !memcmp(&p[k].oldUuid, &host[h], sizeof(CUuuid));
			dst |= !memcmp(&p[k].newUuid, &host[h], sizeof(CUuuid));
		}
		if (!src && !dst) {
			p[*n].oldUuid = p[*n].newUuid = host[h];
			(*n)++;
		} else if (!src) {
			from[nf++] = host[h];
		} else if (!dst) {
			to[nt++] = host[h];
		}
	}
	for (int i = 0; i < nf && i < nt; i++) {
		p[*n].oldUuid = from[i];
		p[*n].newUuid = to[i];
		(*n)++;
	}
}

/* What the driver shows this process, for a failed plan: inside a
 * container's device cgroup (CRIU restores into it) it lists only the GPUs
 * that cgroup allows, which can differ from the nodes a restored /dev holds. */
static const char *driver_view(const CUuuid *host, int nhost, char *out, size_t len)
{
	char b[48], line[512];
	size_t k = (size_t)snprintf(out, len, "the driver lists %d GPU(s) to this process (", nhost);
	for (int i = 0; i < nhost && k < len; i++)
		k += (size_t)snprintf(out + k, len - k, "%s%s", i ? ", " : "", uuid_str(&host[i], b));
	if (k < len)
		k += (size_t)snprintf(out + k, len - k, ")");
	FILE *f = fopen("/proc/self/cgroup", "r");
	while (f && fgets(line, sizeof line, f) && k < len) {
		/* v1's devices controller, or v2's single hierarchy */
		if (strstr(line, ":devices:") || !strncmp(line, "0::", 3)) {
			line[strcspn(line, "\n")] = 0;
			k += (size_t)snprintf(out + k, len - k, " in device cgroup %s", line);
			break;
		}
	}
	if (f)
		fclose(f);
	return out;
}

int plan_restore(int pid, const char *map, const CUuuid *host, int nhost,
		 CUcheckpointGpuPair *pairs, int *n)
{
	char a[48], b[48];
	*n = 0;
	if (!map || !*map)
		map = getenv("REKINDLE_DEVICE_MAP");
	if (map && !*map)
		map = NULL;
	if (map && !strcmp(map, "none")) {
		note("pid %d: device map \"none\": restoring without remap", pid);
		return 0;
	}
	if (map) {
		if (parse_map(map, pairs, n))
			return -1;
		if (*n > nhost) {
			fail("the device map names %d GPUs but this host has %d", *n, nhost);
			return -1;
		}
	} else {
		int r = auto_pairs(pid, host, nhost, pairs, n);
		if (r)
			return r < 0 ? -1 : 0;
	}
	for (int i = 0; i < *n; i++) {
		if (find(host, nhost, &pairs[i].newUuid) < 0) {
			char view[MAX_GPUS * 48 + 768];
			fail("cannot restore onto %s: the driver does not see that GPU on this host; %s",
			     uuid_str(&pairs[i].newUuid, a), driver_view(host, nhost, view, sizeof view));
			return -1;
		}
	}
	complete(pairs, n, host, nhost);

	int moved = 0;
	for (int i = 0; i < *n; i++)
		moved |= memcmp(&pairs[i].oldUuid, &pairs[i].newUuid, sizeof(CUuuid)) != 0;
	if (!moved) {
		note("pid %d: GPUs unchanged: restoring without remap", pid);
		*n = 0;
		return 0;
	}
	for (int i = 0; i < *n; i++)
		note("pid %d: remap %s -> %s", pid, uuid_str(&pairs[i].oldUuid, a), uuid_str(&pairs[i].newUuid, b));
	return 0;
}
