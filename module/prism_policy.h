/* SPDX-License-Identifier: GPL-2.0 */
/*
 * prism scheduling policy: which tier and which request go next, when a
 * tier has waited too long, whether a stream is sequential, how much tag
 * depth a tier may take.
 *
 * Nothing here touches a request, a list or a lock: the mechanism in
 * prism_sched.c describes its queues to the policy in plain numbers and
 * carries out the decision. That keeps this file compilable in userspace,
 * where tests/policy/ exercises it quickly and deterministically.
 *
 * Times are in jiffies (an unsigned long that wraps), compared with the
 * wrap-safe helpers below.
 */
#ifndef _PRISM_POLICY_H
#define _PRISM_POLICY_H

#ifdef __KERNEL__
#include <linux/bitops.h>
#include <linux/limits.h>
#include <linux/math64.h>
#include <linux/string.h>
#include <linux/types.h>
#define prism_fls64(x)	fls64(x)
#else
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
typedef uint8_t u8;
typedef uint16_t u16;
typedef uint32_t u32;
typedef int64_t s64;
typedef uint64_t u64;
#define U32_MAX	UINT32_MAX
#define U64_MAX	UINT64_MAX

/* fls64(): the 1-based position of the highest bit set, 0 for none. */
static inline int prism_fls64(u64 x)
{
	return x ? 64 - __builtin_clzll(x) : 0;
}
#endif

enum prism_tier {
	PRISM_HIGH = 0,
	PRISM_NORMAL = 1,
	PRISM_LOW = 2,
	PRISM_NR_TIERS = 3,
};

enum prism_dir {
	PRISM_READ = 0,
	PRISM_WRITE = 1,
	PRISM_NR_DIRS = 2,
};

/*
 * A tier's FIFO lists: reads, writes nobody waits for (background
 * writeback), and sync writes, which someone does wait for (REQ_SYNC,
 * FUA or PREFLUSH: an fsync's data, a journal commit). The first two are
 * numbered as the directions; sort trees stay per direction.
 */
#define PRISM_SYNC_WRITE	2
#define PRISM_NR_FIFOS		3

static inline enum prism_dir prism_fifo_dir(int fifo)
{
	return fifo == PRISM_READ ? PRISM_READ : PRISM_WRITE;
}

/* I/O priority classes, numbered as in include/uapi/linux/ioprio.h. */
enum prism_ioprio_class {
	PRISM_CLASS_NONE = 0,
	PRISM_CLASS_RT = 1,
	PRISM_CLASS_BE = 2,
	PRISM_CLASS_IDLE = 3,
};

/* Shares are in percent of dispatches; above half a lower tier would lead. */
#define PRISM_SHARE_UNIT	100
#define PRISM_SHARE_MAX		50

/*
 * The parameters the policy reads; times in jiffies, depths in percent.
 * Most are tunables under queue/iosched/; those marked "fixed" keep
 * prism_tunables_init()'s value on a queue (v3 took their files away: no
 * measured setting needed another value) and are here so that the
 * policy tests may vary them. The sync-write FIFO's expiry follows
 * read_expire.
 */
struct prism_tunables {
	unsigned long fifo_expire[PRISM_NR_FIFOS];	/* by FIFO list */
	unsigned long prio_aging_expire;	/* 0: no aging */
	u32 writes_starved;
	u32 fifo_batch;
	/* Set by be_tiers (prism_set_be_tiers()), varied by the tests. */
	int be_high_max;	/* BE levels 0..be_high_max are HIGH (-1: none) */
	int be_low_min;		/* BE levels be_low_min..7 are LOW (8: none) */
	/* Fixed: the tag reserve, % of the scheduler tags NORMAL, LOW may hold. */
	u32 normal_depth;
	u32 low_depth;
	u32 seq_gap;		/* fixed: sectors a stream may skip, sequential */
	/*
	 * Tier shares, in percent: a waiting tier gets at least this part of
	 * the dispatches made from it and the tiers above it (0: none, strict
	 * priority and aging only). Indexed by tier; HIGH's is unused.
	 */
	u32 share[PRISM_NR_TIERS];
	/*
	 * In-flight control, in nanoseconds. slice_idle, the one idle
	 * window (bfq's name): how long after a completion a tier whose next
	 * request comes quickly keeps the tiers below it out of the device
	 * (prism_window()), and how long a flow's turn waits for its next
	 * request once it has none queued, so a stream keeps the disk and
	 * its place in the fair queue across the gap between its requests
	 * (prism_flow_window()); 0: never; PRISM_AUTO: each from the device
	 * (v2 had a tunable for each, anticipate_us and flow_idle_us).
	 * target: the device time a higher tier's request may take before
	 * the tiers below it get fewer requests in flight (0: twice its
	 * time alone).
	 */
	s64 slice_idle;
	u64 target;
	/*
	 * Flows (see "Flows" below), both fixed. quantum: ns of estimated device time
	 * one flow's batch may take before the tier's fair queue chooses
	 * again. flow_depth: % of the scheduler tags one flow may hold while
	 * another flow owns requests (100: no limit). cost: the cost model's
	 * coefficients as set, 0 for the media's default or, with cost_auto,
	 * the learned value.
	 */
	u64 quantum;
	u32 flow_depth;
	struct prism_cost_params {
		u64 bps[PRISM_NR_DIRS];		/* bytes per second, streaming */
		u32 seqiops[PRISM_NR_DIRS];	/* 4 KiB I/Os per second, sequential */
		u32 randiops[PRISM_NR_DIRS];	/* 4 KiB I/Os per second, random */
	} cost;
	bool cost_auto;
	/*
	 * Token buckets: a tier's rate cap in sequential-equivalent KiB per
	 * second (the device time that many KiB of streaming reads take, by
	 * the cost model), indexed by tier; 0: no cap. HIGH's is unused.
	 */
	u32 rate_kbps[PRISM_NR_TIERS];
	u64 rate_burst;		/* fixed: ns of refill a bucket holds at most */
	/*
	 * bulk_merge: on flash, the largest request (bytes) a tier below an
	 * active one may grow to by merging; 0: no cap. A large bulk
	 * request is what a higher tier's request waits behind in a
	 * device's transfer or a volume's meter.
	 */
	u32 bulk_merge;
	/*
	 * writeback_low: background writeback (writes nobody waits for: the
	 * flusher's, for the dirty thresholds and for age) is queued in LOW,
	 * whatever the flusher's priority, so that it is served by LOW's
	 * share and kept out of a sync-write chain's gaps (see
	 * prism_classify_rq()).
	 */
	bool writeback_low;
};

#define PRISM_AUTO		(-1)

/* What one FIFO of one tier holds, as the mechanism reports it. */
struct prism_fifo_view {
	u32 queued;
	unsigned long oldest;	/* arrival time of the FIFO head, if queued */
	int flow;		/* the flow whose head that is (tier views) */
};

