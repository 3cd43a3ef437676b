/* SPDX-License-Identifier: GPL-2.0 */
/*
 * prism's mechanism, as its files share it: the per-request state, the
 * per-queue data (tiers, flows, the in-flight control's state) and the
 * small helpers the files read it with. prism_sched.c holds the elevator
 * operations and the request lifecycle; prism_flow.c the flows, their
 * lists and the dispatch choice among them; prism_hold.c the in-flight
 * control (the holds, their timers, pacing), the tag limits and the cost
 * learner; prism_sysfs.c the tunables; prism_debugfs.c what debugfs
 * shows. The decisions are prism_policy.c's; prism_compat.h holds what
 * differs between kernels; prism_cgroup.c the blkcg policy
 * (io.prism.weight). A helper that a per-request path inlines from
 * another file is static inline here, with its comment, so that the
 * split into files costs the hot paths no call. Locking is described at
 * the top of prism_sched.c.
 */
#ifndef _PRISM_H
#define _PRISM_H

#include <linux/kernel.h>
#include <linux/blkdev.h>
#include <linux/blk-mq.h>
#include <linux/bio.h>
#include <linux/hrtimer.h>
#include <linux/ioprio.h>
#include <linux/module.h>
#include <linux/slab.h>
#include <linux/rbtree.h>
#include <linux/timekeeping.h>
#include <linux/rcupdate.h>
#include <linux/sbitmap.h>
#include <linux/sched.h>
#include <linux/seq_file.h>

#include "elevator.h"
#include "blk.h"
#include "blk-mq.h"
#include "blk-mq-debugfs.h"
#include "blk-mq-sched.h"
#include "blk-wbt.h"

#include "prism_compat.h"
#include "prism_policy.h"
#include "prism_cgroup.h"

/*
 * Per-request state in rq->elv.priv[0]: flags and the tier, set when the
 * request first enters prism; prepare_request() clears it. priv[1] holds
 * the submitting thread's pid, recorded in prepare_request() where current
 * is the submitter and read at the first insert only; from dispatch on it
 * holds the dispatch time (ktime ns, wrapping at the width of a long,
 * enough for a latency), or 0 if nothing was to read it. Sort-tree
 * membership is tracked here and never read from rq->rb_node, which
 * shares a union with the driver's special_vec, so on a request the
 * driver gave back it may hold anything. Hash membership is the core's
 * RQF_HASHED flag (the core also hashes a request on its own after a back
 * merge), which elv_rqhash_del() tests.
 */
#define PRISM_RQ_SEEN		BIT(0)	/* counted as inserted once */
#define PRISM_RQ_QUEUED		BIT(1)	/* on a FIFO or the dispatch list */
#define PRISM_RQ_AT_HEAD	BIT(2)	/* on the dispatch list */
#define PRISM_RQ_SEQ		BIT(3)	/* its stream looked sequential */
#define PRISM_RQ_SORTED		BIT(4)	/* in its tier's sort tree */
#define PRISM_RQ_SOLO		BIT(5)	/* dispatched with nothing lower in flight */
#define PRISM_RQ_DISPATCHED	BIT(6)	/* handed to the driver, not back yet */
#define PRISM_RQ_FOREIGN	BIT(7)	/* never prepared: no finish_request */
#define PRISM_RQ_IDLE_DEV	BIT(10)	/* LOW, dispatched to an idle device */
#define PRISM_RQ_TIMED		BIT(11)	/* HIGH or NORMAL, dispatch time stamped */
#define PRISM_RQ_SYNC_FIFO	BIT(12)	/* a write queued on the sync-write FIFO */
#define PRISM_RQ_LEARN		BIT(13)	/* timed for the cost learner */
#define PRISM_RQ_LEARN_SEQ	BIT(14)	/* ... and continued the device's last */
#define PRISM_RQ_DIRECT		BIT(15)	/* on the direct lane */
#define PRISM_RQ_TIER_SHIFT	8
#define PRISM_RQ_TIER_MASK	(3UL << PRISM_RQ_TIER_SHIFT)
#define PRISM_RQ_FLOW_SHIFT	16	/* its flow's slot, 8 bits */
#define PRISM_RQ_FLOW_MASK	(0xffUL << PRISM_RQ_FLOW_SHIFT)
/*
 * A request timed for the learner keeps its size in the state's upper
 * half, since a driver's completion may have zeroed it by
 * finish_request(); its dispatch time is in priv[1], in ns. Only where a
 * long has that half and holds a ktime; elsewhere cost_model=auto learns
 * nothing.
 */
#if BITS_PER_LONG == 64
#define PRISM_CAN_LEARN		1
#define PRISM_RQ_KIB_SHIFT	32	/* size in KiB, at most 4096: 13 bits */
#define PRISM_RQ_KIB_MAX	4096UL
#define PRISM_RQ_LEARN_MASK	(PRISM_RQ_LEARN | PRISM_RQ_LEARN_SEQ | \
				 (0x1fffUL << PRISM_RQ_KIB_SHIFT))
#else
#define PRISM_CAN_LEARN		0
#define PRISM_RQ_LEARN_MASK	(PRISM_RQ_LEARN | PRISM_RQ_LEARN_SEQ)
#endif

extern const char *const prism_tier_name[PRISM_NR_TIERS];
extern const char *const prism_fifo_name[PRISM_NR_FIFOS];

/*
 * Flows: the work of one process (thread group) at one tier, each with its
 * own FIFO lists and sort trees; a tier's backlogged flows share it by
 * weight in WF2Q+ virtual time (see prism_policy.h). A process's I/O in a
 * cgroup (struct prism_group) is a flow of that cgroup's group: the tier
 * shares among its own flows (the root cgroup's processes) and its
 * groups, and a group among its flows, in a fair queue of its own (two
 * levels, as bfq's groups hold queues). Slots live in a
 * fixed table per queue, PRISM_NR_FLOWS private ones found by hashing the
 * (process, tier) key with a short linear probe, and one shared flow per
 * tier for whatever does not find a slot: memory does not grow with the
 * processes that ever did I/O, and a full table degrades to sharing. A
 * slot is given to another flow once its flow owns no request, has been
 * idle PRISM_FLOW_IDLE_MS, and owes the tier nothing (or has been idle a
 * second).
 */
