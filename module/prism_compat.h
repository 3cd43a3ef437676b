/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Every difference between the supported kernels (Debian's 6.1 and 6.12
 * LTS, and trixie-backports' 7.3) that prism meets lives here, so the
 * scheduler itself reads the same for all. See ../shared/KERNEL-NOTES.md
 * for how each was established. A change is told by a macro it brought
 * where there is one, else at build time from the very source and
 * headers the module is built against (Kbuild defines PRISM_*): a
 * version number would lie where a stable release took the change, and
 * checkpatch rejects LINUX_VERSION_CODE.
 */
#ifndef _PRISM_COMPAT_H
#define _PRISM_COMPAT_H

#include <linux/blk-mq.h>
#include <linux/hrtimer.h>
#include <linux/module.h>
#include <linux/sbitmap.h>

#include "prism_policy.h"

/*
 * Timestamps and counters of 64 bits (a flow's done_ns, the books'
 * inserted count, a flow's window) are read without the lock that
 * writes them: READ_ONCE of a u64 is one load on a 64-bit kernel but two
 * on a 32-bit one, where a reader could see half of an update. Rather
 * than carry atomic64_t through the hot path for machines nobody runs a
 * multi-queue disk on, prism builds for 64-bit kernels only.
 */
#ifndef CONFIG_64BIT
#error "prism-iosched needs a 64-bit kernel: it reads 64-bit counters without a lock"
#endif

/*
 * The oldest and newest Linux series prism is tested on ("6.1 to 6.12"),
 * from module/kernel-range: `modinfo -F tested_kernels prism-iosched`.
 * Kbuild defines it for prism_sched.o only, so the field appears once.
 */
#ifdef PRISM_TESTED_KERNELS
MODULE_INFO(tested_kernels, PRISM_TESTED_KERNELS);
#endif

/*
 * struct blk_mq_tags lives in the private block/blk-mq-tag.h on 6.1 and in
 * <linux/blk-mq.h> on 6.12, where that header is gone. Included after the
 * other private headers.
 */
#if __has_include("blk-mq-tag.h")
#include "blk-mq-tag.h"
#endif

/*
 * insert_requests() took "bool at_head" until 6.5, then a blk_insert_t
 * flags word with BLK_MQ_INSERT_AT_HEAD (a macro of block/blk-mq.h, so
 * its presence tells which one this kernel has).
 */
#ifdef BLK_MQ_INSERT_AT_HEAD
#define prism_insert_t blk_insert_t

static inline bool prism_insert_at_head(prism_insert_t flags)
{
	return flags & BLK_MQ_INSERT_AT_HEAD;
}
#else
#define prism_insert_t bool

static inline bool prism_insert_at_head(prism_insert_t at_head)
{
	return at_head;
}
#endif

/*
 * blk_mq_alloc_data.shallow_depth limits one sbitmap word on older
 * kernels and the whole bitmap on newer ones; the change reached 6.12.117
 * as a stable backport, so the kernel version cannot tell. The build
 * looks at the matching source (6.1's mq-deadline converts with a
 * word-depth helper) and defines PRISM_SHALLOW_DEPTH_PER_WORD.
 *
 * Returns the shallow_depth value that lets at most @depth scheduler tags
 * be taken. Per word, it is computed from the bitmap as it is, whose last
 * word sbitmap_resize() leaves partial when nr_requests is lowered
 * (upstream 42e6c6ce03fd fixed the same in the kernel's conversion).
 * Never 0: 0 means "no limit".
 */
static inline unsigned int prism_shallow_depth(struct blk_mq_hw_ctx *hctx,
					       unsigned int depth)
{
#ifdef PRISM_SHALLOW_DEPTH_PER_WORD
	const struct sbitmap *sb = &hctx->sched_tags->bitmap_tags.sb;

	return prism_word_depth(depth, READ_ONCE(sb->depth), sb->shift);
#else
	return depth ? depth : 1;
#endif
}

/*
 * Whether the core ran prepare_request() for @rq, and so will run
 * finish_request() for it. 6.1 marks it RQF_ELVPRIV and skips flush
 * requests (FUA, PREFLUSH), which it routes past the elevator but which
 * a driver requeue can still bring to insert_requests() with stale
 * elv.priv[]; it prepares passthrough requests (see
 * prism_rq_passthrough()). 6.12 prepares every request with
 * RQF_USE_SCHED, and only those reach the elevator: every request but
 * REQ_OP_FLUSH and passthrough, a PREFLUSH or FUA write with data
 * included, which its flush machinery inserts at head for its data step.
 */
static inline bool prism_rq_prepared(const struct request *rq)
{
#ifdef RQF_ELVPRIV
	return rq->rq_flags & RQF_ELVPRIV;
#else
	return rq->rq_flags & RQF_USE_SCHED;
#endif
}

/*
 * A passthrough request in insert_requests(). 6.1 sends passthrough
 * requests straight to the dispatch list (blk_mq_sched_bypass_insert():
 * one may be part of error handling), except those put on a plug
 * (blk_execute_rq_nowait() under current->plug: io_uring's NVMe
 * passthrough), which its plug flush hands to insert_requests(), prepared,
 * like file system I/O. prism then serves them at head, as the core
 * meant; upstream made the plug flush keep them from the elevator in 6.4.
 * 6.12 never prepares them, so never inserts them: false there, and the
 * test folds away.
 */
static inline bool prism_rq_passthrough(struct request *rq)
{
#ifdef RQF_ELVPRIV
	return blk_rq_is_passthrough(rq);
#else
	return false;
#endif
}

/*
 * The clock for statistics: since 6.9 the core's blk_time_get_ns(), which
 * in a plugged task reads the clock once per plug, as the core stamps
 * its own requests (start_time_ns); before, ktime_get_ns(). PF_BLOCK_TS
 * came with it.
 */
static inline u64 prism_stat_clock(void)
{
#ifdef PF_BLOCK_TS
	return blk_time_get_ns();
#else
	return ktime_get_ns();
#endif
}

/*
 * Whether the device keeps written data in a volatile cache, so that a
 * write completes before it reaches the media: QUEUE_FLAG_WC on 6.1 (a
 * macro there; blk_queue_write_cache() is its setter), the queue's
 * limits on 6.12, where blk_queue_write_cache() reads them.
 */
static inline bool prism_write_back(struct request_queue *q)
{
#ifdef QUEUE_FLAG_WC
	return test_bit(QUEUE_FLAG_WC, &q->queue_flags);
#else
	return blk_queue_write_cache(q);
#endif
}

/*
 * init_sched() allocated its elevator_queue (elevator_alloc()) until 6.17
 * and 6.16.y (49811586be37); since, the core allocates it, with the
 * scheduler tags, before it freezes the queue, passes it in, and puts it
 * when init_sched() fails; elevator_alloc() is no longer exported. A
 * stable backport makes the version lie: the build tells from the
 * source's elevator.h (PRISM_INIT_SCHED_EQ). prism_init_sched() takes a
 * prism_init_sched_t, sets up the elevator_queue prism_init_eq() gives
 * and, failing, hands it to prism_init_eq_failed().
 */
#ifdef PRISM_INIT_SCHED_EQ
#define prism_init_sched_t struct elevator_queue *

static inline struct elevator_queue *prism_init_eq(struct request_queue *q,
						   struct elevator_queue *eq)
{
	return eq;
}

/* The core puts it (block/blk-mq-sched.c, blk_mq_init_sched()). */
static inline void prism_init_eq_failed(struct elevator_queue *eq)
{
}
#else
#define prism_init_sched_t struct elevator_type *

static inline struct elevator_queue *prism_init_eq(struct request_queue *q,
						   struct elevator_type *e)
{
	return elevator_alloc(q, e);
}

static inline void prism_init_eq_failed(struct elevator_queue *eq)
{
	kobject_put(&eq->kobj);
}
#endif

/*
 * Wake-up batches of the scheduler tags must suit the smallest shallow
 * depth limit_depth() sets (1). depth_updated() ran for each hardware
 * queue until 7d337eef4aff (6.18, and 6.17.y by backport); since, it runs
 * once for the queue, after nr_requests or async_depth changed, and no
 * longer when the scheduler starts, so init_hctx() sets each hardware
 * queue's itself. Told from the source's elevator.h
 * (PRISM_DEPTH_UPDATED_Q), as the backport makes the version lie.
 */
static inline void prism_hctx_min_shallow_depth(struct blk_mq_hw_ctx *hctx)
{
	sbitmap_queue_min_shallow_depth(&hctx->sched_tags->bitmap_tags, 1);
}

#ifdef PRISM_DEPTH_UPDATED_Q
#define prism_depth_updated_t struct request_queue *

static inline void prism_min_shallow_depth(struct request_queue *q)
{
	blk_mq_set_min_shallow_depth(q, 1);
}
#else
#define prism_depth_updated_t struct blk_mq_hw_ctx *

static inline void prism_min_shallow_depth(struct blk_mq_hw_ctx *hctx)
{
	prism_hctx_min_shallow_depth(hctx);
}
#endif

/*
 * Since 7.0 the async-request limit is the queue's (q->async_depth,
 * /sys/block/<dev>/queue/async_depth), which each scheduler sets when it
 * starts and applies in its limit_depth() (mq-deadline.c:559, bfq's 3/4,
 * kyber's 75 %); the core only scales it with nr_requests and calls
 * depth_updated() when it is written. prism's tag limits are its own,
 * so it sets no async limit, as mq-deadline by default: the attribute
 * then reads as what prism does rather than the last scheduler's value.
 * The build looks for the field in <linux/blkdev.h>
 * (PRISM_QUEUE_ASYNC_DEPTH).
 */
static inline void prism_async_depth_init(struct request_queue *q)
{
#ifdef PRISM_QUEUE_ASYNC_DEPTH
	q->async_depth = q->nr_requests;
#endif
}

/*
 * prism's debugfs files (queue_debugfs_attrs) find its data through
 * q->elevator. On 6.1 and 6.12 the core removes them in
 * blk_mq_exit_sched() before exit_sched() frees that data, and debugfs
 * removal waits for readers. On 7.3 they are removed only after the
 * switch, in elevator_change_done() (elevator.c:494, via
 * elv_unregister_queue()), once the queue is unfrozen: a read between
 * prism's exit_sched() and then would find q->elevator NULL or another
 * scheduler's, and one that began before it, prism's data freed under
 * it. q->elevator_lock (6.15) is held across each switch (asserted at
 * elevator.c:568; taken at 616, 679, 709) and by the core's own debugfs
 * files (blk-mq-debugfs.c:421); no debugfs file is removed under it, and
 * a show allocates nothing (seq_read() sizes the buffer outside it), so
 * a freeze cannot wait on a reader. Where it exists, a prism
 * file is read under it, and only while q->elevator is prism's; the
 * build looks for the lock in <linux/blkdev.h> (PRISM_ELEVATOR_LOCK).
 * Before, these do nothing.
 */
#ifdef PRISM_ELEVATOR_LOCK
static inline int prism_debugfs_lock(struct request_queue *q)
{
	int ret = mutex_lock_interruptible(&q->elevator_lock);

	if (ret)
		return ret;
	if (!q->elevator || q->elevator->type->elevator_owner != THIS_MODULE) {
		mutex_unlock(&q->elevator_lock);
		return -ENODEV;
	}
	return 0;
}

static inline void prism_debugfs_unlock(struct request_queue *q)
{
	mutex_unlock(&q->elevator_lock);
}
#else
static inline int prism_debugfs_lock(struct request_queue *q)
{
	return 0;
}

static inline void prism_debugfs_unlock(struct request_queue *q)
{
}
#endif

/*
 * Whether the queue's device rotates: blk_queue_nonrot() until it gave
 * way to its opposite, blk_queue_rot(), both macros of <linux/blkdev.h>.
 */
#ifndef blk_queue_nonrot
#define blk_queue_nonrot(q)	(!blk_queue_rot(q))
#endif

/*
 * Writeback throttling off for prism's queues, as bfq does, and back to
 * the queue's default when prism leaves. 6.1's wbt_*_default() take the
 * queue; later kernels take the disk and keep a flag that
 * wbt_enable_default() obeys (a queue re-registered under prism stays
 * off): on 6.12 an elevator flag, on 7.x the queue flag
 * QUEUE_FLAG_DISABLE_WBT_DEF (an enum: its test macro tells), which
 * outlives the elevator, so prism clears it when it leaves.
 */
static inline void prism_wbt_off(struct request_queue *q,
				 struct elevator_queue *eq)
{
#if defined(blk_queue_disable_wbt)
	blk_queue_flag_set(QUEUE_FLAG_DISABLE_WBT_DEF, q);
	wbt_disable_default(q->disk);
#elif defined(ELEVATOR_FLAG_DISABLE_WBT)
	set_bit(ELEVATOR_FLAG_DISABLE_WBT, &eq->flags);
	wbt_disable_default(q->disk);
#else
	wbt_disable_default(q);
#endif
}

static inline void prism_wbt_default(struct request_queue *q,
				     struct elevator_queue *eq)
{
#if defined(blk_queue_disable_wbt)
	blk_queue_flag_clear(QUEUE_FLAG_DISABLE_WBT_DEF, q);
	wbt_enable_default(q->disk);
#elif defined(ELEVATOR_FLAG_DISABLE_WBT)
	clear_bit(ELEVATOR_FLAG_DISABLE_WBT, &eq->flags);
	wbt_enable_default(q->disk);
#else
	wbt_enable_default(q);
#endif
}

/*
 * A relative CLOCK_MONOTONIC hrtimer running @fn. hrtimer_setup() came in
 * 6.13 and took over from hrtimer_init(), which later kernels no longer
 * have; its callback became private to the timer code (__private). The
 * build looks for it in <linux/hrtimer.h> (PRISM_HRTIMER_SETUP).
 */
static inline void prism_hrtimer_setup(struct hrtimer *timer,
				       enum hrtimer_restart (*fn)(struct hrtimer *))
{
#ifdef PRISM_HRTIMER_SETUP
	hrtimer_setup(timer, fn, CLOCK_MONOTONIC, HRTIMER_MODE_REL);
#else
	hrtimer_init(timer, CLOCK_MONOTONIC, HRTIMER_MODE_REL);
	timer->function = fn;
#endif
}

#ifdef CONFIG_BLK_CGROUP
#include "blk-cgroup.h"

/*
 * The blkcg policy API, as prism_cgroup.c uses it. Each difference is
 * told by Kbuild from the source's block/blk-cgroup.h, not the version
 * (see the top of this file).
 *
 * blkcg_activate_policy() and blkcg_deactivate_policy() take the
 * request_queue on 6.1, the gendisk on 6.12 and 7.3 (PRISM_BLKCG_DISK). Both
 * freeze the queue (a nested freeze where the core already has).
 */
#ifdef PRISM_BLKCG_DISK
static inline int prism_blkcg_activate(struct request_queue *q,
				       const struct blkcg_policy *pol)
{
	return blkcg_activate_policy(q->disk, pol);
}

static inline void prism_blkcg_deactivate(struct request_queue *q,
					  const struct blkcg_policy *pol)
{
	blkcg_deactivate_policy(q->disk, pol);
}
#else
static inline int prism_blkcg_activate(struct request_queue *q,
				       const struct blkcg_policy *pol)
{
	return blkcg_activate_policy(q, pol);
}

static inline void prism_blkcg_deactivate(struct request_queue *q,
					  const struct blkcg_policy *pol)
{
	blkcg_deactivate_policy(q, pol);
}
#endif

/*
 * pd_alloc_fn() is (gfp, q, blkcg) on 6.1, (disk, blkcg, gfp) on 6.12
 * and 7.3 (PRISM_PD_ALLOC_DISK). prism_cgroup.c allocates in
 * prism_cg_pd_alloc(); prism_cg_pd_alloc_fn() is what the policy hands
 * the core, in this kernel's signature.
 */
struct blkg_policy_data *prism_cg_pd_alloc(gfp_t gfp, int node);

#ifdef PRISM_PD_ALLOC_DISK
static inline struct blkg_policy_data *
prism_cg_pd_alloc_fn(struct gendisk *disk, struct blkcg *blkcg, gfp_t gfp)
{
	return prism_cg_pd_alloc(gfp, disk->node_id);
}
#else
static inline struct blkg_policy_data *
prism_cg_pd_alloc_fn(gfp_t gfp, struct request_queue *q, struct blkcg *blkcg)
{
	return prism_cg_pd_alloc(gfp, q->node);
}
#endif

/*
 * A per-disk line of a cgroup file ("MAJ:MIN ..."): on 6.1 one call,
 * blkg_conf_prep(blkcg, pol, input, ctx), undone by blkg_conf_finish()
 * on success only; on 6.12 blkg_conf_init(), blkg_conf_prep(), and
 * blkg_conf_exit() whatever prep returned (PRISM_BLKG_CONF_INIT); on
 * 7.3 blkg_conf_init(), blkg_conf_open_bdev() (which prep no longer
 * calls), blkg_conf_prep(), each undone by its own call,
 * blkg_conf_unprep() and blkg_conf_close_bdev() (PRISM_BLKG_CONF_UNPREP,
 * tested first as 7.3 has blkg_conf_init() too). Here as one pair: prism_blkg_conf_prep() returns 0 with ctx->blkg the
 * cgroup's blkg on the disk and the disk's queue_lock held (taken with
 * spin_lock_irq()), which prism_blkg_conf_finish() releases; or -errno
 * with nothing held (-ENODEV: no such disk; -EOPNOTSUPP: the policy is
 * not active on it, as when prism is not its scheduler).
 */
#if defined(PRISM_BLKG_CONF_UNPREP)
static inline int prism_blkg_conf_prep(struct blkcg *blkcg,
				       const struct blkcg_policy *pol,
				       char *input, struct blkg_conf_ctx *ctx)
{
	int ret;

	blkg_conf_init(ctx, input);
	ret = blkg_conf_open_bdev(ctx);
	if (ret)
		return ret;
	ret = blkg_conf_prep(blkcg, pol, ctx);
	if (ret)
		blkg_conf_close_bdev(ctx);
	return ret;
}

static inline void prism_blkg_conf_finish(struct blkg_conf_ctx *ctx)
{
	blkg_conf_unprep(ctx);
	blkg_conf_close_bdev(ctx);
}
#elif defined(PRISM_BLKG_CONF_INIT)
static inline int prism_blkg_conf_prep(struct blkcg *blkcg,
				       const struct blkcg_policy *pol,
				       char *input, struct blkg_conf_ctx *ctx)
{
	int ret;

	blkg_conf_init(ctx, input);
	ret = blkg_conf_prep(blkcg, pol, ctx);
	if (ret)
		blkg_conf_exit(ctx);
	return ret;
}

static inline void prism_blkg_conf_finish(struct blkg_conf_ctx *ctx)
{
	blkg_conf_exit(ctx);
}
#else
static inline int prism_blkg_conf_prep(struct blkcg *blkcg,
				       const struct blkcg_policy *pol,
				       char *input, struct blkg_conf_ctx *ctx)
{
	return blkg_conf_prep(blkcg, pol, input, ctx);
}

static inline void prism_blkg_conf_finish(struct blkg_conf_ctx *ctx)
{
	blkg_conf_finish(ctx);
}
#endif
#endif /* CONFIG_BLK_CGROUP */

/*
 * kzalloc_obj(): one object of @P's type, zeroed (7.x's slab.h, which
 * its checkpatch asks for over kzalloc(sizeof(...))); the same from
 * kzalloc() where the kernel has none.
 */
#ifndef kzalloc_obj
#define kzalloc_obj(P, gfp)	kzalloc(sizeof(P), gfp)
#endif

#endif /* _PRISM_COMPAT_H */