struct prism_tier_view {
	struct prism_fifo_view dir[PRISM_NR_FIFOS];	/* by FIFO list */
	u32 inflight;		/* dispatched, not yet completed */
	bool anticipated;	/* its next request is expected at once */
	/*
	 * A chain of sync writes it began is under way: one of its sync
	 * writes (an fsync's data, a journal block) or a flush that followed
	 * completed within the window, and what followed its past ones came
	 * within the window too (see prism_chained()). Holds LOW alone: the
	 * chain's next link may be issued at another priority (jbd2 writes
	 * the journal at BE3, NORMAL), but never by the bulk tier.
	 */
	bool chained;
	/*
	 * A request the scheduler never saw (a flush, which both kernels
	 * route past the elevator) is in the device within this tier's
	 * window: most likely its chain's, so the tier counts as active.
	 */
	bool flushing;
	/*
	 * A request of this tier completed within PRISM_ACTIVE_NS, the time
	 * after which the depth controller lifts its limit: the tier still
	 * runs its transactions, though nothing of it is in the device now.
	 * While the controller limits, the tiers below keep to it (see
	 * prism_choose()).
	 */
	bool recent;
	/*
	 * Requests the batch's flow has left on the batch's FIFO list, for
	 * the tier the batch is open in (see prism_batch): whether the batch
	 * can go on.
	 */
	u32 batch_left;
	/*
	 * The batch's flow has nothing queued and is expected back (see
	 * prism_flow_expected()), for the tier the batch is open in: within
	 * its turn (prism_batch_may_wait()) the tier holds the device for it;
	 * past it, the flow still competes for the next turn.
	 */
	bool flow_waits;
	/*
	 * For a flow's view: its stream counts as random (prism_stream_seq()
	 * says no). On a disk its reads go in arrival order, not in sector
	 * order: a few random reads spread over the flow's area save little
	 * seek by being sorted, and the one behind the sweep waits for the
	 * others, again and again while new ones land ahead of it.
	 */
	bool random;
};

/* What the device holds, for the in-flight control of lower tiers. */
struct prism_flight {
	u32 depth;		/* requests the driver accepts at once */
	u32 lower_limit;	/* in flight allowed below an active tier */
	u32 foreign;		/* in the device but not from prism (flushes) */
	/*
	 * Pacing below one request (see prism_depth_ctl.duty): the part of
	 * the time, in percent, one request of the tiers below may be in the
	 * device (100: not paced); their service time on an idle device, and
	 * how long ago each tier's last request left it (ns; filled only
	 * when paced).
	 */
	u32 lower_duty;
	u64 lower_service;
	u64 quiet[PRISM_NR_TIERS];
	/*
	 * Tiers, by bit, that own nothing and whose next request could not
	 * get a scheduler tag now (the requests owned fill every tag it may
	 * allocate from): no hold is made for them, since what it holds
	 * back owns the tags they wait for.
	 */
	u32 tagless;
};

/*
 * Dispatch state, owned by the policy and kept by the mechanism between
 * dispatches. A batch is a run of requests from one tier and direction
 * taken in sort order without re-checking FIFO deadlines.
 */
struct prism_batch {
	int tier;		/* -1 when no batch is open */
	int dir;		/* its FIFO list */
	int flow;		/* the flow in service, -1 for none */
	u32 count;		/* requests dispatched in this batch */
	u64 cost;		/* their cost, ns of estimated device time */
	u32 starved;		/* sync batches chosen while writes waited */
	/*
	 * Share credit per tier, in percent x ns of device time: grows by
	 * share x cost for each dispatch from a tier above while the tier
	 * waits; at (100 - share) x the cost of its last request the tier is
	 * owed a dispatch, which pays (100 - share) x its own cost (see
	 * pick_share()). Shares are thus parts of the device's time, not of
	 * its dispatches: a 1 MiB read pays for what it takes.
	 */
	s64 credit[PRISM_NR_TIERS];
	u64 last_cost[PRISM_NR_TIERS];	/* of the tier's last dispatch */
};

enum prism_take {
	PRISM_TAKE_NEXT = 0,	/* next in sort order from the head position */
	PRISM_TAKE_FIFO = 1,	/* oldest request of the FIFO */
};

struct prism_choice {
	int tier;
	int dir;		/* the FIFO list (its direction for sort order) */
	/*
	 * The flow to take from. -1 after prism_choose() means "pick one":
	 * the mechanism asks the tier's fair queue (prism_fq_pick_*()) and
	 * then prism_choose_in_flow() for the list.
	 */
	int flow;
	enum prism_take take;
	bool aged;		/* a lower tier served ahead of a busier higher one */
	bool shared;		/* the same, because the tier was owed its share */
	bool expired;		/* the FIFO head had passed its deadline */
	bool batch;		/* continues the open batch */
	bool unheld;		/* a hold was waived: its tier was tagless */
};

/* Why prism_choose() dispatched nothing although requests are queued. */
enum prism_hold {
	PRISM_HOLD_NONE = 0,	/* nothing queued, or not held */
	PRISM_HOLD_WINDOW = 1,	/* a higher tier is anticipated */
	PRISM_HOLD_DEPTH = 2,	/* the device or the lower limit is full */
	PRISM_HOLD_FLOW = 3,	/* the batch's flow is expected back */
};

/* A flow's sequential detector. */
#define PRISM_SEQ_SCORE_MAX	8
#define PRISM_SEQ_THRESHOLD	4

struct prism_stream {
	u64 last_end;		/* sector just past the stream's last request */
	u32 score;		/* 0..PRISM_SEQ_SCORE_MAX; sequential from threshold */
};

static inline bool prism_time_after_eq(unsigned long a, unsigned long b)
{
	return (long)(a - b) >= 0;
}

void prism_tunables_init(struct prism_tunables *t, unsigned int hz);
void prism_set_be_tiers(struct prism_tunables *t, int n);
int prism_be_tiers(const struct prism_tunables *t);

/*
 * The hot-path helpers below are inline: limit_depth() and insert run them
 * for every request, and under a CPU-bound load each call shows.
 */
static inline enum prism_tier prism_classify(unsigned int ioprio_class,
					     unsigned int level,
					     const struct prism_tunables *t)
{
	switch (ioprio_class) {
	case PRISM_CLASS_RT:
		return PRISM_HIGH;
	case PRISM_CLASS_IDLE:
		return PRISM_LOW;
	case PRISM_CLASS_BE:
		if ((int)level <= t->be_high_max)
			return PRISM_HIGH;
		if ((int)level >= t->be_low_min)
			return PRISM_LOW;
		return PRISM_NORMAL;
	case PRISM_CLASS_NONE:
	default:
		return PRISM_NORMAL;
	}
}

/*
 * The tier of a request: its I/O priority's, except for background
 * writeback with writeback_low set. The flusher issues that writeback at
 * its own priority (the default, NORMAL), not at that of whoever dirtied
 * the pages, and nobody waits for it; left in NORMAL it fills every gap of
 * a transaction in that tier (a commit's data write, journal blocks and
 * flushes), and on a disk with a write cache each cache flush then waits
 * while the drive writes it all out. In LOW it is held out of those gaps
 * and gets LOW's share of the device, as the transaction issue asks of
 * background writeback. Writes someone waits for (fsync's, sync's,
 * O_DIRECT's: REQ_SYNC, FUA, PREFLUSH) and swap-out keep their
 * submitter's tier.
 */