#define PRISM_FLOW_BITS		6
#define PRISM_NR_FLOWS		(1U << PRISM_FLOW_BITS)
#define PRISM_FLOW_SLOTS	(PRISM_NR_FLOWS + PRISM_NR_TIERS)
#define PRISM_FLOW_PROBE	8
#define PRISM_FLOW_IDLE_MS	100

struct prism_flow {
	/*
	 * (process, tier, group), see prism_flow_key(); 0 for a free slot and
	 * the shared flows. Written under the lock, read locklessly by
	 * limit_depth() with inserted, finished and rt, and by the cgroups
	 * file (prism_cg_totals()) with group and queued[]: each of those is
	 * written with WRITE_ONCE.
	 */
	u32 key;
	u32 id;			/* the process (tgid); 0 for a shared flow */
	enum prism_tier tier;
	struct prism_group *group;	/* its cgroup's, NULL: the tier's own */
	bool rt;		/* its last request was RT: no tag limit */
	u16 slot;		/* its index in pd->flows, for good */
	struct list_head fifo[PRISM_NR_FIFOS];	/* arrival order */
	struct rb_root sort[PRISM_NR_DIRS];	/* sector order, if sorted */
	u32 queued[PRISM_NR_FIFOS];		/* on fifo[] */
	/*
	 * Where the flow's C-LOOK sweep stands: the end of its last
	 * dispatched request, per direction; also where its next request
	 * must start to count as sequential in the cost model.
	 */
	sector_t sweep_pos[PRISM_NR_DIRS];
	struct list_head active;	/* on its tier's backlogged list */
	struct prism_fq_flow fq;
	/* Sequential detector, fed by inserts and by bio merges. */
	struct prism_stream stream;

	u64 inserted;		/* WRITE_ONCE: limit_depth() reads it */
	atomic64_t finished;	/* completed or merged away */
	atomic64_t throttled;	/* allocations limited by flow_depth */
	u64 dispatched;
	u64 cost;		/* ns of estimated device time served */
	u64 bytes;
	unsigned long last_used;	/* jiffies of its last insert */
	/*
	 * Idling for the flow (prism_flow_expected()), kept while
	 * pd->flow_window is set: done_ns, ktime of its last completion, written
	 * locklessly by finish_request(); the rest under the lock. returning:
	 * its latest request arrived while it was expected, so it comes back
	 * to the fair queue where it left (prism_fq_return()). wait_window:
	 * how long its latest wait may last (prism_flow_idle_window()).
	 */
	u64 done_ns;
	u64 dispatch_ns;
	u64 wait_window;
	struct prism_think think;
	bool returning;
	bool starting;		/* prism_flow_start(): activate at the earliest */
	struct prism_raise raise;	/* weight raising, under the lock */
	char comm[TASK_COMM_LEN];
};

/*
 * The entity (flow or group) that last became backlogged in a fair queue,
 * -1 for none, and its weight: see prism_note_weight().
 */
struct prism_weight_note {
	int last;
	u32 weight;
};

/*
 * Groups: one cgroup's flows at one tier (prism_cgroup_of() finds a
 * request's cgroup; the root cgroup's processes have none). A group is
 * one entity in its tier's fair queue, of its cgroup's io.prism.weight,
 * and holds its flows' fair queue. Slots live in a fixed table per queue
 * like the flows', found by hashing (cgroup, tier); a slot is given to
 * another group once no flow is keyed to it and it owes its tier
 * nothing (or has been idle a second). With no slot free, a cgroup's
 * flows join the tier's own, as the root cgroup's. The key of a flow
 * holds the group's slot (plus one), so at most 63.
 */
#define PRISM_GROUP_BITS	5
#define PRISM_NR_GROUPS		(1U << PRISM_GROUP_BITS)
#define PRISM_GROUP_PROBE	8

/*
 * id, dispatched, cost and bytes are read locklessly by the cgroups file
 * (prism_cg_totals()): written under the lock with WRITE_ONCE.
 */
struct prism_group {
	u64 id;			/* cgroup_id(); 0 for a free slot */
	enum prism_tier tier;
	u16 slot;		/* its index in pd->groups, for good */
	u32 nr_flows;		/* flows keyed to it */
	struct list_head active;	/* on its tier's backlogged groups */
	struct prism_fq fq;		/* its backlogged flows' */
	struct prism_fq_flow ent;	/* itself, in its tier's fair queue */
	struct prism_weight_note note;	/* its flows' weights (see below) */
	u64 dispatched;
	u64 cost;		/* ns of estimated device time served */
	u64 bytes;
	unsigned long last_used;	/* jiffies of its last insert */
};

struct prism_tier_queue {
	u32 queued[PRISM_NR_FIFOS];		/* on its flows' fifo[] */
	u32 queued_head;			/* on prism_data.dispatch */
	struct list_head active;		/* backlogged flows */
	struct list_head groups;		/* backlogged groups */
	struct prism_fq fq;
	struct prism_weight_note note;

