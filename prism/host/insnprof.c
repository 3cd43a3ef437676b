// SPDX-License-Identifier: GPL-2.0
/*
 * insnprof: a QEMU TCG plugin counting the guest kernel's executed
 * instructions per translation block, for `prism profile`.
 *
 * Every kernel-address block gets a counter that QEMU bumps inline each
 * time the block runs (the block's instruction count is kept beside it).
 * A thread polls $PRISM_INSNPROF_DIR for mark-N files, which the guest
 * writes through the shared run directory; on each it writes snap-N
 * ("vaddr instructions executions" per block) and then done-N, which the
 * guest waits for. The difference of two snapshots is what ran between
 * two marks: with -icount, exactly the instructions the guest executed.
 *
 * No QEMU header is packaged in Debian, so the few entry points used are
 * declared here from QEMU's documented plugin API (version 1, QEMU 7.2;
 * later QEMUs still accept it or say that they do not).
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

typedef uint64_t qemu_plugin_id_t;
struct qemu_plugin_tb;
typedef struct {
	const char *target_name;
	struct {
		int min;
		int cur;
	} version;
	bool system_emulation;
} qemu_info_t;
enum qemu_plugin_op { QEMU_PLUGIN_INLINE_ADD_U64 };
typedef void (*tb_trans_cb)(qemu_plugin_id_t id, struct qemu_plugin_tb *tb);

void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id, tb_trans_cb cb);
void qemu_plugin_register_vcpu_tb_exec_inline(struct qemu_plugin_tb *tb,
					      enum qemu_plugin_op op,
					      void *ptr, uint64_t imm);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
uint64_t qemu_plugin_tb_vaddr(const struct qemu_plugin_tb *tb);

EXPORT int qemu_plugin_version = 1;

/* x86-64's kernel half: user space (fio's own work) is left out. */
#define KERNEL_START	0xffff800000000000ULL
#define CHUNK		65536

struct block {
	uint64_t vaddr;
	uint64_t insns;
	uint64_t execs;		/* bumped by QEMU's inline op */
};

/* Blocks in chunks that never move: QEMU holds pointers into them. */
static struct block **chunks;
static size_t nr_blocks, nr_chunks;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static const char *dir;

static void translated(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
	uint64_t vaddr = qemu_plugin_tb_vaddr(tb);
	struct block *b;

	(void)id;
	if (vaddr < KERNEL_START)
		return;
	pthread_mutex_lock(&lock);
	if (nr_blocks == nr_chunks * CHUNK) {
		struct block **more = realloc(chunks, (nr_chunks + 1) * sizeof(*more));

		if (!more || !(more[nr_chunks] = calloc(CHUNK, sizeof(struct block)))) {
			pthread_mutex_unlock(&lock);
			fprintf(stderr, "insnprof: out of memory\n");
			abort();
		}
		chunks = more;
		nr_chunks++;
	}
	b = &chunks[nr_blocks / CHUNK][nr_blocks % CHUNK];
	b->vaddr = vaddr;
	b->insns = qemu_plugin_tb_n_insns(tb);
	nr_blocks++;
	pthread_mutex_unlock(&lock);
	qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64,
						 &b->execs, 1);
}

static int snapshot(int n)
{
	char path[4096];
	size_t i, count;
	FILE *f;

	snprintf(path, sizeof(path), "%s/snap-%d", dir, n);
	f = fopen(path, "w");
	if (!f)
		return -1;
	pthread_mutex_lock(&lock);
	count = nr_blocks;
	pthread_mutex_unlock(&lock);
	for (i = 0; i < count; i++) {
		const struct block *b = &chunks[i / CHUNK][i % CHUNK];

		if (b->execs)
			fprintf(f, "%" PRIx64 " %" PRIu64 " %" PRIu64 "\n",
				b->vaddr, b->insns, b->execs);
	}
	return fclose(f);
}

static void *poll_marks(void *arg)
{
	char path[4096];
	int n = 1;
	FILE *f;

	(void)arg;
	for (;;) {
		snprintf(path, sizeof(path), "%s/mark-%d", dir, n);
		if (access(path, F_OK)) {
			usleep(2000);
			continue;
		}
		if (snapshot(n))
			fprintf(stderr, "insnprof: cannot write snap-%d\n", n);
		snprintf(path, sizeof(path), "%s/done-%d", dir, n);
		f = fopen(path, "w");
		if (f)
			fclose(f);
		n++;
	}
	return NULL;
}

EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info,
			       int argc, char **argv)
{
	pthread_t thread;

	(void)info;
	(void)argc;
	(void)argv;
	dir = getenv("PRISM_INSNPROF_DIR");
	if (!dir) {
		fprintf(stderr, "insnprof: PRISM_INSNPROF_DIR is not set\n");
		return 1;
	}
	qemu_plugin_register_vcpu_tb_trans_cb(id, translated);
	if (pthread_create(&thread, NULL, poll_marks, NULL))
		return 1;
	return 0;
}