static inline enum prism_tier prism_classify_rq(unsigned int ioprio_class,
						unsigned int level,
						bool background,
						const struct prism_tunables *t)
{
	if (background && t->writeback_low)
		return PRISM_LOW;
	return prism_classify(ioprio_class, level, t);
}

/*
 * The tier of a request whose cgroup is one of prism's flows (not the
 * root): classes keep their order across cgroups, RT above all and IDLE
 * below (an "ionice -c3" backup in its own systemd unit yields to a
 * database in another, as it does outside cgroups), but a BE level,
 * which any process may raise for itself without privilege, does not
 * lift it above NORMAL, where the cgroups share by weight: levels 0-2
 * stay there, weighing more than the default among the cgroup's flows,
 * and take nothing from another cgroup. A level that lowers a request
 * (6-7 to LOW) only gives away, and keeps its tier.
 */
static inline enum prism_tier prism_tier_in_cgroup(enum prism_tier tier,
						   unsigned int ioprio_class)
{
	if (tier == PRISM_HIGH && ioprio_class != PRISM_CLASS_RT)
		return PRISM_NORMAL;
	return tier;
}

bool prism_tunables_valid(const struct prism_tunables *t);

void prism_batch_reset(struct prism_batch *b);

bool prism_choose(const struct prism_tier_view view[PRISM_NR_TIERS],
		  struct prism_batch *b, const struct prism_tunables *t,
		  const struct prism_flight *f, unsigned long now,
		  struct prism_choice *c, enum prism_hold *hold);


/*
 * After a dispatch: in sector order a request from a random stream ends
 * the batch, since the next request in sort order is a seek anyway and
 * the fair queue and deadlines should be looked at again, while a
 * sequential stream keeps its batch so that a disk can stream it. In
 * arrival order (flash) a batch buys no locality: while @others (other
 * flows of the tier are backlogged) it ends after each request, so flows
 * share the device request by request rather than fifo_batch at a time.
 */
static inline void prism_note_dispatch(struct prism_batch *b,
				       const struct prism_tunables *t,
				       bool sorted, bool sequential, bool others)
{
	if (((sorted && !sequential) || (!sorted && others)) &&
	    b->count < t->fifo_batch)
		b->count = t->fifo_batch;
}

/* Whether the stream counts as sequential now. */
static inline bool prism_stream_seq(const struct prism_stream *s)
{
	return s->score >= PRISM_SEQ_THRESHOLD;
}

/*
 * Feed one request of @sectors at @pos into a flow's detector @s (zeroed
 * when the flow is made); returns whether the flow now counts as
 * sequential.
 */
static inline bool prism_stream_update(struct prism_stream *s, u64 pos,
				       u32 sectors, u32 seq_gap)
{
	u64 gap;

	gap = pos >= s->last_end ? pos - s->last_end : s->last_end - pos;
	if (gap <= seq_gap) {
		if (s->score < PRISM_SEQ_SCORE_MAX)
			s->score++;
	} else {
		/* Fall faster than rising: one seek costs more than a hit. */
		s->score = s->score >= 2 ? s->score - 2 : 0;
	}
	s->last_end = pos + sectors;
	return prism_stream_seq(s);
}

u32 prism_tier_depth(enum prism_tier tier, u32 nr_requests,
		     const struct prism_tunables *t);

/*
 * The activity clock, one for the tag reserve and the holds. A tier is
 * active while it owns requests (inserted, not yet completed) and for
 * PRISM_ACTIVE_NS after its last completion: the next link of a chain of
 * dependent I/Os (a commit) arrives within that gap and must still find
 * its reserve. No hold lasts past it (the anticipation and flow windows
 * are kept within it, and the depth controller's limit lapses with it),
 * so a tier the holds protect is a tier the reserve protects: with the
 * reserve lifted at 50 ms and the holds at 100, a reader thinking 60 ms
 * came back to find every tag taken by a tier its own hold kept out of
 * the device.
 */
#define PRISM_ACTIVE_NS		100000000ULL	/* 100 ms */
#define PRISM_ACTIVE_MS		100

static inline bool prism_tier_active(u64 owned, unsigned long last_done,
				     unsigned long now, unsigned int hz)
{
	unsigned long window = (unsigned long)PRISM_ACTIVE_MS * hz / 1000;

	if (owned)
		return true;
	return !prism_time_after_eq(now, last_done + (window ? window : 1));
}

u32 prism_alloc_depth(enum prism_tier tier, bool higher_active,
		      u32 nr_requests, const struct prism_tunables *t);

u32 prism_word_depth(u32 depth, u32 sb_depth, u32 shift);

/*
 * The tier a thread's next tag allocation is charged to. limit_depth() is
 * not given the bio, so neither its per-I/O priority (io_uring, aio,
 * fio cmdprio) nor what the blk-ioprio cgroup policy (io.prio.class) made
 * of it; insert sees the request's final priority. Each insert records
 * (thread, tier) in a small direct-mapped table, one u32 per slot so a
 * lockless reader sees a consistent pair; an allocation by a thread found
 * there is charged to the tier of its last request, otherwise to the tier
 * of the thread's own I/O priority.
 */
#define PRISM_RECENT_BITS	8
#define PRISM_NR_RECENT		(1U << PRISM_RECENT_BITS)

static inline u32 prism_recent_slot(u32 pid)
{
	return (u32)(pid * 0x61C88647U) >> (32 - PRISM_RECENT_BITS);
}

/*
 * pid_max is at most 2^22 (PID_MAX_LIMIT): two bits below it hold the
 * tier, and the bits above it the group (the cgroup's slot in the group
 * table plus one, 0 for none; see PRISM_NR_GROUPS).
 */
#define PRISM_PID_BITS		22
#define PRISM_PID_MASK		((1U << PRISM_PID_BITS) - 1)
#define PRISM_GROUP_SHIFT	(PRISM_PID_BITS + 2)

static inline u32 prism_recent_key(u32 pid, enum prism_tier tier, u32 group)
{
	return (group << PRISM_GROUP_SHIFT) | (pid << 2) | (u32)tier;
}

/* The tier recorded for @pid in @key, or @fallback if the slot is another's. */
static inline enum prism_tier prism_alloc_tier(u32 key, u32 pid,
					       enum prism_tier fallback)
{
	u32 tier = key & 3;

	if (!pid || ((key >> 2) & PRISM_PID_MASK) != pid ||
	    tier >= PRISM_NR_TIERS)
		return fallback;
	return (enum prism_tier)tier;
}

/* The group recorded in @key, which prism_alloc_tier() found @pid's. */
static inline u32 prism_alloc_group(u32 key)
{
	return key >> PRISM_GROUP_SHIFT;
}

/*
 * Think time: how soon a tier issues its next request after its last one
 * completed, measured when a request arrives while the tier owns none
 * (the next link of a chain of dependent I/Os). An exponentially weighted
 * mean (weight 1/8 once PRISM_THINK_SAMPLES are in), each sample capped
 * at PRISM_THINK_CAP: a tier that went quiet counts as slow, not as
 * infinitely slow, so it is judged quick again after a few short gaps.
 */
#define PRISM_THINK_SAMPLES	8
#define PRISM_THINK_MIN		3	/* samples before anticipating */
#define PRISM_THINK_CAP		100000000ULL	/* 100 ms */