	/*
	 * Statistics, under prism_data.lock except the atomics. inserted is
	 * also read locklessly by limit_depth() (see prism_owned()), so it is
	 * written with WRITE_ONCE.
	 */
	u64 inserted;
	u64 requeued;
	u64 dispatched;
	u64 merged;
	u64 aged;
	u64 shared;
	u64 expired;
	u64 foreign;		/* inserted but never prepared (6.1 requeues) */
	u64 passthrough;	/* inserted passthrough requests (6.1) */
	u64 direct;		/* dispatched from the direct lane */
	u64 max_owned;		/* most requests owned at once */
	u64 started;		/* prepared requests dispatched, less requeued */
	atomic64_t completed;	/* finished after prism dispatched them */
	atomic64_t merged_away;	/* finished without, merged into another */
	unsigned long last_done;	/* jiffies of the last completion or flush seen */
	unsigned long last_dispatch;	/* jiffies of the last dispatch (not LOW) */
	/*
	 * ns of the last completion (NORMAL and LOW) but background
	 * writeback's, which pacing lets through in the gaps
	 * (pick_writeback()) and so must not restart them:
	 * prism_view_paced(). Stored only while the controller paces (its
	 * duty below PRISM_DUTY_FULL), so that other completions do not
	 * write this line; 0: none.
	 */
	u64 paced_done_ns;
	/*
	 * In-flight control. done_ns: ktime of the last completion, written
	 * locklessly by finish_request() (HIGH and NORMAL only: nothing waits
	 * for LOW); think: the think time, under the lock.
	 */
	u64 done_ns;
	struct prism_think think;
	bool flush_seen;	/* a flush of its chain was in the device */
	/*
	 * Its sync-write chain (see prism_chained()). sync_done_ns: ktime of
	 * its last sync-write completion, written locklessly by
	 * finish_request() like done_ns, moved forward under the lock while
	 * a flush that followed it is in the device (chain_flush) and when
	 * that flush leaves. chain: the gaps from each such time to the next
	 * request of a tier above LOW, sampled once per completion
	 * (chain_sampled: the sync_done_ns last sampled), under the lock.
	 */
	u64 sync_done_ns;
	u64 chain_sampled;
	struct prism_think chain;
	bool chain_flush;
	/*
	 * Its rate cap (rate_kbps), under the lock: the bucket, and how many
	 * times dispatch found it empty with requests queued.
	 */
	struct prism_bucket bucket;
	u64 throttled;
};

/*
 * Device times, summed by finish_request() without the lock and folded
 * into the depth controller at dispatch: the count in the bits from
 * PRISM_LAT_COUNT_SHIFT up, microseconds below. HIGH and NORMAL requests
 * in all or solo, LOW requests dispatched to an idle device in bulk.
 */
#define PRISM_LAT_COUNT_SHIFT	44
#define PRISM_LAT_US_MAX	((1ULL << 32) - 1)
#define PRISM_LAT_SUM_MASK	((1ULL << PRISM_LAT_COUNT_SHIFT) - 1)

struct prism_lat_acc {
	atomic64_t all;
	atomic64_t solo;
	atomic64_t bulk;	/* LOW, dispatched to an idle device */
};

struct prism_tun_rcu {
	struct prism_tunables t;
	struct rcu_head rcu;
};

/*
 * Sums of the learner's points of one kind (see prism_learn_point()),
 * added where requests complete, without a lock, and taken whole under
 * it. The count shares a word with the sizes' sum so that the two agree;
 * a point may reach the other sums one fold late, which the fit's
 * window does not notice.
 */
#define PRISM_LEARN_N_SHIFT	40

struct prism_learn_acc {
	atomic64_t nx;		/* count << PRISM_LEARN_N_SHIFT | sum of x */
	atomic64_t y;
	atomic64_t xx;
	atomic64_t xy;
};

/* How often completed points are folded in and the model refit. */
#define PRISM_LEARN_FOLD	(HZ / 10)

struct prism_data {
	/*
	 * The one lock (see the top of prism_sched.c). Taken in task context
	 * only: insert, dispatch (from the submitter or kblockd), bio_merge,
	 * the sysfs stores and debugfs shows; never by the completion hooks,
	 * which may run in hard interrupt context, nor by the timer. So it
	 * may sleep where PREEMPT_RT makes spinlock_t an rt_mutex, and needs
	 * no irq-disabling variant anywhere.
	 */
	spinlock_t lock;
	/*
	 * Requests on any FIFO or the dispatch list: has_work(), which the
	 * core calls several times per request, reads this one word instead
	 * of seven list heads spread over the tiers. The queue is parked
	 * (prism_park()) while dispatch holds every queued request back: a
	 * hold or an empty rate bucket, each with its wake-up arranged (a
	 * timer, or a completion with the restart flag). nr_parked is then
	 * nr_queued, and parked_out the low bits of owned_out before the
	 * dispatch looked; while both still hold, has_work() says there is
	 * no work, instead of blk-mq re-running a queue that returned
	 * nothing every 3 ms (BLK_MQ_BUDGET_DELAY). An insert or a removal, a
	 * timer or a store clears nr_parked; a completion moves owned_out.
	 * view_out: owned_out as the current dispatch found it.
	 */
	u32 nr_queued;
	u32 nr_parked;
	u32 parked_out;
	u32 view_out;
	u64 empty_dispatches;	/* dispatches that returned nothing, queued */
	struct list_head dispatch;	/* at-head inserts and requeues */
	/*
	 * The direct lane (see prism_lane_allows()): requests queued while
	 * nothing else was, all of direct_tier, nr_direct of nr_queued,
	 * served first by dispatch. lane_off: prism_lane_off() as the last
	 * dispatch found it. lane_spills: the times a request that could
	 * not take the lane moved the lane's requests onto their flows.
	 */
	struct list_head direct;
	u32 nr_direct;
	int direct_tier;
	bool lane_off;
	unsigned long lane_checked;	/* jiffies lane_off was last computed */
	u64 chosen_now;	/* the clock prism_dispatch_choose() read, or 0 */
	u64 lane_spills;
	bool rate_capped;	/* a rate cap is set (rate_kbps) */
	struct prism_tier_queue tier[PRISM_NR_TIERS];
	struct prism_batch batch;
	sector_t head_pos;		/* end of the last dispatched request */
	bool sorted;			/* sort trees in use (C-LOOK dispatch) */
	bool rotational;		/* what the cost model was made for */
	struct prism_cost_params cost_params;	/* in force */
	struct prism_cost_model model;		/* the same, digested */
	/*
	 * The cost learner (cost_model=auto): one dispatch in
	 * PRISM_LEARN_EVERY is timed, its point summed into learn_acc where
	 * it completes and folded into learner under the lock at most every
	 * PRISM_LEARN_FOLD; learned holds the coefficients fitted so far.
	 * While learning (read locklessly where requests complete), every
	 * completion swaps its time into last_done, which gives the next
	 * timed request the completion before it (prism_learn_busy()).
	 */
	bool learning;
	atomic64_t last_done;
	struct prism_learn_acc learn_acc[PRISM_NR_DIRS][2];
	struct prism_cost_learner learner;
	struct prism_cost_params learned;
	bool learned_any;
	u32 learn_tick;
	unsigned long learn_folded;
	u64 flow_overflows;		/* requests that found no flow slot */
	/* Weight raising (see prism_wf2q.h): flow starts, and those raised. */
	struct prism_burst burst;
	u64 flow_starts;
	u64 flows_raised;
	u64 group_overflows;		/* ... and no group slot */
	struct prism_flow *flows;	/* PRISM_FLOW_SLOTS */
	struct prism_group *groups;	/* PRISM_NR_GROUPS */
	/* (thread, tier) of recent inserts, for limit_depth(); see policy. */
	u32 recent[PRISM_NR_RECENT];
	/*
	 * What all tiers own (prism_owned_total()), for limit_depth() and
	 * the direct lane: owned_in counts the tiers' inserted (under the
	 * lock, WRITE_ONCE), owned_out their completed and merged_away (where
	 * requests finish), so the total is one subtraction, not a sum over
	 * the tiers' books.
	 */
	u64 owned_in;
	atomic64_t owned_out;

	/*
	 * In-flight control (see prism_choose()): the depth controller under
	 * the lock, fed from lat; the timer that re-runs the queue when a
	 * hold ends; why and how often dispatch held back.
	 */
	struct request_queue *q;
	struct prism_depth_ctl depth;
	struct prism_lat_acc lat;
	/*
	 * The one timer (prism_wake_timer()): runs the queue when the
	 * earliest hold ends. Not a hard timer: on PREEMPT_RT it expires in
	 * the softirq thread, where it only schedules a queue run (kblockd).
	 */
	struct hrtimer wake_timer;
	u64 held_window;
	u64 held_depth;
	u64 held_paced;		/* depth holds that waited for a paced gap */
	u64 held_flow;
	u64 tags_short;		/* holds waived: their tier was tagless */
	u64 held_stalled;	/* views with a tier above overdue (limit 0) */
	u64 idle_since;		/* ns: a window hold began; 0: none */
	int idle_tier;		/* the tier it held for */
	int idle_flow;		/* the flow slot it idled for, -1: a tier */
	atomic64_t window_runs;
	/*
	 * Idling for flows: the window (ns, 0: off), set under the lock at
	 * each dispatch from the tunable and the media; finish_request()
	 * reads it locklessly, for whether it is set.
	 */
	u64 flow_window;
	/*
	 * jiffies flows of unequal weights were last backlogged in a tier,
	 * together or one after the other (prism_note_weight())
	 */
	unsigned long weights_seen;

	/*
	 * Tunables: replaced whole under lock (prism_attr_store), read under
	 * lock with prism_tun() and locklessly in limit_depth() under RCU.
	 */
	struct prism_tun_rcu __rcu *tun;
	/*
	 * flow_depth as a part of 1024, rounded down (U32_MAX when the limit
	 * is off): limit_depth()'s fast path compares without a division,
	 * and never finds fewer allocations that may be limited than the
	 * exact test (prism_flow_limit_may()), which the slow path makes.
	 */
	u32 flow_frac;
	bool writeback_low;	/* the tunable, for limit_depth()'s fast path */
	u32 device_depth;	/* prism_device_depth(), under the lock */

	/*
	 * Latency histograms (debugfs "latency"), per tier and direction, in
	 * prism_hist_bucket()'s buckets. hist_wait: from the request's
	 * allocation (the core's start_time_ns) to its dispatch, under the
	 * lock. hist_device: from dispatch to completion, added where
	 * requests complete, without the lock. Kept only once "1" is
	 * written to debugfs "latency" (off at first: about 50 instructions
	 * per request, 0.6% of a 4 KiB read's kernel path, which nothing
	 * else needs). Written under the lock; dispatch reads it there,
	 * completions locklessly.
	 */
	bool latency_hist;
	u64 hist_wait[PRISM_NR_TIERS][PRISM_NR_DIRS][PRISM_HIST_BUCKETS];
	atomic64_t hist_device[PRISM_NR_TIERS][PRISM_NR_DIRS]
			      [PRISM_HIST_BUCKETS];
};

/*
 * What held the queue may be over: has_work() reports the requests again.
 * Under the lock, or from a timer before it runs the queue (a plain
 * store: dispatch parks under the lock before it arms the timer).
 */
static inline void prism_unpark(struct prism_data *pd)
{
	if (READ_ONCE(pd->nr_parked))
		WRITE_ONCE(pd->nr_parked, 0);
}

/* The tunables, for a caller holding prism_data.lock. */
static inline const struct prism_tunables *prism_tun(struct prism_data *pd)
{
	return &rcu_dereference_protected(pd->tun,
					  lockdep_is_held(&pd->lock))->t;
}

/* Requests the flow owns: inserted, not finished. Lockless, never < 0. */
static inline u64 prism_flow_owned(const struct prism_flow *fl)
{
	s64 owned = READ_ONCE(fl->inserted) - atomic64_read(&fl->finished);

	return owned > 0 ? owned : 0;
}

static inline u32 prism_flow_queued(const struct prism_flow *fl)
{
	return fl->queued[PRISM_READ] + fl->queued[PRISM_WRITE] +
	       fl->queued[PRISM_SYNC_WRITE];
}

/*
 * Requests @tq owns: inserted and not yet finished (queued, in flight, or
 * merged away and about to be freed). Lockless: a finish may be seen
 * before the insert that preceded it, so never below zero.
 */
static inline u64 prism_owned(struct prism_tier_queue *tq)
{
	s64 owned = READ_ONCE(tq->inserted) - atomic64_read(&tq->completed) -
		    atomic64_read(&tq->merged_away);

	return owned > 0 ? owned : 0;
}

/* Dispatched by prism and not yet completed or requeued. */
static inline u64 prism_inflight(struct prism_tier_queue *tq)
{
	s64 inflight = READ_ONCE(tq->started) - atomic64_read(&tq->completed);

	return inflight > 0 ? inflight : 0;
}