struct prism_think {
	u64 last_done;		/* ns of the tier's last completion, 0: none */
	u64 mean;		/* ns */
	u32 samples;
	/*
	 * Chains only (prism_chain_sample()): the part of the gaps that
	 * ended within the window, weighted as the mean, in 1/PRISM_QUICK_ONE.
	 */
	u32 quick;
};

#define PRISM_QUICK_ONE		1024

void prism_think_sample(struct prism_think *th, u64 now);
void prism_chain_sample(struct prism_think *th, u64 now, u64 window);

/*
 * Whether a tier is anticipated at @now: it completed a request less than
 * @window ago and its think time is within the window, so its next
 * request is likely before the window closes. Never for a window of 0.
 */
static inline bool prism_anticipated(const struct prism_think *th, u64 now,
				     u64 window)
{
	return window && th->last_done && th->samples >= PRISM_THINK_MIN &&
	       th->mean <= window && now - th->last_done < window;
}

/*
 * Whether a tier's sync-write chain is under way at @now: the next link
 * of a transaction (journal blocks after an fsync's data, the commit
 * record after them, the waiter's next write after the cache flush)
 * follows the last within the window, so the bulk tier is kept out of
 * the device meanwhile. @th times the gaps from each sync-write (or
 * flush) completion of the tier to the next request any tier above LOW
 * issued; th->last_done is the last such completion. A tier whose gaps
 * are longer than the window is never waited for, as for anticipation.
 *
 * Apart from prism_anticipated() because on a disk with a write cache a
 * bulk write let into a gap completes at once, and the flush that ends
 * the chain then waits while the disk writes it to the media: the link
 * pays for every bulk write that entered the cache since the last flush,
 * not for one request's service. So a chain is waited for while at least
 * half of its gaps end within the window (th->quick), whatever the
 * others' length: a committer preempted now and then (its next write
 * comes 50 ms late) has a mean gap above the window, and judged by the
 * mean it would lose every gap, each costing a flush many times a
 * window, for want of idling through a few windows in vain.
 */
static inline bool prism_chained(const struct prism_think *th, u64 now,
				 u64 window)
{
	return window && th->last_done && th->samples >= PRISM_THINK_MIN &&
	       th->quick >= PRISM_QUICK_ONE / 2 && now - th->last_done < window;
}

/*
 * Idling for a flow (bfq's slice_idle, the anticipatory scheduler's
 * wait): a stream that has nothing queued between two requests, because
 * its next one is issued only when the last completes, would lose the
 * disk to another flow (a seek, and another seek back) and, no longer
 * backlogged, its place in the fair queue, so that flows of any weight
 * end up served in turn. Instead its turn waits for it: while a request
 * of it is in the device (at most PRISM_FLOW_WAIT_MAX after its last
 * dispatch, so a stuck request cannot hold the others for long), and for
 * @window after its last completion if its think time is within the
 * window. A flow without enough think samples yet is given the benefit
 * of the doubt: a wrong guess costs one window.
 */
#define PRISM_FLOW_WAIT_MAX	100000000ULL	/* 100 ms */

static inline bool prism_flow_expected(const struct prism_think *th,
				       u64 inflight, u64 dispatched, u64 now,
				       u64 window)
{
	if (!window)
		return false;
	if (inflight)
		return now - dispatched < PRISM_FLOW_WAIT_MAX;
	return th->last_done && now - th->last_done < window &&
	       (th->samples < PRISM_THINK_MIN || th->mean <= window);
}

/*
 * Whether a flow whose request arrives while it is not backlogged comes
 * back to the fair queue where it left (prism_fq_return()) rather than at
 * the tier's virtual time: when it still has a request in the device, or
 * its last one completed less than PRISM_FLOW_RETURN ago. A stream whose
 * think time is longer than the window loses the disk at each gap, but
 * not its weight. What it keeps is bounded, however often it returns:
 * its debt, and no more than one turn of credit (prism_fq_return()).
 */
#define PRISM_FLOW_RETURN_MS	100
#define PRISM_FLOW_RETURN	(PRISM_FLOW_RETURN_MS * 1000000ULL)

static inline bool prism_flow_returning(const struct prism_think *th,
					u64 inflight, u64 now)
{
	return inflight ||
	       (th->last_done && now - th->last_done < PRISM_FLOW_RETURN);
}

/*
 * Whether a flow whose request arrives while it is not backlogged has
 * been idle longer than the return window: it owns nothing, does not
 * return (@returning), and its last request arrived at @last (jiffies)
 * PRISM_FLOW_RETURN_MS or more before @now (@hz a second). Its start is
 * then set to the virtual time (prism_fq_rest()).
 */
static inline bool prism_flow_rested(bool returning, u64 owned,
				     unsigned long last, unsigned long now,
				     unsigned int hz)
{
	unsigned long window = (PRISM_FLOW_RETURN_MS * hz + 999) / 1000;

	return !returning && !owned && prism_time_after_eq(now, last + window);
}

/*
 * Depth control: while a higher tier is active, how many requests of the
 * tiers below it may be in flight, adapted to the higher tiers' device
 * time (dispatch to completion) against a target, at most once per target
 * interval (so the requests already in the device do not move it again
 * and again), on the worst sample of the interval: over the target the
 * limit is cut by a quarter, by half when over twice the target; under
 * it the limit grows by one; never below one (below that, pacing: see
 * duty), never above the device's depth. On a queueing disk (NCQ) a
 * higher-tier read may wait behind a whole queue of sequential bulk
 * reads the drive prefers, a hundred times its service time: the limit
 * must fall in a few steps, and not climb back one step per fast reply.
 *
 * "solo" is the device's own latency for a higher-tier request, the
 * automatic target's base: a running minimum (see floor_sample()) of the
 * device time of higher-tier requests dispatched with nothing of a lower
 * tier in flight. A minimum and not a mean, because a device may carry
 * the lower tier's load past its last request: a rate limiter's bucket in
 * debt (a cloud volume), a disk's write cache destaging. When the bulk
 * work never leaves the device empty, no request is solo; then the
 * minimum over every sample ("floor") stands in for the target's base,
 * but is not trusted: until solo samples come, prism_depth_sample()
 * counts every sample beside lower requests as over the target (a
 * probe), since on a full meter every sample waits alike and twice
 * their minimum is never exceeded.
 */
struct prism_depth_ctl {
	u32 limit;
	u32 solo_samples;
	u64 solo;		/* ns, running minimum */
	u64 floor;		/* ns, running minimum of every sample */
	u32 floor_samples;
	u64 lat;		/* ns, weighted mean of every sample */
	/*
	 * Weighted means of the solo samples and of those taken with a
	 * lower request in flight ("mixed"): what the lower tiers add.
	 */
	u64 solo_mean;		/* ns, over solo_samples */
	u64 mixed;		/* ns */
	u32 mixed_samples;
	u64 worst;		/* ns, the worst sample since last_change */
	u64 last_change;	/* ns: the limit was last cut or grown */
	u64 last_sample;	/* ns */
	/*
	 * Service time of LOW requests dispatched to an idle device: what a
	 * higher tier's next request waits when a LOW one goes first. The
	 * automatic anticipation window's base. A mean, not a minimum: what a
	 * LOW request costs the chain includes its seeks, which its best
	 * case (a sequential read right after another) leaves out.
	 */
	u64 bulk;		/* ns, weighted mean */
	u32 bulk_samples;
	u64 cuts;		/* statistics: times the limit was cut */
	/*
	 * Below one request: at a limit of one and still over the target,
	 * the tiers below get one request in the device for this part of
	 * the time (percent; 100: not paced): after each, the device is
	 * theirs again only once (100 - duty) / duty of their service time
	 * has passed. Cut by half, not below LOW's share, grown by
	 * PRISM_DUTY_STEP, like the limit. On a metered volume (a cloud
	 * disk's IOPS and bandwidth caps) one bulk request in flight at a
	 * time is already all of it: a 1 MiB read is 62 ms of a 16 MiB/s
	 * meter, and the next one follows at once; only time between them
	 * leaves the meter to the higher tier. Only on devices that take
	 * more than one request: on one that takes one, a higher tier's
	 * device time is its own service and says nothing of the bulk work.
	 */
	u32 duty;
};

/*
 * A tier's request overdue in the device: the tier has requests in
 * flight, and none of its requests completed or was dispatched for
 * PRISM_STALL_MS. A device that reorders (an NCQ disk serving the nearest
 * command first, shortest positioning time) can keep one far request
 * waiting for as long as a lower tier's stream keeps offering near ones:
 * on the emulated NCQ disk a database read waited 8.6 s behind an IDLE
 * sequential reader, pgbench's connections took 21 s, and the depth
 * controller, which learns only from completions, never heard of it.
 * While it lasts nothing of the tiers below may go to the device (the
 * mechanism sets the lower limit to 0), so the device drains them and
 * serves it. The activity clock's length: ten random reads of a disk,
 * and what a request behind a metered volume's bulk debt may wait.
 */
#define PRISM_STALL_MS		100

static inline bool prism_tier_stalled(u64 inflight, unsigned long last_done,
				      unsigned long last_dispatch,
				      unsigned long now, unsigned long stall)
{
	return inflight && prism_time_after_eq(now, last_done + stall) &&
	       prism_time_after_eq(now, last_dispatch + stall);
}

#define PRISM_DUTY_FULL		100
#define PRISM_DUTY_STEP		10

/*
 * Whether the controller at @limit and @duty limits the tiers below an
 * active one on a device that takes @depth: fewer in flight than the
 * device takes, or paced.
 */
static inline bool prism_depth_limits(u32 limit, u32 duty, u32 depth)
{
	return limit < depth || duty < PRISM_DUTY_FULL;
}

/*
 * The longest paced gap: a paced tier still gets a request through about
 * every second where one takes it up to half a second. On the 16 MiB/s
 * volume a 1 MiB read behind the meter's debt took 178 ms, and at 10%
 * its gap of 1.6 s left the backup seconds without a read.
 */
#define PRISM_PACED_GAP_MAX	500000000ULL	/* 500 ms */


#define PRISM_WINDOW_MIN	500000ULL	/* 0.5 ms */
#define PRISM_WINDOW_MAX	20000000ULL	/* 20 ms */

void prism_depth_init(struct prism_depth_ctl *d, u32 depth);
u64 prism_depth_target(const struct prism_depth_ctl *d,
		       const struct prism_tunables *t);
void prism_depth_observe(struct prism_depth_ctl *d, u64 lat, bool solo,
			 u64 now);
void prism_depth_sample(struct prism_depth_ctl *d,
			const struct prism_tunables *t, u64 lat, bool solo,
			u64 now, u32 depth);
void prism_depth_idle(struct prism_depth_ctl *d, u64 now, u32 depth,
		      bool higher_inflight, bool contended);
void prism_bulk_sample(struct prism_depth_ctl *d, u64 service);
u64 prism_paced_gap(u64 service, u32 duty);
u64 prism_paced_wait(const struct prism_flight *f, int tier);

/*
 * The times at which something the view holds for may end with time
 * alone, in ns on the clock of @now (0: none applies), for
 * prism_hold_until(): the earliest anticipated or chained tier's window
 * close, the waited flow's (its window after its last completion, or the
 * cap on waiting for its request in the device), the earliest refill of
 * a rate-capped tier's bucket.
 */
struct prism_hold_ends {
	u64 now;
	u64 window;
	u64 flow;
	u64 refill;
	bool paced;		/* out: a depth hold waits for a paced gap */
};

u64 prism_hold_until(enum prism_hold hold,
		     const struct prism_tier_view view[PRISM_NR_TIERS],
		     const struct prism_flight *f, int first,
		     struct prism_hold_ends *e);

/*
 * The anticipation window: the tunable, or automatically the service time
 * of a LOW request on an idle device, within 0.5-20 ms. That is the break
 * even: waiting W for the next link costs the tiers below at most W of
 * device time, while not waiting costs the link one LOW request's
 * service. Before any measurement bfq's slice_idle (8 ms) on rotational
 * media and 1 ms on flash.
 */
static inline u64 prism_window(const struct prism_depth_ctl *d,
				const struct prism_tunables *t, bool rotational)
{
	u64 w;

	if (t->slice_idle != PRISM_AUTO)
		return (u64)t->slice_idle;
	if (d->bulk_samples < PRISM_THINK_MIN)
		return rotational ? 8000000ULL : 1000000ULL;
	w = d->bulk;
	if (w < PRISM_WINDOW_MIN)
		w = PRISM_WINDOW_MIN;
	if (w > PRISM_WINDOW_MAX)
		w = PRISM_WINDOW_MAX;
	return w;
}

/*
 * The least automatic flow window while weights differ: bfq's slice_idle,
 * which bfq keeps on every medium in an asymmetric scenario. Only the
 * wait gives the weights there, and a wait lasts as long as the flow
 * thinks, not the window: the window only bounds the think times waited
 * out. With 1 ms on flash (null_blk 32 x 4 ms, two readers at iodepth 1,
 * BE 0 and 7, 4 s, 6 runs in one boot) the heavier reader's occasional
 * think over 1 ms under emulation handed the device to the other: 3.2 to
 * 7.3 to 1; with 8 ms 7.9 to 10.6 to 1 (weights 8 to 1), at the same
 * total I/Os.
 */
#define PRISM_WEIGHTS_WINDOW	8000000ULL	/* 8 ms */

/*
 * How long a flow's turn waits for its next request (see
 * prism_flow_expected()): automatically the tier window on rotational
 * media, where keeping a stream on the disk saves seeks as well as its
 * place in the fair queue; on flash an idle device costs more than the
 * order of service gains, so never, as bfq on a queueing SSD, unless
 * weights differ (@weights_differ): then, on any medium, at least
 * PRISM_WEIGHTS_WINDOW.
 */
static inline u64 prism_flow_window(const struct prism_depth_ctl *d,
				     const struct prism_tunables *t,
				     bool rotational, bool weights_differ)
{
	u64 w;

	if (t->slice_idle != PRISM_AUTO)
		return (u64)t->slice_idle;
	if (!rotational && !weights_differ)
		return 0;
	w = prism_window(d, t, rotational);
	if (weights_differ && w < PRISM_WEIGHTS_WINDOW)
		w = PRISM_WEIGHTS_WINDOW;
	return w;
}