/* Requests on the tier's flows' FIFOs (not the at-head list). */
static inline u32 tq_queued(const struct prism_tier_queue *tq)
{
	return tq->queued[PRISM_READ] + tq->queued[PRISM_WRITE] +
	       tq->queued[PRISM_SYNC_WRITE];
}

/* Whether weights differed in a tier lately (prism_weights_differed()). */
static inline bool prism_weights_differ_now(struct prism_data *pd)
{
	return prism_weights_differed(jiffies, pd->weights_seen, HZ);
}

/*
 * The flow window now (prism_flow_window()), from the tunables, the media
 * and whether weights differed lately (@differ). Under the lock.
 */
static __always_inline u64 prism_flow_window_now(struct prism_data *pd,
						 const struct prism_tunables *tun,
						 bool differ)
{
	return prism_flow_window(&pd->depth, tun, !blk_queue_nonrot(pd->q),
				 differ);
}

/* prism_flow.c: flows, their lists, the direct lane, the dispatch choice. */
void prism_flow_reset(struct prism_data *pd, struct prism_flow *fl,
		      u32 key, u32 id, enum prism_tier tier,
		      struct prism_group *g);
struct prism_group *prism_group_find(struct prism_data *pd, u64 id,
				     enum prism_tier tier);
struct prism_group *prism_group_get(struct prism_data *pd, u64 id,
				    enum prism_tier tier, u32 weight);
void prism_flow_charge(struct prism_data *pd, struct prism_flow *fl,
		       u64 cost);
void prism_flow_unraise(struct prism_data *pd, struct prism_flow *fl);
void prism_flow_deactivate(struct prism_data *pd, struct prism_flow *fl);
void prism_flow_queue(struct prism_data *pd, struct request *rq);
void prism_lane_spill(struct prism_data *pd);
void prism_lane_close(struct prism_data *pd);
struct request *prism_dispatch_choose(struct prism_data *pd,
				      struct blk_mq_hw_ctx *hctx);

/*
 * prism_hold.c: the in-flight control, the tag limits, the timed
 * completions and the cost learner.
 */
bool prism_recently_done(struct prism_data *pd,
			 const struct prism_tunables *tun,
			 struct request_queue *q,
			 struct prism_tier_queue *tq);
void prism_chain_sample_link(struct prism_data *pd,
			     struct prism_tier_queue *tq, u64 done, u64 *now);
bool prism_tiers_contend(struct prism_data *pd);
enum hrtimer_restart prism_wake_timer(struct hrtimer *timer);
void prism_mark_restart(struct blk_mq_hw_ctx *hctx);
void prism_hold(struct prism_data *pd, struct blk_mq_hw_ctx *hctx,
		enum prism_hold hold, int idle_tier, struct prism_flow *idle_fl,
		u64 until, u64 now, u32 foreign);
u64 prism_flow_wait_end(struct prism_flow *fl);
bool prism_choose_viewed(struct prism_data *pd, struct blk_mq_hw_ctx *hctx,
			 const struct prism_tunables *tun, u32 depth, u64 *now,
			 struct prism_choice *c, u32 *queued_tiers,
			 struct prism_flow **waited);
void prism_limit_depth(blk_opf_t opf, struct blk_mq_alloc_data *data);
void prism_finish_timed(struct prism_data *pd, struct request *rq,
			struct prism_tier_queue *tq, unsigned long st, u64 done,
			bool learning);
void prism_learn_fold(struct prism_data *pd);
void prism_model_update(struct prism_data *pd);

/*
 * The helpers below are used by more than one file, and inlined by the
 * per-request paths (insert, dispatch, completion, limit_depth): a
 * request's state, the flow table's lookups, what the tiers own and
 * whether a tier above is active, the fair queue's and the direct lane's
 * notes on insert, a chain's next link, and the in-flight control's
 * parking and its latency fold, which the dispatch choice inlines.
 */

static inline unsigned long prism_rq_state(struct request *rq)
{
	return (unsigned long)rq->elv.priv[0];
}

static inline void prism_rq_set_state(struct request *rq, unsigned long st)
{
	rq->elv.priv[0] = (void *)st;
}

static inline enum prism_tier prism_rq_tier_of_state(unsigned long st)
{
	unsigned long tier = (st & PRISM_RQ_TIER_MASK) >> PRISM_RQ_TIER_SHIFT;

	/*
	 * Two bits hold three tiers; prism only ever writes 0-2, so a 3 means
	 * the state was overwritten. Never index past the array, and say so.
	 */
	if (WARN_ONCE(tier >= PRISM_NR_TIERS,
		      "prism: request state %#lx has no valid tier\n", st))
		return PRISM_NORMAL;
	return tier;
}

static inline enum prism_tier prism_rq_tier(struct request *rq)
{
	return prism_rq_tier_of_state(prism_rq_state(rq));
}

static inline enum prism_dir prism_rq_dir(struct request *rq)
{
	return rq_data_dir(rq) == WRITE ? PRISM_WRITE : PRISM_READ;
}

/*
 * The bytes a request moves through the device. A discard, write-zeroes
 * or secure erase names a range but transfers nothing: it costs a command
 * (iocost charges it nothing). Charged by its length, one large discard
 * (an fstrim, a mkfs) would move its flow's virtual time and a capped
 * tier's bucket by seconds, and the learner would see a transfer that
 * never happened.
 */
static inline u32 prism_rq_data_bytes(struct request *rq)
{
	enum req_op op = req_op(rq);

	return op == REQ_OP_READ || op == REQ_OP_WRITE ? blk_rq_bytes(rq) : 0;
}

/*
 * The FIFO list a request goes on: writes someone waits for (REQ_SYNC,
 * FUA or PREFLUSH: an fsync's data, jbd2's journal and commit blocks)
 * apart from background writeback. REQ_META alone does not count: the
 * flusher's background metadata writeback carries it.
 */
static inline int prism_rq_fifo_class(struct request *rq)
{
	if (rq_data_dir(rq) != WRITE)
		return PRISM_READ;
	return op_is_sync(rq->cmd_flags) ? PRISM_SYNC_WRITE : PRISM_WRITE;
}