/*
 * Whether flows of unequal weights were backlogged in a tier, together
 * or one after the other, within the last second (@seen, jiffies, 0 for
 * never; @hz a second): the one case where the automatic flow window
 * idles on flash. A flow waited for is not backlogged, so a tier of two
 * flows looks asymmetric only now and then; the second spans that.
 */
static inline bool prism_weights_differed(unsigned long now,
					  unsigned long seen,
					  unsigned long hz)
{
	return seen && !prism_time_after_eq(now, seen + hz);
}

/*
 * Flows. A flow is the work of one submitter at one tier: a process
 * (thread group), so that a database's threads are one flow and not many
 * strangers; cgroups are meant to become flows of their own the same way
 * (a flow is an id and a weight to everything below). Inside a tier, flows
 * share the device by weight, in virtual time, with WF2Q+ (Bennett and
 * Zhang, "WF2Q+: hierarchical packet fair queueing", 1997), the algorithm
 * under bfq's B-WF2Q+: a flow may start a turn once its virtual start
 * time is not after the tier's virtual time (it is "eligible"), and of the
 * eligible flows the one that would finish first goes. Each turn is a
 * batch of at most fifo_batch requests and quantum of device time (one
 * request on a disk when the flow is not sequential); the flow is charged
 * what the batch cost. WF2Q+'s bound, with the batch as its packet: a
 * backlogged flow's service never lags its weighted part of the tier's
 * service by more than one maximum batch of its own plus one of anyone's
 * (tests/policy/flow_test.c checks it in simulation), and a flow that
 * was idle starts at the tier's virtual time, so a light flow is served
 * at the next turn.
 */

/*
 * Weight from I/O priority: bfq's and CFQ's curve, BE level L weighs
 * (8 - L) x 25, so BE0 : BE4 : BE7 = 200 : 100 : 25, on cgroup v2's
 * scale (io.prism.weight, 1-10000, default 100): the default priority
 * weighs what a cgroup does by default, and a process of the root cgroup
 * shares with a cgroup as one of equal weight. RT levels weigh twice
 * their BE counterpart (under the default mapping RT shares HIGH with
 * BE 0-2 and should lead it); IDLE weighs as BE7; NONE, the kernel's
 * default for a task that never set one, as BE4 (IOPRIO_NORM).
 */
#define PRISM_WEIGHT_UNIT	25
#define PRISM_WEIGHT_MAX	(2 * 8 * PRISM_WEIGHT_UNIT)
/* The heaviest weight in a fair queue: a cgroup's (CGROUP_WEIGHT_MAX). */
#define PRISM_FQ_WEIGHT_MAX	10000

static inline u32 prism_weight(unsigned int ioprio_class, unsigned int level)
{
	if (level > 7)
		level = 7;
	switch (ioprio_class) {
	case PRISM_CLASS_RT:
		return 2 * (8 - level) * PRISM_WEIGHT_UNIT;
	case PRISM_CLASS_BE:
		return (8 - level) * PRISM_WEIGHT_UNIT;
	case PRISM_CLASS_IDLE:
		return PRISM_WEIGHT_UNIT;
	default:
		return 4 * PRISM_WEIGHT_UNIT;
	}
}

/*
 * Cost: a request's estimated device time in ns, from a model in the
 * spirit of the kernel's io.cost.model (blk-iocost): per direction, the
 * streaming rate in bytes per second and the 4 KiB I/Os per second when
 * sequential and when random. A request costs a base (that of a 4 KiB
 * I/O of its kind less the transfer of 4 KiB) plus its transfer. "Seq"
 * means it starts within seq_gap of where its flow's last request in that
 * direction ended. The coefficients come as prism_cost_params; the hot
 * path uses them digested into a prism_cost_model.
 */
#define PRISM_PAGE_BYTES	4096U

struct prism_cost_model {
	u64 seq_base[PRISM_NR_DIRS];	/* ns */
	u64 rand_base[PRISM_NR_DIRS];	/* ns */
	u64 page_ns[PRISM_NR_DIRS];	/* ns per 4 KiB transferred, << 8 */
};

void prism_cost_defaults(struct prism_cost_params *p, bool rotational);
void prism_cost_effective(struct prism_cost_params *out,
			  const struct prism_cost_params *set,
			  const struct prism_cost_params *learned,
			  bool use_learned, bool rotational);
void prism_cost_digest(struct prism_cost_model *m,
		       const struct prism_cost_params *p);

static inline u64 prism_cost(const struct prism_cost_model *m, int dir,
			     u32 bytes, bool seq)
{
	u64 base = seq ? m->seq_base[dir] : m->rand_base[dir];

	return base + (((u64)bytes * m->page_ns[dir]) >> 20);
}

/*
 * Whether a request at @pos continues its flow's last request in the
 * same direction, which ended at @last_end (0: none yet).
 */
static inline bool prism_cost_seq(u64 last_end, u64 pos, u32 seq_gap)
{
	u64 gap = pos >= last_end ? pos - last_end : last_end - pos;

	return last_end && gap <= seq_gap;
}

/*
 * The cost learner (cost_model=auto): from the device time each timed
 * request used (prism_learn_busy()) it fits, per direction and kind
 * (sequential or random), the time of a 4 KiB I/O and the time per byte,
 * by least squares over a decaying window, and turns them back into
 * coefficients. Sums are in us and KiB, which keeps them within 64 bits.
 */
#define PRISM_LEARN_MIN		32	/* samples of a kind before trusting it */
#define PRISM_LEARN_DECAY	1024	/* samples after which old ones halve */

struct prism_learn_sums {
	u64 n;
	u64 x;		/* KiB */
	u64 y;		/* ns */
	u64 xx;
	u64 xy;
};

struct prism_cost_learner {
	struct prism_learn_sums s[PRISM_NR_DIRS][2];	/* [dir][seq] */
	u64 samples;
};

/*
 * The mechanism times one dispatch in PRISM_LEARN_EVERY, gathers their
 * points (prism_learn_point()) into sums without a lock where they
 * complete, and folds the sums in (prism_learn_add()) under its lock.
 */
#define PRISM_LEARN_EVERY	4

/*
 * The device time a completed request used: from when the device could
 * first work on it, its dispatch or the completion before it if that came
 * later (until then the device was busy with others), to its completion,
 * all in ns. On a device that serves one request at a time this is the
 * request's service, including the round trip in which the device waits
 * for its next command (a drive's read-ahead hides that from a sequential
 * stream's own latency, not from the stream's rate). On a device that
 * serves several at once it is the time between completions: each
 * request's part of the device's throughput, which is what a share of
 * the device is made of.
 */
static inline u64 prism_learn_busy(u64 dispatched, u64 prev_done, u64 done)
{
	u64 from = prev_done > dispatched ? prev_done : dispatched;

	return done > from ? done - from : 0;
}

void prism_learn_point(u32 bytes, u64 device_ns, u64 *x, u64 *y);
void prism_learn_add(struct prism_cost_learner *l, int dir, bool seq,
		     const struct prism_learn_sums *b);
void prism_learn_sample(struct prism_cost_learner *l, int dir, bool seq,
			u32 bytes, u64 device_ns);

/*
 * A token bucket of estimated device time (ns of cost): it fills at
 * @rate ns of cost per second of wall time up to a burst of
 * @burst ns of it (the rate_burst tunable), a dispatch takes its cost (the bucket may
 * go into debt by one request), and the tier may dispatch while it holds
 * tokens. A capped tier waits for the refill, not for a poll: the
 * mechanism runs the queue again after prism_bucket_wait().
 */
#define PRISM_BUCKET_BURST_MS	100	/* rate_burst's default */
#define PRISM_BUCKET_RATE_MAX	(1000ULL * 1000000000ULL)	/* 1000 devices */

struct prism_bucket {
	s64 tokens;
	u64 stamp;	/* ns the bucket was last filled to; 0: never */
};

u64 prism_bucket_rate(u32 kbps, u64 bps);
void prism_bucket_fill(struct prism_bucket *bk, u64 rate, u64 burst_ns,
		       u64 now);
u64 prism_bucket_wait(const struct prism_bucket *bk, u64 rate, u64 now);

static inline bool prism_bucket_ready(const struct prism_bucket *bk)
{
	return bk->tokens > 0;
}

static inline void prism_bucket_charge(struct prism_bucket *bk, u64 cost)
{
	bk->tokens -= (s64)cost;
}
bool prism_learn_params(const struct prism_cost_learner *l,
			const struct prism_cost_params *prior,
			struct prism_cost_params *out);

#include "prism_wf2q.h"

/*
 * How long waiting for flow @f (not backlogged; see prism_flow_expected())
 * may last on a device that accepts @depth requests at once, given the
 * flow window @window; 0: waiting cannot pay. On a disk taking one command
 * at a time, the next request of a stream (@s sequential) saves a seek,
 * and without the wait a flow issuing one request at a time is never
 * backlogged, so flows of unequal weights would be served alike: the
 * whole window. A random flow among equal weights saves no seek and keeps
 * its place in the fair queue anyway (prism_flow_returning()): a short
 * wait only, PRISM_SEEKY_WINDOW (bfq's BFQ_MIN_TT for a seeky queue),
 * which still covers a reader that issues its next request at once and
 * does not hold the disk for every pgbench backend's think time. On a
 * queueing device (NCQ, a deep volume) the drive orders what it holds, so
 * a random flow gains no seek while every other flow waits out its
 * request: as bfq decides there, wait only for a stream or while the
 * tier's weights are asymmetric (only the wait keeps their ratio). On
 * flash no order saves anything: only unequal weights pay for the wait.
 * docs/design.md gives the measurements behind each case.
 */
#define PRISM_SEEKY_WINDOW	2000000ULL	/* 2 ms */

static inline u64 prism_flow_idle_window(u32 depth, bool rotational,
					 const struct prism_stream *s,
					 const struct prism_fq *fq,
					 const struct prism_fq_flow *f,
					 u64 window)
{
	if (rotational && s->score >= PRISM_SEQ_THRESHOLD)
		return window;
	if (fq->wsum != fq->nr * f->weight)
		return window;
	if (rotational && depth <= 1)
		return window < PRISM_SEEKY_WINDOW ? window :
						     PRISM_SEEKY_WINDOW;
	return 0;
}

/*
 * Per-flow tag limit (seed 001's CPQ, made progressive and never zero):
 * while another flow owns requests, a flow holding its part of the
 * scheduler tags (flow_depth %) or more may allocate only within a
 * shallower depth, the smaller the more it holds: 2 x part - held, never
 * below one. 0: no limit.
 */
u32 prism_flow_alloc_depth(u64 owned, bool others, u32 nr_requests,
			   const struct prism_tunables *t);

/* The scheduler tags a flow may hold before it is limited (flow_depth %). */
u64 prism_flow_part(u32 nr_requests, const struct prism_tunables *t);

/* The same for a flow_depth of @pct, read apart from the tunables. */
static inline u64 prism_flow_part_pct(u32 nr_requests, u32 pct)
{
	u64 part = (u64)nr_requests * pct / 100;

	return part ? part : 1;
}

/*
 * Whether the per-flow tag limit can apply with @total requests owned:
 * not when it is off (flow_depth @pct 100), when no two flows can own
 * requests, or when none can own its part.
 */
static inline bool prism_flow_limit_may(u64 total, u32 nr_requests, u32 pct)
{
	return pct < 100 && total >= 2 &&
	       total >= prism_flow_part_pct(nr_requests, pct);
}

/* flow_depth @pct as a part of 1024 for prism_flow_limit_near(). */
static inline u32 prism_flow_frac(u32 pct)
{
	return pct < 100 ? pct * 1024 / 100 : U32_MAX;
}

/*
 * A test without a division that is true wherever prism_flow_limit_may()
 * is (@frac from prism_flow_frac(): rounded down, so its part is never
 * larger), for a fast path that leaves the exact test to a slow one.
 */
static inline bool prism_flow_limit_near(u64 total, u32 nr_requests, u32 frac)
{
	return total >= 2 && total >= (((u64)nr_requests * frac) >> 10);
}

/*
 * Whether a flow's wait gives way (bfq injects its wakers' I/O the same
 * way): not while another flow of its tier (@v: the tier's view; the
 * waited flow has nothing queued) has sync writes queued. Those are most
 * likely the waited flow's own chain, issued by a helper: an fsync's
 * journal blocks come from jbd2, in the committer's tier by default
 * (BE3 and BE4 are both NORMAL), and the committer's next request only
 * comes once they are written. Waiting would hold the link it waits for.
 */
static inline bool prism_flow_wait_yields(const struct prism_tier_view *v)
{
	return v->dir[PRISM_SYNC_WRITE].queued;
}

/*
 * Whether the open batch's turn has room left to wait for its flow: the
 * same bounds as its going on (fifo_batch requests, quantum of cost).
 */
static inline bool prism_batch_may_wait(const struct prism_batch *b,
					const struct prism_tunables *t)
{
	return b->tier >= 0 && b->flow >= 0 && b->count < t->fifo_batch &&
	       b->cost < t->quantum;
}

/*
 * The fair queue gave a new turn to the batch's own flow, which has nothing
 * queued but is expected back (the mechanism lets it compete for the turn
 * as if it were backlogged, as bfq keeps an idling queue in service): the
 * turn starts afresh and waits for it.
 */
static inline void prism_batch_wait_turn(struct prism_batch *b, int tier,
					 int flow)
{
	b->tier = tier;
	b->flow = flow;
	b->count = 0;
	b->cost = 0;
}

/* The first list of a new batch inside the chosen flow; see prism_choose(). */
void prism_choose_in_flow(const struct prism_tier_view *fv,
			  struct prism_batch *b, const struct prism_tunables *t,
			  unsigned long now, struct prism_choice *c);

void prism_account_idle(struct prism_batch *b, const struct prism_tunables *t,
			u32 queued_tiers, int tier, u64 ns);