/* The FIFO list a queued request is on, as recorded when it was queued. */
static inline int prism_rq_fifo(struct request *rq)
{
	if (rq_data_dir(rq) != WRITE)
		return PRISM_READ;
	return prism_rq_state(rq) & PRISM_RQ_SYNC_FIFO ? PRISM_SYNC_WRITE :
							 PRISM_WRITE;
}

/*
 * Whether @st's tier and flow fields are ones prism writes. Where a hot
 * path tests this first, the decoders' warnings (which need registers
 * saved across their calls) fold away and go out of line with the path.
 */
static inline bool prism_state_valid(unsigned long st)
{
	return ((st & PRISM_RQ_TIER_MASK) >> PRISM_RQ_TIER_SHIFT) <
		       PRISM_NR_TIERS &&
	       ((st & PRISM_RQ_FLOW_MASK) >> PRISM_RQ_FLOW_SHIFT) <
		       PRISM_FLOW_SLOTS;
}

static inline struct prism_flow *prism_rq_flow(struct prism_data *pd,
					       unsigned long st)
{
	unsigned long slot = (st & PRISM_RQ_FLOW_MASK) >> PRISM_RQ_FLOW_SHIFT;

	if (WARN_ONCE(slot >= PRISM_FLOW_SLOTS,
		      "prism: request state %#lx has no valid flow\n", st))
		slot = PRISM_NR_FLOWS + PRISM_NORMAL;
	return &pd->flows[slot];
}

static inline int prism_flow_slot(struct prism_data *pd,
				  const struct prism_flow *fl)
{
	return fl->slot;	/* not fl - pd->flows: a division */
}

/* A group as keys hold it: its slot plus one, 0 for the tier's own flows. */
static inline u32 prism_group_nr(const struct prism_group *g)
{
	return g ? g->slot + 1 : 0;
}

/*
 * (process, tier, group number) as prism_recent_key() packs it, with a
 * bit never 0.
 */
static inline u32 prism_flow_key(u32 id, enum prism_tier tier, u32 group)
{
	return BIT(31) | prism_recent_key(id, tier, group);
}

/*
 * The queue is freezing (an elevator switch, an nr_requests store, a
 * change of hardware queues) or dying (del_gendisk()): both kill its
 * usage counter, then run the queue once and wait for every request to
 * complete. Nothing may be held back from then on, by a hold or a rate
 * cap: the freeze would wait for it (a 1 MiB read under a 1 KiB/s cap
 * holds about 1,000 s). A lockless hint: the kill comes before that run.
 *
 * Not a runtime suspend attempt (blk_pre_runtime_suspend(), status
 * RPM_SUSPENDING): it kills the counter and runs the queue too, but
 * only to see whether the counter is zero, and while prism owns a
 * request it is not, so the attempt fails and the queue goes on. Draining for it would pass every
 * hold and cap on each autosuspend attempt of a disk with runtime PM. A
 * real freeze that overlaps an attempt finds what a hold kept back let
 * go at the next dispatch after it, at most PRISM_PARK_MAX later.
 */
static inline bool prism_draining(struct request_queue *q)
{
	if (!percpu_ref_is_dying(&q->q_usage_counter))
		return false;
	/* Written under queue_lock, read locklessly as blk_pm_resume_queue(). */
	return data_race(queue_rpm_status(q)) != RPM_SUSPENDING;
}

/* The private slot holding flow @key, or NULL. Lockless. */
static inline struct prism_flow *prism_flow_find(struct prism_data *pd, u32 key)
{
	u32 h = hash_32(key, PRISM_FLOW_BITS), i;

	for (i = 0; i < PRISM_FLOW_PROBE; i++) {
		struct prism_flow *fl = &pd->flows[(h + i) & (PRISM_NR_FLOWS - 1)];

		/* Pairs with prism_flow_reset()'s release. */
		if (smp_load_acquire(&fl->key) == key)
			return fl;
	}
	return NULL;
}

/* The fair queue @fl is served in: its group's, or its tier's. */
static inline struct prism_fq *prism_flow_fq(struct prism_data *pd,
					     struct prism_flow *fl)
{
	return fl->group ? &fl->group->fq : &pd->tier[fl->tier].fq;
}

/* Whether the slot's flow may be forgotten; see PRISM_FLOW_SLOTS. */
static inline bool prism_flow_reclaimable(struct prism_data *pd,
					  struct prism_flow *fl, unsigned long now)
{
	if (!fl->key)
		return true;
	if (prism_flow_owned(fl) || fl->fq.backlogged ||
	    time_before(now, fl->last_used +
			msecs_to_jiffies(PRISM_FLOW_IDLE_MS)))
		return false;
	return prism_fq_reclaimable(prism_flow_fq(pd, fl), &fl->fq) ||
	       time_after_eq(now, fl->last_used + HZ);
}

/*
 * The flow for process @id at @tier in group @g (NULL: the tier's own),
 * made if it has no slot yet; the tier's shared flow when none is free.
 * Under the lock.
 */
static inline struct prism_flow *prism_flow_get(struct prism_data *pd, u32 id,
						enum prism_tier tier,
						struct prism_group *g)
{
	u32 key = prism_flow_key(id, tier, prism_group_nr(g));
	u32 h = hash_32(key, PRISM_FLOW_BITS), i;
	unsigned long now = jiffies;
	struct prism_flow *spare = NULL;

	lockdep_assert_held(&pd->lock);

	for (i = 0; i < PRISM_FLOW_PROBE; i++) {
		struct prism_flow *fl = &pd->flows[(h + i) & (PRISM_NR_FLOWS - 1)];

		if (fl->key == key)
			return fl;
		if (!spare && prism_flow_reclaimable(pd, fl, now))
			spare = fl;
	}
	if (!spare) {
		pd->flow_overflows++;
		return &pd->flows[PRISM_NR_FLOWS + tier];
	}
	if (pd->batch.flow == prism_flow_slot(pd, spare)) {
		pd->batch.tier = -1;
		pd->batch.flow = -1;
	}
	prism_flow_reset(pd, spare, key, id, tier, g);
	return spare;
}