/*
 * Keep the share credits after a dispatch of @cost: a waiting tier below
 * the one served earns share x cost; a tier served by its share pays
 * (100 - share) x its cost; one served in its own right, or with nothing
 * queued, starts again from zero, so no tier banks credit while it is
 * idle or first. The batch counts what it has cost.
 */
static inline void prism_account(struct prism_batch *b,
				 const struct prism_tunables *t,
				 u32 queued_tiers,
				 const struct prism_choice *c, u64 cost)
{
	int tier;

	if (queued_tiers == (1U << c->tier) && !c->shared) {
		/* One tier queued, served in its own right: all from zero. */
		memset(b->credit, 0, sizeof(b->credit));
	} else {
		for (tier = 0; tier < PRISM_NR_TIERS; tier++) {
			if (!(queued_tiers & (1U << tier)))
				b->credit[tier] = 0;
			else if (tier > c->tier)
				b->credit[tier] += (s64)(t->share[tier] * cost);
			else if (tier == c->tier && c->shared)
				b->credit[tier] -= (s64)((PRISM_SHARE_UNIT -
							  t->share[tier]) *
							 cost);
			else if (tier == c->tier)
				b->credit[tier] = 0;
		}
	}
	b->last_cost[c->tier] = cost;
	if (c->batch)
		b->cost += cost;
	else if (b->tier == c->tier && !c->aged && !c->shared)
		b->cost = cost;	/* the batch c opened */
}

/*
 * How to take from FIFO list @dir: next in sort order, unless the head has
 * expired; sync writes always in arrival order, since they are few, small
 * and each the link of a chain someone waits on, and the sort tree holds
 * background writes too; reads in arrival order too where the flow's
 * stream is @random (see prism_tier_view.random).
 */
static inline enum prism_take prism_take_for(int dir, bool expired,
					     bool random)
{
	return expired || dir == PRISM_SYNC_WRITE ||
	       (random && dir == PRISM_READ) ? PRISM_TAKE_FIFO :
					       PRISM_TAKE_NEXT;
}

/* A choice in a tier's own right: not aged, not a share, not expired. */
static inline void prism_choice_plain(struct prism_choice *c)
{
	c->aged = false;
	c->shared = false;
	c->expired = false;
	c->batch = false;
}

/*
 * The open batch goes on if its flow has @left requests on the batch's
 * list and its turn has room (fifo_batch requests, quantum of cost):
 * fill in @c for the next one and count it. prism_choose() continues the
 * batch this way once nothing else applies.
 */
static inline bool prism_choose_batch(struct prism_batch *b,
				      const struct prism_tunables *t,
				      u32 left, struct prism_choice *c)
{
	if (!left || !prism_batch_may_wait(b, t))
		return false;
	c->tier = b->tier;
	c->flow = b->flow;
	c->dir = b->dir;
	/* On a disk a batch goes on only in a sequential stream. */
	c->take = prism_take_for(b->dir, false, false);
	prism_choice_plain(c);
	c->batch = true;
	b->count++;
	return true;
}

/*
 * prism_choose() for a device with one busy tier, without its view: the
 * mechanism has checked that @tier alone has requests queued and that no
 * tier above it is active (in flight, anticipated, flushing). Then no
 * aging or share can apply and nothing guards, so the open batch goes on
 * in @tier (its flow has @left requests on its list) or the tier's fair
 * queue starts a new turn (c->flow -1), unless the batch's flow may be
 * waited for (@may_wait: see prism_flow_expected()), which takes the full
 * view to decide: false then. The policy tests hold the two to the same
 * answer. On a device with one busy tier that is most dispatches, and
 * building the view most of their cost.
 */
static inline bool prism_choose_alone(struct prism_batch *b,
				      const struct prism_tunables *t,
				      int tier, u32 left, bool may_wait,
				      struct prism_choice *c)
{
	if (b->tier == tier && prism_choose_batch(b, t, left, c))
		return true;
	if (may_wait)
		return false;
	c->tier = tier;
	c->flow = -1;
	prism_choice_plain(c);
	return true;
}

/*
 * The direct lane: a request that arrives when nothing it could be
 * ordered against is queued goes on a plain FIFO that dispatch serves
 * first, without the fair queue, the shares or the choice. What would
 * those decide? With nothing else queued, prism_choose() takes the
 * request as it is (work conservation), so the lane changes what is
 * booked, not what is dispatched: the flow's virtual time and the tiers'
 * share credits are not charged for it, as they are not for a flow that
 * is served the moment it asks. It is for devices with room to spare,
 * where most dispatches find one request queued, and it costs a third
 * of a dispatch through the fair queue (prism profile on nullb-cpu).
 *
 * It applies only while nothing could have been chosen otherwise:
 * not @lane_off (see prism_lane_off()); @nr_queued requests queued, all
 * of them already on the lane (@nr_direct, of @direct_tier); no tier
 * above @tier active or anticipated (@higher_quiet); and every request
 * prism owns, this one included (@owned), fits in the device at once
 * (@depth), so none waits on the lane: a lane that filled on a device
 * without room would serve its flows in arrival order, not by weight.
 */
static inline bool prism_lane_allows(bool lane_off, u32 nr_queued,
				     u32 nr_direct, int direct_tier, int tier,
				     bool higher_quiet, u64 owned, u32 depth)
{
	return !lane_off && nr_queued == nr_direct &&
	       (!nr_direct || direct_tier == tier) && higher_quiet &&
	       owned <= depth;
}

/*
 * The lane is closed while any of these decides what is dispatched: the
 * queue is sorted, flows are idled for (@flow_window), flows of unequal
 * weights were seen lately (@weights_differ: the fair queue orders the
 * backlogged flows, which the lane's never are), the depth controller
 * limits (@limit below @depth) or paces (@duty), a tier has a rate cap
 * (@capped).
 */
static inline bool prism_lane_off(bool sorted, u64 flow_window,
				  bool weights_differ, u32 limit, u32 duty,
				  u32 depth, bool capped)
{
	return sorted || flow_window || weights_differ ||
	       prism_depth_limits(limit, duty, depth) || capped;
}

/*
 * Latency histograms (debugfs "latency"): log-scaled buckets of
 * nanoseconds, two per power of two, so each bucket spans 1.5x or 1.33x
 * of its lower bound. Bucket 0 holds everything below 1024 ns; bucket b
 * >= 1 starts at (2 + (b - 1) % 2) << ((b - 1) / 2 + 9) ns: 1024, 1536,
 * 2048, 3072, ...; the last, from about 8.6 s, is open-ended.
 */
#define PRISM_HIST_BUCKETS	48

static inline u32 prism_hist_bucket(u64 ns)
{
	int top;
	u32 b;

	if (ns < 1024)
		return 0;
	top = prism_fls64(ns);		/* at least 11 */
	b = 1 + 2 * (top - 11) + ((ns >> (top - 2)) & 1);
	return b < PRISM_HIST_BUCKETS ? b : PRISM_HIST_BUCKETS - 1;
}

static inline u64 prism_hist_lower(u32 b)
{
	if (!b)
		return 0;
	return (2ULL + (b - 1) % 2) << ((b - 1) / 2 + 9);
}

#endif /* _PRISM_POLICY_H */