/*
 * The scheduler tags of the whole queue, which prism's counts of owned
 * requests (over every hardware queue) are measured against: nr_requests
 * for each hardware queue, or once where they share one set. Lockless:
 * both change only while the queue is frozen.
 */
static inline u32 prism_queue_tags(struct request_queue *q)
{
	u32 nr = READ_ONCE(q->nr_requests);

	if (blk_mq_is_shared_tags(q->tag_set->flags))
		return nr;
	return nr * q->nr_hw_queues;
}

/* Requests all tiers own. Lockless, never below zero as prism_owned(). */
static inline u64 prism_owned_total(struct prism_data *pd)
{
	s64 owned = READ_ONCE(pd->owned_in) - atomic64_read(&pd->owned_out);

	return owned > 0 ? owned : 0;
}

/*
 * Background writeback: a write nobody waits for (not REQ_SYNC, FUA or
 * PREFLUSH), the flusher's for the dirty thresholds and for age, whose
 * requests go on the background-write FIFO. Not REQ_BACKGROUND, which
 * ext4 never sets. Swap-out is left out: a task short of memory waits
 * for it.
 */
static inline bool prism_op_background(blk_opf_t opf)
{
	return (opf & REQ_OP_MASK) == REQ_OP_WRITE && !op_is_sync(opf) &&
	       !(opf & REQ_SWAP);
}

/* The tier of an I/O with priority @ioprio and flags @opf. */
static __always_inline enum prism_tier prism_tier_of(const struct prism_tunables *t,
				     unsigned short ioprio, blk_opf_t opf)
{
	return prism_classify_rq(IOPRIO_PRIO_CLASS(ioprio),
				 IOPRIO_PRIO_LEVEL(ioprio),
				 prism_op_background(opf), t);
}

static inline u32 prism_rq_weight(struct request *rq)
{
	unsigned short ioprio = req_get_ioprio(rq);

	return prism_weight(IOPRIO_PRIO_CLASS(ioprio), IOPRIO_PRIO_LEVEL(ioprio));
}

/*
 * Something that closes the direct lane changed where the lane's requests
 * cannot be spilled at once (a spill re-queues them, which calls back
 * here): no request takes the lane from now, and the next dispatch looks
 * again (prism_dispatch_choose()) rather than serving the lane as it
 * came, uncharged, for the rest of the jiffy.
 */
static inline void prism_lane_recheck(struct prism_data *pd)
{
	pd->lane_off = true;
	pd->lane_checked = jiffies - 1;
}

/*
 * Entity @id (a flow's slot, or PRISM_FLOW_SLOTS plus a group's) of
 * @weight becomes backlogged in a fair queue (@note, its tier's or its
 * group's): if the one that did so before it there weighs otherwise,
 * weights differ (see prism_weights_differed()). Flows issuing one
 * request at a time on a deep device are seldom backlogged at the same
 * moment, which is what prism_dispatch_request() looks for: until it saw
 * it (0.3 s and more on flow_idle_flash's null_blk), the flows were
 * served alike.
 */
static inline void prism_note_weight(struct prism_data *pd,
				     struct prism_weight_note *note, int id,
				     u32 weight)
{
	if (note->last == id)
		return;
	if (note->last >= 0 && note->weight != weight) {
		pd->weights_seen = jiffies;
		prism_lane_recheck(pd);
	}
	note->last = id;
	note->weight = weight;
}

/* A request of @fl, of @weight, noted in its fair queue and its group's. */
static inline void prism_note_flow_weight(struct prism_data *pd,
					  struct prism_flow *fl, u32 weight)
{
	struct prism_tier_queue *tq = &pd->tier[fl->tier];
	struct prism_group *g = fl->group;

	if (!g) {
		prism_note_weight(pd, &tq->note, prism_flow_slot(pd, fl),
				  weight);
		return;
	}
	prism_note_weight(pd, &g->note, prism_flow_slot(pd, fl), weight);
	prism_note_weight(pd, &tq->note, PRISM_FLOW_SLOTS + g->slot,
			  g->ent.weight);
}

/*
 * A request of @tq completed within PRISM_ACTIVE_NS (see
 * prism_tier_view.recent); jiffies only.
 */
static __always_inline bool prism_tier_recent(struct prism_tier_queue *tq,
					      unsigned long now)
{
	unsigned long quiet = msecs_to_jiffies(PRISM_ACTIVE_NS /
					       NSEC_PER_MSEC);

	return time_before(now, READ_ONCE(tq->last_done) + quiet);
}

static __always_inline bool prism_tier_quiet(struct prism_data *pd,
					     const struct prism_tunables *tun,
					     struct request_queue *q,
					     struct prism_tier_queue *tq)
{
	if (prism_inflight(tq) || tq->flush_seen || tq->chain_flush)
		return false;
	/* Never timed: never anticipated. */
	return !READ_ONCE(tq->done_ns) || !prism_recently_done(pd, tun, q, tq);
}

/*
 * No tier above @tier has requests in the device, a flush of its chain
 * there, or a completion recent enough to be anticipated. Counters and
 * jiffies only, no clock. Unrolled: this runs on every insert and on
 * most dispatches.
 */
static __always_inline bool prism_higher_quiet(struct prism_data *pd,
					       const struct prism_tunables *tun,
					       struct request_queue *q,
					       int tier)
{
	if (tier == PRISM_HIGH)
		return true;
	if (!prism_tier_quiet(pd, tun, q, &pd->tier[PRISM_HIGH]))
		return false;
	return tier == PRISM_NORMAL ||
	       prism_tier_quiet(pd, tun, q, &pd->tier[PRISM_NORMAL]);
}

/* Whether a tier above @tier is active (prism_tier_active()); lockless. */
static inline bool prism_higher_active(struct prism_data *pd, enum prism_tier tier,
				       unsigned long now)
{
	int t;

	for (t = 0; t < tier; t++)
		if (prism_tier_active(prism_owned(&pd->tier[t]),
				      READ_ONCE(pd->tier[t].last_done), now, HZ))
			return true;
	return false;
}

/* The test inline, on every insert; the sample out of line. */
static __always_inline void prism_chain_link(struct prism_data *pd, u64 *now)
{
	int t;

	for (t = PRISM_HIGH; t < PRISM_LOW; t++) {
		struct prism_tier_queue *tq = &pd->tier[t];
		u64 done = READ_ONCE(tq->sync_done_ns);

		if (done && done != tq->chain_sampled)
			prism_chain_sample_link(pd, tq, done, now);
	}
}

/*
 * The estimated device time of @rq, which @fl dispatches, counted in the
 * flow's statistics (and its group's) with the request and its bytes.
 */
static inline u64 prism_flow_served(struct prism_data *pd,
				    const struct prism_tunables *tun,
				    struct prism_flow *fl, struct request *rq)
{
	enum prism_dir dir = prism_rq_dir(rq);
	u32 bytes = prism_rq_data_bytes(rq);
	u64 cost = prism_cost(&pd->model, dir, bytes,
			      prism_cost_seq(fl->sweep_pos[dir],
					     blk_rq_pos(rq), tun->seq_gap));

	fl->dispatched++;
	fl->cost += cost;
	fl->bytes += bytes;
	if (fl->group) {
		struct prism_group *g = fl->group;

		/* Read locklessly by prism_cg_totals(). */
		WRITE_ONCE(g->dispatched, g->dispatched + 1);
		WRITE_ONCE(g->cost, g->cost + cost);
		WRITE_ONCE(g->bytes, g->bytes + bytes);
	}
	return cost;
}

/*
 * Run the queue at @end (ns, the monotonic clock) through the window
 * timer, unless it is set to run sooner: a hold parks the queue, so a
 * wake-up pushed later would be one lost (the earlier one only costs a
 * dispatch that finds the hold and parks again). Under the lock.
 */
static inline void prism_wake_at(struct prism_data *pd, u64 end, u64 slack)
{
	struct hrtimer *timer = &pd->wake_timer;
	ktime_t at = ns_to_ktime(end);

	if (hrtimer_is_queued(timer) &&
	    ktime_before(hrtimer_get_softexpires(timer), at))
		return;
	hrtimer_start_range_ns(timer, at, slack, HRTIMER_MODE_ABS);
}

/*
 * The longest the queue stays parked without a wake-up of the hold's
 * own: a hold waiting for a completion (depth) gets one, as
 * if the completion were missed.
 */
#define PRISM_PARK_MAX		NSEC_PER_SEC

/*
 * Dispatch holds every queued request back, and has arranged (or is
 * about to, before it unlocks) to run the queue when that may change:
 * park it (see nr_parked). Not while a request prism did not dispatch is
 * in the device (@foreign: a flush, a passthrough): its completion moves
 * no count of prism's, and the view must see it leave (a flush ends a
 * chain's link), so the core's re-run every 3 ms stays.
 */
static inline void prism_park(struct prism_data *pd, u32 foreign, u64 now)
{
	if (foreign)
		return;
	WRITE_ONCE(pd->parked_out, pd->view_out);
	/*
	 * Ordered before prism_wake_at() reads the timer's state, as a
	 * timer callback's smp_mb() orders its state cleared before it reads
	 * nr_parked: either the callback sees the park, or the park sees the
	 * timer gone and arms it again.
	 */
	smp_store_mb(pd->nr_parked, pd->nr_queued);
	prism_wake_at(pd, now + PRISM_PARK_MAX, NSEC_PER_MSEC * 10);
}

/*
 * Requests the device serves at once: the queue's depth where the driver
 * sets one (SCSI: the LUN's, which may be far below its host's tags),
 * else the tag set's depth per hardware queue. Not times the hardware
 * queues: a drive's 64 NVMe queues of 1,023 tags are one drive, not
 * 65,000 slots; tags shared by the hardware queues or the LUNs of a host
 * are one set, counted once. Not blk_queue_depth(), which falls back to
 * nr_requests, the scheduler's tags. A driver may change the queue's
 * depth at any time (SCSI's queue_depth attribute): each dispatch that
 * chooses (once a jiffy while the direct lane is served) reads it again
 * into pd->device_depth, which the per-request paths read, and debugfs
 * "flight" shows.
 */
static inline u32 prism_device_depth(struct request_queue *q)
{
	u32 depth = READ_ONCE(q->queue_depth);

	if (!depth)
		depth = q->tag_set->queue_depth;
	return depth ? depth : 1;
}

/* Empty @acc; false if it held nothing, else its mean in ns in @mean. */
static inline bool prism_lat_take(atomic64_t *acc, u64 *mean)
{
	u64 packed = atomic64_xchg(acc, 0);
	u64 n = packed >> PRISM_LAT_COUNT_SHIFT;

	if (!n)
		return false;
	*mean = div64_u64((packed & PRISM_LAT_SUM_MASK) * NSEC_PER_USEC, n);
	return true;
}

/*
 * Fold the device times finish_request() summed into the depth
 * controller, one sample per kind (their mean) since the last fold. A
 * sample taken with a lower request in flight is evidence against it; a
 * solo one is only while another tier is about: a tier alone, slow by
 * its own queue, must not have a limit set that nothing needs and that
 * closes the direct lane.
 */
static inline void prism_fold_latency(struct prism_data *pd, u64 now, u32 depth)
{
	const struct prism_tunables *t = prism_tun(pd);
	u64 mean;

	if (prism_lat_take(&pd->lat.solo, &mean)) {
		if (prism_tiers_contend(pd))
			prism_depth_sample(&pd->depth, t, mean, true, now,
					   depth);
		else
			prism_depth_observe(&pd->depth, mean, true, now);
	}
	if (prism_lat_take(&pd->lat.all, &mean))
		prism_depth_sample(&pd->depth, t, mean, false, now, depth);
	if (prism_lat_take(&pd->lat.bulk, &mean))
		prism_bulk_sample(&pd->depth, mean);
}


extern struct elv_fs_entry prism_attrs[];
#ifdef CONFIG_BLK_DEBUG_FS
extern const struct blk_mq_debugfs_attr prism_queue_debugfs_attrs[];
#endif

#endif /* _PRISM_H */
