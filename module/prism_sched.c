// SPDX-License-Identifier: GPL-2.0
/*
 * prism: a priority-aware blk-mq I/O scheduler.
 *
 * Requests are sorted into three tiers by I/O priority (HIGH, NORMAL, LOW);
 * the highest non-empty tier is served first, but a waiting lower tier
 * gets its share of the dispatches (normal_share, low_share) and a request
 * that has waited prio_aging_expire is served ahead of it. Inside a
 * tier prism behaves like mq-deadline: FIFOs with deadlines for reads,
 * sync writes (someone waits: fsync, journal commits) and background
 * writes, batches in sector order (C-LOOK on rotational media, arrival
 * order on flash), reads and sync writes preferred over background writes
 * up to writes_starved. Scheduler tag
 * depth is held in reserve for higher tiers in limit_depth().
 *
 * In-flight control protects chains of dependent requests (a commit: write,
 * flush, journal, each issued when the last completes), which have nothing
 * queued between links: after a higher tier's completion, lower tiers are
 * held out of the device for an anticipation window if the tier's think
 * time says its next link comes within it; while a higher tier has
 * requests in the device, lower tiers may not fill the device's last
 * driver tags (where a higher request arriving next would queue behind
 * them) nor exceed a limit the depth controller adapts to the higher
 * tiers' device times. Shares still pass the window and aging passes
 * everything, so nothing starves. A hold re-runs the queue from the
 * completion (restart flag) or the window's timer.
 *
 * This file holds the elevator operations and the request lifecycle: a
 * request's first insert (its tier, its flow, the books), its insert
 * (merged, or onto the dispatch list, the direct lane or its flow), its
 * dispatch (out of every list, into the books, stamped for what times
 * it), its completion, the merges, and the setup and teardown of a
 * queue and of the module. The mechanism it drives is in files of their
 * own, as bfq splits bfq-wf2q.c and bfq-cgroup.c from bfq-iosched.c:
 * prism_flow.c the flows, their lists and the dispatch choice among
 * tiers, flows and requests; prism_hold.c the in-flight control (the
 * views, the holds and their timers, pacing, the depth controller's
 * samples), the tag limits (limit_depth()) and the cost learner;
 * prism_sysfs.c the tunables; prism_debugfs.c what debugfs shows;
 * prism_cgroup.c the blkcg policy. What they share is in prism.h, with
 * the helpers that a per-request path inlines from another file, so that
 * the split costs no call. Every decision is taken by prism_policy.c.
 *
 * Locking: one spinlock per queue, prism_data.lock, guards every list,
 * tree, counter and the batch and stream state. It is taken in
 * insert_requests(), dispatch_request() (whose choice and holds, in
 * prism_flow.c and prism_hold.c, run under it), bio_merge() (the core
 * calls the merge hooks with it held), the sysfs stores (prism_sysfs.c)
 * and the debugfs shows (prism_debugfs.c). It is never taken with
 * interrupts disabled and never nests with another lock of prism's.
 * Readers outside it (has_work, limit_depth in prism_hold.c, the
 * completion hooks) only look at list heads, atomic counters, fields
 * marked READ_ONCE/WRITE_ONCE and the tunables, which are an RCU-published
 * snapshot: a store builds a new copy and swaps the pointer, so a
 * lockless reader always sees one whole, valid set. The completion hooks
 * (completed_request(), finish_request()), which may run in interrupt
 * context, never take the lock: they write a tier's completion time
 * (done_ns, WRITE_ONCE; dispatch may also move it forward while a flush
 * runs) and add device times to atomic accumulators that dispatch folds
 * into the depth controller under the lock. The timers (prism_hold.c)
 * unpark the queue (see prism_park()) and run it.
 *
 * Books: a request that prism inserted is counted once in "inserted"
 * and once where it finishes: in "completed" if prism dispatched it (by
 * completed_request(), which the core runs right before finish_request(),
 * or by finish_request() should it be freed without completing), in
 * "merged_away" if it was merged into another first (by finish_request(),
 * which the core runs for every prepared request it frees). That holds
 * whatever path the request takes (a multi-range discard merged at insert
 * is freed without requests_merged(), a driver requeue comes back through
 * insert), so inserted == completed + merged_away whenever the queue is
 * idle. In flight is "started" (dispatched, less requeued, under the
 * lock) minus "completed": a completion costs one atomic, as in
 * mq-deadline, and dispatch none.
 */
#include <trace/events/block.h>

#include "prism.h"

const char *const prism_tier_name[PRISM_NR_TIERS] = {
	"high", "normal", "low",
};

const char *const prism_fifo_name[PRISM_NR_FIFOS] = {
	"read", "write", "sync_write",
};

/*
 * Requests joined or left the queue: count them for has_work(), and what
 * waits is no longer only what dispatch held back (see nr_parked).
 */
static inline void prism_queued_add(struct prism_data *pd, int delta)
{
	lockdep_assert_held(&pd->lock);
	WRITE_ONCE(pd->nr_queued, pd->nr_queued + delta);
	prism_unpark(pd);
}

/* Whether a tier below @tier has requests in flight. */
static bool prism_lower_inflight(struct prism_data *pd, enum prism_tier tier)
{
	int t;

	for (t = tier + 1; t < PRISM_NR_TIERS; t++)
		if (prism_inflight(&pd->tier[t]))
			return true;
	return false;
}

/* Whether a tier below @tier owns requests: whether @tier has any to guard. */
static bool prism_lower_owned(struct prism_data *pd, enum prism_tier tier)
{
	/* Unrolled: this runs on every insert and dispatch. */
	if (tier == PRISM_HIGH && prism_owned(&pd->tier[PRISM_NORMAL]))
		return true;
	return tier != PRISM_LOW && prism_owned(&pd->tier[PRISM_LOW]);
}

/*
 * Take @rq out of every structure at once: FIFO or dispatch list, sort
 * tree, merge hash and the queue's last_merge hint; a flow left with
 * nothing queued leaves its tier's fair queue. Safe on a request that was
 * never queued (a merge victim fresh from insert).
 */
static __always_inline void __prism_remove_request(struct prism_data *pd,
					struct request_queue *q,
					struct request *rq, unsigned long st,
					struct prism_tier_queue *tq,
					struct prism_flow *fl)
{
	enum prism_dir dir = prism_rq_dir(rq);

	lockdep_assert_held(&pd->lock);

	list_del_init(&rq->queuelist);
	if (st & PRISM_RQ_SORTED)
		elv_rb_del(&fl->sort[dir], rq);
	elv_rqhash_del(q, rq);		/* if RQF_HASHED */
	if (q->last_merge == rq)
		q->last_merge = NULL;

	if (st & PRISM_RQ_QUEUED) {
		if (st & PRISM_RQ_DIRECT) {
			pd->nr_direct--;
		} else if (st & PRISM_RQ_AT_HEAD) {
			tq->queued_head--;
		} else {
			int fifo = prism_rq_fifo(rq);

			tq->queued[fifo]--;
			WRITE_ONCE(fl->queued[fifo], fl->queued[fifo] - 1);
			if (!prism_flow_queued(fl))
				prism_flow_deactivate(pd, fl);
		}
		prism_queued_add(pd, -1);
	}
	prism_rq_set_state(rq, st & ~(PRISM_RQ_QUEUED | PRISM_RQ_AT_HEAD |
				      PRISM_RQ_SORTED | PRISM_RQ_DIRECT));
}

static inline void prism_remove_request(struct prism_data *pd,
					struct request_queue *q,
					struct request *rq)
{
	unsigned long st = prism_rq_state(rq);

	__prism_remove_request(pd, q, rq, st,
			       &pd->tier[prism_rq_tier_of_state(st)],
			       prism_rq_flow(pd, st));
}

/*
 * A request of @fl arrives (before it is counted) while flows are idled
 * for: whether the flow returns to its place in the fair queue, and, if
 * it owned nothing, its think time since its last completion.
 */
static void prism_flow_arrival(struct prism_data *pd, struct prism_flow *fl)
{
	u64 owned = prism_flow_owned(fl), now = ktime_get_ns();
	u32 queued = prism_flow_queued(fl);

	fl->think.last_done = READ_ONCE(fl->done_ns);
	fl->returning = prism_flow_returning(&fl->think,
					     owned > queued ? owned - queued : 0,
					     now);
	if (!owned)
		prism_think_sample(&fl->think, now);
}

/*
 * A sync request of @fl arrives while the flow has nothing queued: a flow
 * that is new, or back after PRISM_RAISE_IDLE_MS without a request,
 * starts, and is raised (prism_wf2q.h) unless it starts in a burst or
 * idling is off: a raised flow that issues one request at a time keeps
 * its weight only through the idle window, so slice_idle 0 means no
 * raising either. As in bfq, only sync I/O starts a raise; the raised
 * weight takes effect as the flow becomes backlogged. A burst that grows
 * large ends the raise of the flows that started it.
 */
static noinline void prism_flow_start(struct prism_data *pd,
				      const struct prism_tunables *t,
				      struct prism_flow *fl, unsigned long now)
{
	int i;

	pd->flow_starts++;
	fl->starting = true;
	switch (prism_burst_start(&pd->burst, now, HZ, prism_flow_slot(pd, fl))) {
	case 1:
		if (t->slice_idle) {
			prism_raise_begin(&fl->raise, now, HZ);
			pd->flows_raised++;
		}
		break;
	case -1:
		for (i = 0; i < PRISM_BURST_MIN - 1; i++)
			prism_flow_unraise(pd, &pd->flows[pd->burst.member[i]]);
		break;
	}
}

/*
 * First entry of a request into prism: classify it, find its cgroup's
 * group (if its bio is a cgroup's other than the root: see
 * prism_tier_in_cgroup() for the tier there) and its flow, feed the
 * flow's stream and record its thread's tier and group for
 * limit_depth(). The flow is the submitting process: prepare_request()
 * ran in the submitting thread and kept its pid; insert normally runs
 * there too (a plug is flushed by its owner), and then the process is
 * current's thread group; otherwise the thread counts as a process of its
 * own.
 *
 * A request the core never prepared (on 6.1 a FUA or preflush write that
 * bypassed the elevator and came back through a driver requeue) has stale
 * elv.priv[]: it gets a fresh state, the tier's shared flow but none of
 * its books, and is not counted as owned, since the core will not call
 * finish_request() for it; its books are foreign (inserts) against its
 * share of dispatched.
 */
static unsigned long prism_first_insert(struct prism_data *pd,
					struct request *rq)
{
	const struct prism_tunables *t = prism_tun(pd);
	unsigned short ioprio = req_get_ioprio(rq);
	enum prism_tier tier = prism_tier_of(t, ioprio, rq->cmd_flags);
	struct prism_tier_queue *tq;
	unsigned long st;
	u32 pid = (u32)(unsigned long)rq->elv.priv[1];
	struct prism_group *g = NULL;
	struct prism_cgroup_info cg;
	struct prism_flow *fl;
	unsigned long now_j, last;
	u64 owned;

	if (!prism_rq_prepared(rq)) {
		tq = &pd->tier[tier];
		tq->foreign++;
		st = (unsigned long)tier << PRISM_RQ_TIER_SHIFT;
		st |= (unsigned long)(PRISM_NR_FLOWS + tier) <<
		      PRISM_RQ_FLOW_SHIFT;
		return st | PRISM_RQ_SEEN | PRISM_RQ_FOREIGN;
	}
	if (prism_cgroup_of(rq->bio, rq->q, &cg)) {
		tier = prism_tier_in_cgroup(tier, IOPRIO_PRIO_CLASS(ioprio));
		g = prism_group_get(pd, cg.id, tier, cg.weight);
	}
	tq = &pd->tier[tier];
	st = (unsigned long)tier << PRISM_RQ_TIER_SHIFT;

	if (pid) {
		u32 *recent = &pd->recent[prism_recent_slot(pid)];
		u32 key = prism_recent_key(pid, tier, prism_group_nr(g));

		/* Written only on a change: the line stays clean for readers. */
		if (*recent != key)
			WRITE_ONCE(*recent, key);
		fl = prism_flow_get(pd, current->pid == pid ? current->tgid :
					pid, tier, g);
	} else {
		fl = &pd->flows[PRISM_NR_FLOWS + tier];
	}
	st |= (unsigned long)prism_flow_slot(pd, fl) << PRISM_RQ_FLOW_SHIFT;
	/*
	 * Sector order and idling for flows ask whether it is sequential
	 * (a passthrough request has no sector).
	 */
	if ((pd->sorted || pd->flow_window) && !prism_rq_passthrough(rq) &&
	    prism_stream_update(&fl->stream, blk_rq_pos(rq),
				blk_rq_sectors(rq), t->seq_gap))
		st |= PRISM_RQ_SEQ;
	if (fl->rt != (IOPRIO_PRIO_CLASS(ioprio) == IOPRIO_CLASS_RT))
		WRITE_ONCE(fl->rt, !fl->rt);
	/* The cheap test inline, the start itself out of line (once a flow). */
	now_j = jiffies;
	if (unlikely(!fl->inserted ||
		     time_after_eq(now_j, fl->last_used +
				   msecs_to_jiffies(PRISM_RAISE_IDLE_MS))) &&
	    fl->id && !fl->fq.backlogged && op_is_sync(rq->cmd_flags))
		prism_flow_start(pd, t, fl, now_j);
	last = fl->last_used;
	fl->last_used = now_j;
	/* Decided afresh at every first insert, used at its activation. */
	fl->returning = false;
	if (pd->flow_window)
		prism_flow_arrival(pd, fl);
	if (!fl->fq.backlogged &&
	    prism_flow_rested(fl->returning, prism_flow_owned(fl), last, now_j,
			      HZ))
		prism_fq_rest(prism_flow_fq(pd, fl), &fl->fq);
	WRITE_ONCE(fl->inserted, fl->inserted + 1);

	/*
	 * The tier owned nothing: this request is the next link of its chain,
	 * and the time since the last completion its think time. Measured
	 * while a lower tier owns requests, when completions are timed (see
	 * prism_want_time()) and the think time decides anything.
	 */
	owned = prism_owned(tq);
	if (tier != PRISM_LOW) {
		u64 now = 0;

		if (!owned && prism_lower_owned(pd, tier)) {
			now = ktime_get_ns();
			tq->think.last_done = READ_ONCE(tq->done_ns);
			prism_think_sample(&tq->think, now);
		}
		prism_chain_link(pd, &now);
	}
	WRITE_ONCE(tq->inserted, tq->inserted + 1);
	WRITE_ONCE(pd->owned_in, pd->owned_in + 1);
	if (++owned > tq->max_owned)
		tq->max_owned = owned;
	return st | PRISM_RQ_SEEN;
}

/*
 * Whether a request of @tier, first inserted, may take the direct lane
 * (prism_lane_allows(), which decides; the cheap tests are made first,
 * on values read once, so that the policy's repeat of them folds away).
 * What prism owns is the total, this request included: the tiers above
 * own nothing when it matters (nothing of theirs is queued, since the
 * lane holds all that is, and nothing in flight: prism_higher_quiet()),
 * save requests merged away and not yet freed, which only err towards
 * closing the lane.
 */
static bool prism_lane_may(struct prism_data *pd, struct request_queue *q,
			   int tier)
{
	bool lane_off = pd->lane_off;
	u32 nr_queued = pd->nr_queued, nr_direct = pd->nr_direct;
	int direct_tier = pd->direct_tier;

	if (lane_off || nr_queued != nr_direct ||
	    (nr_direct && direct_tier != tier) || pd->idle_since)
		return false;
	return prism_lane_allows(lane_off, nr_queued, nr_direct, direct_tier,
				 tier, prism_higher_quiet(pd, prism_tun(pd), q,
							  tier),
				 prism_owned_total(pd), pd->device_depth);
}

/*
 * Whether requests of @tier are kept to bulk_merge by merging: on flash,
 * while a tier above it is active. Under the lock.
 */
static inline bool prism_merge_capped(struct prism_data *pd,
				      struct request_queue *q,
				      int tier)
{
	return prism_tun(pd)->bulk_merge && tier != PRISM_HIGH &&
	       blk_queue_nonrot(q) && prism_higher_active(pd, tier, jiffies);
}

static void prism_insert_request(struct prism_data *pd, struct request_queue *q,
				 struct request *rq, bool at_head,
				 struct list_head *free)
{
	unsigned long st = prism_rq_state(rq);
	struct prism_tier_queue *tq;
	struct prism_flow *fl;
	bool requeue = false;
	int tier;

	lockdep_assert_held(&pd->lock);

	if (!prism_rq_prepared(rq))
		st = 0;		/* stale: see prism_first_insert() */
	if (st & PRISM_RQ_SEEN) {
		/* A requeue: it keeps its tier. */
		requeue = true;
		tier = prism_rq_tier_of_state(st);
		tq = &pd->tier[tier];
		tq->requeued++;
		if (st & PRISM_RQ_DISPATCHED) {
			WRITE_ONCE(tq->started, tq->started - 1);
			st &= ~PRISM_RQ_DISPATCHED;
		}
		st &= ~(PRISM_RQ_QUEUED | PRISM_RQ_AT_HEAD | PRISM_RQ_SORTED);
	} else {
		st = prism_first_insert(pd, rq);
		tier = prism_rq_tier_of_state(st);
		tq = &pd->tier[tier];
		/*
		 * A foreign request only reaches insert through a driver
		 * requeue (6.1 routes it past the elevator otherwise): treat it
		 * as one.
		 */
		requeue = st & PRISM_RQ_FOREIGN;
	}
	if (requeue) {
		/*
		 * The driver may have used the tree link (a union with
		 * special_vec), so it is reset, and a requeue is never merged
		 * or hashed: the driver may have prepared it already.
		 */
		RB_CLEAR_NODE(&rq->rb_node);
	}
	prism_rq_set_state(rq, st);

	/*
	 * On a merge the core frees @rq, and finish_request() completes it
	 * in the books; requests_merged() is not called for every kind of
	 * merge (not for discards), so nothing here relies on it. A capped
	 * tier skips the insert merge whole (the core does not ask first);
	 * the tier tested is @rq's, not that of the request it would join,
	 * which the core finds by sector and equal ioprio only: a NORMAL
	 * sync write can still join a background write queued in LOW.
	 */
	if (!requeue && !prism_merge_capped(pd, q, tier) &&
	    blk_mq_sched_try_insert_merge(q, rq, free))
		return;

	trace_block_rq_insert(rq);

	rq->fifo_time = jiffies;
	if (unlikely(prism_rq_passthrough(rq))) {
		/* 6.1's core meant it for the dispatch list: never held. */
		tq->passthrough++;
		at_head = true;
	}
	if (at_head || requeue) {
		list_add(&rq->queuelist, &pd->dispatch);
		tq->queued_head++;
		prism_queued_add(pd, 1);
		st |= PRISM_RQ_QUEUED | PRISM_RQ_AT_HEAD;
		prism_rq_set_state(rq, st);
		return;
	}
	st |= PRISM_RQ_QUEUED;
	if (prism_rq_fifo_class(rq) == PRISM_SYNC_WRITE)
		st |= PRISM_RQ_SYNC_FIFO;
	else
		st &= ~PRISM_RQ_SYNC_FIFO;
	if (prism_lane_may(pd, q, tier)) {
		/* Weights still noted: see prism_note_weight(). */
		fl = prism_rq_flow(pd, st);
		prism_note_flow_weight(pd, fl, prism_rq_weight(rq));
		list_add_tail(&rq->queuelist, &pd->direct);
		pd->nr_direct++;
		pd->direct_tier = tier;
		prism_rq_set_state(rq, st | PRISM_RQ_DIRECT);
	} else {
		if (pd->nr_direct)
			prism_lane_spill(pd);
		prism_rq_set_state(rq, st);
		prism_flow_queue(pd, rq);
	}
	prism_queued_add(pd, 1);
	if (rq_mergeable(rq)) {
		/*
		 * Discards stay out of the hash: attempt_merge() frees a
		 * discard merged into another without requests_merged(), so a
		 * queued discard found by the hash as the middle of a chain
		 * of insert merges would be freed while still on a FIFO.
		 * Nor do they become last_merge: should their queue lose
		 * multi-range discard meanwhile, the core would back-merge
		 * into one and hash it itself.
		 */
		if (!blk_discard_mergable(rq)) {
			elv_rqhash_add(q, rq);
			if (!q->last_merge)
				q->last_merge = rq;
		}
	}
}

static void prism_insert_requests(struct blk_mq_hw_ctx *hctx,
				  struct list_head *list, prism_insert_t flags)
{
	struct request_queue *q = hctx->queue;
	struct prism_data *pd = hctx->sched_data;
	bool at_head = prism_insert_at_head(flags);
	LIST_HEAD(free);

	/*
	 * The order is re-read by dispatch, not here: a request queued under
	 * the old one is sorted (or left to leave its tree) there, before
	 * any choice is made.
	 */
	spin_lock(&pd->lock);
	while (!list_empty(list)) {
		struct request *rq;

		rq = list_first_entry(list, struct request, queuelist);
		list_del_init(&rq->queuelist);
		prism_insert_request(pd, q, rq, at_head, &free);
	}
	spin_unlock(&pd->lock);

	/* Merged-away requests are freed outside the lock, as in 6.12. */
	blk_mq_free_requests(&free);
}

/*
 * Whether to time a HIGH or NORMAL request from dispatch to completion
 * (its completion time feeds the think time, its device time the depth
 * controller): always while a lower tier owns requests, since then both
 * decide what is held back; otherwise only until the controller has its
 * first samples and then one request in 64, to keep them current. A
 * device without contention pays no clock reads on most requests.
 */
static bool prism_want_time(struct prism_data *pd, struct prism_tier_queue *tq,
			    enum prism_tier tier)
{
	return prism_lower_owned(pd, tier) ||
	       pd->depth.solo_samples < PRISM_THINK_SAMPLES ||
	       !(tq->dispatched & 63);
}

/*
 * Time one dispatch in PRISM_LEARN_EVERY for the learner: keep its size
 * and whether it continues where the device's last request ended. That is
 * the device's own order, not the flow's: the learner describes the
 * device.
 */
static unsigned long prism_learn_stamp(struct prism_data *pd,
				       struct request *rq, unsigned long st)
{
#if PRISM_CAN_LEARN
	const struct prism_tunables *tun = prism_tun(pd);
	unsigned long kib;
	u32 bytes;

	if (!tun->cost_auto || ++pd->learn_tick % PRISM_LEARN_EVERY)
		return st;
	bytes = prism_rq_data_bytes(rq);
	if (!bytes)
		return st;
	kib = min_t(unsigned long, DIV_ROUND_UP(bytes, 1024), PRISM_RQ_KIB_MAX);
	st |= PRISM_RQ_LEARN | kib << PRISM_RQ_KIB_SHIFT;
	if (prism_cost_seq(pd->head_pos, blk_rq_pos(rq), tun->seq_gap))
		st |= PRISM_RQ_LEARN_SEQ;
#endif
	return st;
}

/*
 * @rq leaves prism for the device, with the lock held: out of its lists
 * and its flow, into the books, stamped with its dispatch time (@now, or
 * 0 to read it here if needed).
 */
static __always_inline void prism_dispatch_out(struct prism_data *pd,
					       struct request_queue *q,
					       struct request *rq, u64 now)
{
	struct prism_tier_queue *tq;
	struct prism_flow *fl;
	enum prism_tier tier;
	unsigned long st, tick;

	/* The state decoded once (each decoding checks it). */
	st = prism_rq_state(rq);
	tier = prism_rq_tier_of_state(st);
	tq = &pd->tier[tier];
	fl = prism_rq_flow(pd, st);
	__prism_remove_request(pd, q, rq, st, tq, fl);
	tq->dispatched++;
	if (st & PRISM_RQ_DIRECT) {
		/*
		 * By the lane: the flow's statistics, not its virtual time.
		 * A start served here was never activated: the flow's next
		 * activation is no start (prism_flow_activate()).
		 */
		tq->direct++;
		prism_flow_served(pd, prism_tun(pd), fl, rq);
		fl->starting = false;
	}
	st = prism_rq_state(rq);	/* as the removal left it */
	if (st & PRISM_RQ_FOREIGN) {
		/*
		 * Never prepared, so never finished: it leaves the books here.
		 * Should the driver requeue it, it comes back as a new foreign
		 * insert, since its state cannot be told from a stale one.
		 */
		prism_rq_set_state(rq, 0);
	} else {
		WRITE_ONCE(tq->started, tq->started + 1);
		if (tier != PRISM_LOW) {
			/* One store per jiffy: for prism_tier_stalled(). */
			tick = jiffies;
			if (tq->last_dispatch != tick)
				tq->last_dispatch = tick;
		}
		st |= PRISM_RQ_DISPATCHED;
		st &= ~(PRISM_RQ_SOLO | PRISM_RQ_IDLE_DEV | PRISM_RQ_TIMED |
			PRISM_RQ_LEARN_MASK);
		if (tier != PRISM_LOW && prism_want_time(pd, tq, tier)) {
			/* Device time feeds the depth controller. */
			st |= PRISM_RQ_TIMED;
			if (!prism_lower_inflight(pd, tier))
				st |= PRISM_RQ_SOLO;
		} else if (tier == PRISM_LOW &&
			   !prism_inflight(&pd->tier[PRISM_HIGH]) &&
			   !prism_inflight(&pd->tier[PRISM_NORMAL]) &&
			   prism_inflight(tq) == 1 &&
			   (rq_data_dir(rq) == READ || !prism_write_back(q))) {
			/*
			 * Alone in the device: its time is its service. Not
			 * a write a volatile cache takes in, which completes
			 * in microseconds and costs its media time later, to
			 * the flush that ends a higher tier's chain: as the
			 * window's base it would close every window at once.
			 */
			st |= PRISM_RQ_IDLE_DEV;
		}
		st = prism_learn_stamp(pd, rq, st);
		/*
		 * The dispatch time: requests timed for the in-flight control
		 * or the learner read the clock; for the histograms alone the
		 * core's statistics clock does (one reading per plug); 0 where
		 * nothing reads it, so that a completion can tell.
		 */
		if (!now && (st & (PRISM_RQ_TIMED | PRISM_RQ_IDLE_DEV |
				   PRISM_RQ_LEARN)))
			now = ktime_get_ns();
		if (pd->latency_hist) {
			if (!now)
				now = prism_stat_clock();
			if (rq->start_time_ns && now > rq->start_time_ns)
				pd->hist_wait[tier][prism_rq_dir(rq)]
					[prism_hist_bucket(now - rq->start_time_ns)]++;
			else
				pd->hist_wait[tier][prism_rq_dir(rq)][0]++;
		}
		rq->elv.priv[1] = (void *)(unsigned long)now;
		prism_rq_set_state(rq, st);
	}
	if (!prism_rq_passthrough(rq)) {
		pd->head_pos = blk_rq_pos(rq) + blk_rq_sectors(rq);
		fl->sweep_pos[prism_rq_dir(rq)] = pd->head_pos;
	}
	rq->rq_flags |= RQF_STARTED;
}

static struct request *prism_dispatch_request(struct blk_mq_hw_ctx *hctx)
{
	struct prism_data *pd = hctx->sched_data;
	struct request *rq;
	unsigned long tick;
	u64 now = 0;

	spin_lock(&pd->lock);
	rq = list_first_entry_or_null(&pd->dispatch, struct request, queuelist);
	if (!rq) {
		/*
		 * Nothing queued: another CPU took what has_work() saw. The
		 * state that moves with time waits for a dispatch with work,
		 * which brings it up to date before it chooses.
		 */
		if (!pd->nr_queued)
			goto unlock;
		/*
		 * Queued while nothing else was: nothing to choose, once the
		 * state that moves with time is up to date for this jiffy.
		 */
		tick = jiffies;
		rq = list_first_entry_or_null(&pd->direct, struct request,
					      queuelist);
		if (!rq || pd->lane_checked != tick) {
			rq = prism_dispatch_choose(pd, hctx);
			if (!rq) {
				/* Requests queued (above), none chosen. */
				pd->empty_dispatches++;
				goto unlock;
			}
			now = pd->chosen_now;
		}
	}
	prism_dispatch_out(pd, hctx->queue, rq, now);
unlock:
	spin_unlock(&pd->lock);
	return rq;
}

/*
 * Through q->elevator, as mq-deadline, not hctx->sched_data: a timer that
 * runs the queue between exit_hctx() and exit_sched() still finds it.
 */
static bool prism_has_work(struct blk_mq_hw_ctx *hctx)
{
	struct prism_data *pd = hctx->queue->elevator->elevator_data;
	u32 queued = READ_ONCE(pd->nr_queued);

	/* nr_parked is 0 whenever nr_queued is (prism_queued_add()). */
	if (likely(queued != READ_ONCE(pd->nr_parked)))
		return true;
	if (!queued)
		return false;
	/* Parked: work again once a request completed, or the queue drains. */
	return (u32)atomic64_read(&pd->owned_out) != READ_ONCE(pd->parked_out) ||
	       prism_draining(hctx->queue);
}

/* See prism_compat.h: per hardware queue or per queue, as the kernel calls it. */
static void prism_depth_updated(prism_depth_updated_t arg)
{
	prism_min_shallow_depth(arg);
}

/*
 * sched_data points at the queue's prism_data: dispatch and insert, which
 * run only between init_hctx() and exit_hctx() (the core quiesces and
 * freezes the queue around both), reach it in one load instead of three.
 * has_work() does not rely on it (see there). The core clears it after
 * exit_hctx().
 */
static int prism_init_hctx(struct blk_mq_hw_ctx *hctx, unsigned int idx)
{
	hctx->sched_data = hctx->queue->elevator->elevator_data;
	prism_hctx_min_shallow_depth(hctx);
	return 0;
}

static void prism_exit_hctx(struct blk_mq_hw_ctx *hctx, unsigned int idx)
{
	hctx->sched_data = NULL;
}

static void prism_prepare_request(struct request *rq)
{
	rq->elv.priv[0] = NULL;
	rq->elv.priv[1] = (void *)(unsigned long)current->pid;
}

/*
 * The books of a request prism owned, finished at @done (ns, 0: not read).
 * Inline in both callers below; the timed part goes out of line last, so
 * that the common path needs no register saved across a call.
 */
static __always_inline void __prism_finish(struct prism_data *pd,
					   struct request *rq, unsigned long st,
					   u64 done)
{
	struct prism_tier_queue *tq = &pd->tier[prism_rq_tier_of_state(st)];
	unsigned long now = jiffies;
	bool learning;

	/*
	 * The flow's books: once they balance its slot may be given away,
	 * and nothing below touches the flow.
	 */
	atomic64_inc(&prism_rq_flow(pd, st)->finished);
	/* Finished twice (6.1 flush paths) must not count twice. */
	prism_rq_set_state(rq, 0);
	/*
	 * The tier's books before owned_out, which unparks the queue: a
	 * dispatch that saw owned_out move (view_out) must see the request
	 * out of flight, or it would park on a hold the completion ended.
	 */
	if (!(st & PRISM_RQ_DISPATCHED)) {
		atomic64_inc(&tq->merged_away);
		smp_mb__before_atomic();	/* the books, then owned_out */
		atomic64_inc(&pd->owned_out);
		return;
	}
	atomic64_inc(&tq->completed);
	smp_mb__before_atomic();	/* the books, then owned_out */
	atomic64_inc(&pd->owned_out);
	/* One store per jiffy at most: this line is shared by completions. */
	if (READ_ONCE(tq->last_done) != now)
		WRITE_ONCE(tq->last_done, now);
	if (tq != &pd->tier[PRISM_HIGH] &&
	    READ_ONCE(pd->depth.duty) < PRISM_DUTY_FULL &&
	    !prism_op_background(rq->cmd_flags))
		WRITE_ONCE(tq->paced_done_ns, done ?: ktime_get_ns());
	learning = READ_ONCE(pd->learning);
	if (learning || (st & (PRISM_RQ_TIMED | PRISM_RQ_IDLE_DEV)))
		prism_finish_timed(pd, rq, tq, st, done, learning);
}

/*
 * A dispatched request while flows are idled for (its time is read), or
 * a state that does not decode (the decoders warn and make do).
 */
static noinline void prism_finish_slow(struct prism_data *pd,
				       struct request *rq, unsigned long st)
{
	u64 done;

	if (!(st & PRISM_RQ_DISPATCHED) || !READ_ONCE(pd->flow_window)) {
		__prism_finish(pd, rq, st, 0);
		return;
	}
	done = ktime_get_ns();

	/* Its flow's next request is judged from here. */
	WRITE_ONCE(prism_rq_flow(pd, st)->done_ns, done);
	/*
	 * Before the books balance: a slot given away (and reset) once they
	 * do must not get this store after its reset.
	 */
	smp_mb__before_atomic();
	__prism_finish(pd, rq, st, done);
}

/*
 * The core calls this for every prepared request it frees: completed by
 * the driver (finished already: see prism_completed_request(), state 0),
 * merged away (with or without requests_merged()), or prepared but never
 * inserted (6.1 passthrough sent straight to dispatch, a dm clone; state
 * 0, not ours). 6.1 passthrough from a plug is inserted and finished here
 * like any request (prism_rq_passthrough()).
 */
static void prism_finish_request(struct request *rq)
{
	unsigned long st = prism_rq_state(rq);
	struct prism_data *pd;

	/* Tested first: most requests come here with their books kept. */
	if (!(st & PRISM_RQ_SEEN) || (st & PRISM_RQ_FOREIGN))
		return;
	pd = rq->q->elevator->elevator_data;
	if (unlikely(!prism_state_valid(st)) ||
	    ((st & PRISM_RQ_DISPATCHED) && READ_ONCE(pd->flow_window)))
		prism_finish_slow(pd, rq, st);
	else
		__prism_finish(pd, rq, st, 0);
}

/*
 * A request the driver completed, at @now by the core's clock: its device
 * time, from dispatch, into the histogram, and its books. Both kernels
 * call this in __blk_mq_end_request() right before finish_request(),
 * for every request with scheduler data (the batched completion path
 * takes none), so the books are kept here, in one call, and the state
 * cleared leaves finish_request() nothing to do; finish_request() keeps
 * them for requests merged away and any freed without completing. On
 * 6.1 the core calls this for requests it routed past the elevator too,
 * whose elv.priv[] are stale: only prepared ones are looked at; and
 * twice for a flush's data request, the second time not prepared any
 * more (finish_request() cleared RQF_ELVPRIV).
 */
static void prism_completed_request(struct request *rq, u64 now)
{
	struct prism_data *pd = rq->q->elevator->elevator_data;
	unsigned long st;
	long device;

	if (!prism_rq_prepared(rq))
		return;
	st = prism_rq_state(rq);
	/* A state that does not decode is left to finish_request() to say. */
	if (!(st & PRISM_RQ_DISPATCHED) || (st & PRISM_RQ_FOREIGN) ||
	    !prism_state_valid(st))
		return;
	/* Not stamped: dispatched while the histograms were off. */
	if (READ_ONCE(pd->latency_hist) && rq->elv.priv[1]) {
		/* In unsigned long: where that is 32 bits, good for 2 s. */
		device = (long)((unsigned long)now -
				(unsigned long)rq->elv.priv[1]);
		atomic64_inc(&pd->hist_device[prism_rq_tier_of_state(st)]
					     [prism_rq_dir(rq)]
					     [prism_hist_bucket(device > 0 ?
								device : 0)]);
	}
	if (READ_ONCE(pd->flow_window))
		prism_finish_slow(pd, rq, st);
	else
		__prism_finish(pd, rq, st, 0);
}

/*
 * The flow a bio joins if it becomes a request: its submitter's (bio
 * merges run in the submitting thread) in its cgroup's group, NULL if it
 * has none yet. Under the lock.
 */
static struct prism_flow *prism_bio_flow(struct prism_data *pd,
					 struct bio *bio)
{
	enum prism_tier tier = prism_tier_of(prism_tun(pd), bio->bi_ioprio,
					     bio->bi_opf);
	struct prism_group *g = NULL;
	struct prism_cgroup_info cg;

	if (prism_cgroup_of(bio, pd->q, &cg)) {
		tier = prism_tier_in_cgroup(tier,
					    IOPRIO_PRIO_CLASS(bio->bi_ioprio));
		g = prism_group_find(pd, cg.id, tier);
		if (!g)
			return NULL;
	}
	return prism_flow_find(pd, prism_flow_key(current->tgid, tier,
						  prism_group_nr(g)));
}

/* The submitter's flow's sort tree, for a front merge. */
static noinline int prism_front_merge(struct prism_data *pd,
				      struct request **rq, struct bio *bio)
{
	sector_t sector = bio_end_sector(bio);
	struct prism_flow *fl;
	struct request *__rq;

	fl = prism_bio_flow(pd, bio);
	if (!fl)
		return ELEVATOR_NO_MERGE;
	__rq = elv_rb_find(&fl->sort[bio_data_dir(bio)], sector);
	if (__rq && elv_bio_merge_ok(__rq, bio)) {
		*rq = __rq;
		if (blk_discard_mergable(__rq))
			return ELEVATOR_DISCARD_MERGE;
		return ELEVATOR_FRONT_MERGE;
	}
	return ELEVATOR_NO_MERGE;
}

static int prism_request_merge(struct request_queue *q, struct request **rq,
			       struct bio *bio)
{
	struct prism_data *pd = q->elevator->elevator_data;

	/*
	 * Front merges need the sort tree, kept only in sector order (under
	 * the lock, as this runs): the submitter's flow's, where its
	 * stream's requests are. The test inline, the search out of line.
	 */
	if (!pd->sorted)
		return ELEVATOR_NO_MERGE;
	return prism_front_merge(pd, rq, bio);
}

static void prism_request_merged(struct request_queue *q, struct request *req,
				 enum elv_merge type)
{
	struct prism_data *pd = q->elevator->elevator_data;
	unsigned long st = prism_rq_state(req);

	lockdep_assert_held(&pd->lock);

	/* A front merge moved the start sector: re-sort. */
	if (type == ELEVATOR_FRONT_MERGE && (st & PRISM_RQ_SORTED)) {
		struct rb_root *root =
			&prism_rq_flow(pd, st)->sort[prism_rq_dir(req)];

		elv_rb_del(root, req);
		elv_rb_add(root, req);
	}
}

static void prism_requests_merged(struct request_queue *q, struct request *req,
				  struct request *next)
{
	struct prism_data *pd = q->elevator->elevator_data;
	unsigned long rst = prism_rq_state(req), nst = prism_rq_state(next);

	lockdep_assert_held(&pd->lock);

	pd->tier[prism_rq_tier(next)].merged++;

	/*
	 * The survivor inherits the earlier arrival and FIFO place, but only
	 * within its own flow's FIFO: the two may be different processes'
	 * (the hash finds any queued request), or in different tiers when
	 * be_tiers changed between their inserts (the core
	 * only checks that their ioprio is equal), and a request on another
	 * flow's list would leave both flows' and tiers' counts wrong; nor
	 * across the sync and background write lists (the core merges a sync
	 * write with a background one).
	 */
	if ((rst & nst & PRISM_RQ_QUEUED) &&
	    !((rst | nst) & PRISM_RQ_AT_HEAD) &&
	    !((rst ^ nst) & PRISM_RQ_DIRECT) &&
	    (rst & PRISM_RQ_FLOW_MASK) == (nst & PRISM_RQ_FLOW_MASK) &&
	    prism_rq_tier(req) == prism_rq_tier(next) &&
	    prism_rq_fifo(req) == prism_rq_fifo(next) &&
	    time_before((unsigned long)next->fifo_time,
			(unsigned long)req->fifo_time)) {
		list_move(&req->queuelist, &next->queuelist);
		req->fifo_time = next->fifo_time;
	}
	prism_remove_request(pd, q, next);
}

/*
 * A bio may grow a request past bulk_merge only while prism_merge_capped()
 * says no. Called under the lock (blk_mq_sched_try_merge() in
 * prism_bio_merge()); plug merges do not ask. Nor does the request merge
 * the core attempts after a bio merge (attempt_back_merge() and
 * attempt_front_merge() join the grown request with its neighbour in the
 * sort tree without asking the scheduler): in sector order, a bio that
 * bridges two queued requests can join them past the cap. The cap bounds
 * what merging adds, not every request's size.
 */
static bool prism_allow_merge(struct request_queue *q, struct request *rq,
			      struct bio *bio)
{
	struct prism_data *pd = q->elevator->elevator_data;
	u32 cap = prism_tun(pd)->bulk_merge;
	unsigned long st;

	/* The tunable first: off by default, and this runs for every merge. */
	if (!cap || blk_rq_bytes(rq) + bio->bi_iter.bi_size <= cap)
		return true;
	st = prism_rq_state(rq);
	if (!prism_rq_prepared(rq) || !(st & PRISM_RQ_SEEN) ||
	    (st & PRISM_RQ_FOREIGN) || !prism_state_valid(st))
		return true;
	return !prism_merge_capped(pd, q, prism_rq_tier_of_state(st));
}

static bool prism_bio_merge(struct request_queue *q, struct bio *bio,
			    unsigned int nr_segs)
{
	struct prism_data *pd = q->elevator->elevator_data;
	struct request *free = NULL;
	bool ret;

	spin_lock(&pd->lock);
	ret = blk_mq_sched_try_merge(q, bio, nr_segs, &free);
	if (ret && (pd->sorted || pd->flow_window)) {
		/*
		 * A stream that merges is sequential: feed its flow's detector
		 * as an insert would, or a heavily merging stream would look
		 * random (its requests arrive far apart).
		 */
		struct prism_flow *fl = prism_bio_flow(pd, bio);

		if (fl)
			prism_stream_update(&fl->stream,
					    bio->bi_iter.bi_sector,
					    bio_sectors(bio),
					    prism_tun(pd)->seq_gap);
	}
	spin_unlock(&pd->lock);

	if (free)
		blk_mq_free_request(free);
	return ret;
}

static int prism_init_sched(struct request_queue *q, prism_init_sched_t arg)
{
	struct elevator_queue *eq;
	struct prism_tun_rcu *tun;
	struct prism_group *groups;
	struct prism_flow *flows;
	struct prism_data *pd;
	int t, f;

	eq = prism_init_eq(q, arg);
	if (!eq)
		return -ENOMEM;

	pd = kzalloc_node(sizeof(*pd), GFP_KERNEL, q->node);
	tun = kzalloc_node(sizeof(*tun), GFP_KERNEL, q->node);
	/* About 20 KiB: kvzalloc, since it need not be contiguous. */
	flows = kvzalloc_node(sizeof(*flows) * PRISM_FLOW_SLOTS, GFP_KERNEL,
			      q->node);
	groups = kvzalloc_node(sizeof(*groups) * PRISM_NR_GROUPS, GFP_KERNEL,
			       q->node);
	if (!pd || !tun || !flows || !groups) {
		kfree(pd);
		kfree(tun);
		kvfree(flows);
		kvfree(groups);
		prism_init_eq_failed(eq);
		return -ENOMEM;
	}
	eq->elevator_data = pd;

	spin_lock_init(&pd->lock);
	INIT_LIST_HEAD(&pd->dispatch);
	INIT_LIST_HEAD(&pd->direct);
	for (t = 0; t < PRISM_NR_TIERS; t++) {
		INIT_LIST_HEAD(&pd->tier[t].active);
		INIT_LIST_HEAD(&pd->tier[t].groups);
		pd->tier[t].note.last = -1;
		atomic64_set(&pd->tier[t].completed, 0);
		atomic64_set(&pd->tier[t].merged_away, 0);
		pd->tier[t].last_done = jiffies - HZ;
	}
	atomic64_set(&pd->owned_out, 0);
	prism_tunables_init(&tun->t, HZ);
	RCU_INIT_POINTER(pd->tun, tun);
	pd->flow_frac = prism_flow_frac(tun->t.flow_depth);
	pd->writeback_low = tun->t.writeback_low;
	pd->flows = flows;
	pd->groups = groups;
	for (f = 0; f < PRISM_NR_FLOWS; f++)
		prism_flow_reset(pd, &flows[f], 0, 0, PRISM_NORMAL, NULL);
	for (t = 0; t < PRISM_NR_TIERS; t++)
		prism_flow_reset(pd, &flows[PRISM_NR_FLOWS + t], 0, 0, t, NULL);
	prism_batch_reset(&pd->batch);
	pd->idle_flow = -1;
	pd->rotational = !blk_queue_nonrot(q);
	pd->sorted = pd->rotational;
	spin_lock(&pd->lock);
	prism_model_update(pd);
	spin_unlock(&pd->lock);
	pd->q = q;
	pd->device_depth = prism_device_depth(q);
	prism_depth_init(&pd->depth, pd->device_depth);
	atomic64_set(&pd->lat.all, 0);
	atomic64_set(&pd->lat.solo, 0);
	atomic64_set(&pd->lat.bulk, 0);
	atomic64_set(&pd->window_runs, 0);
	prism_hrtimer_setup(&pd->wake_timer, prism_wake_timer);

	/* One queue for the whole device, as mq-deadline: priority is global. */
	blk_queue_flag_set(QUEUE_FLAG_SQ_SCHED, q);
	/*
	 * Writeback throttling counts a write from its submission to its
	 * completion, so the writes prism holds back (LOW's, below a higher
	 * tier's chain) fill its single limit for the disk, and the next
	 * write of every task waits in wbt before prism ever sees it: a
	 * HIGH fsync's data write waited 11.6 ms there behind held bulk
	 * writes (emulated HDD, wbt allowing one write in flight). bfq turns
	 * it off for the same reason; writing wbt_lat_usec (a value other
	 * than the one it holds) turns it on.
	 */
	prism_wbt_off(q, eq);

	q->elevator = eq;
	prism_async_depth_init(q);
	/*
	 * Last, with everything above in place: activation freezes the
	 * queue and gives each of its cgroups prism's data. It cannot fail
	 * the switch: without it the queue is scheduled per process.
	 */
	prism_cgroup_activate(q);
	return 0;
}

static void prism_exit_sched(struct elevator_queue *e)
{
	struct prism_data *pd = e->elevator_data;
	int t, f;

	/* First, while prism's data is whole; the queue is frozen. */
	prism_cgroup_deactivate(pd->q);
	/* The queue is frozen and quiesced: no dispatch re-arms it now. */
	hrtimer_cancel(&pd->wake_timer);
	prism_wbt_default(pd->q, e);
	spin_lock(&pd->lock);
	WARN_ON_ONCE(!list_empty(&pd->dispatch) || !list_empty(&pd->direct) ||
		     pd->nr_direct);
	for (f = 0; f < PRISM_FLOW_SLOTS; f++) {
		struct prism_flow *fl = &pd->flows[f];

		WARN_ON_ONCE(!list_empty(&fl->fifo[PRISM_READ]) ||
			     !list_empty(&fl->fifo[PRISM_WRITE]) ||
			     !list_empty(&fl->fifo[PRISM_SYNC_WRITE]));
		/* Its books balance too: every request it took has left. */
		WARN_ON_ONCE(fl->inserted != atomic64_read(&fl->finished));
	}
	for (t = 0; t < PRISM_NR_TIERS; t++) {
		struct prism_tier_queue *tq = &pd->tier[t];

		WARN_ON_ONCE(!list_empty(&tq->active) ||
			     !list_empty(&tq->groups));
		/* Each request that entered left exactly once. */
		WARN_ONCE(tq->inserted != atomic64_read(&tq->completed) +
			  atomic64_read(&tq->merged_away) ||
			  tq->started != atomic64_read(&tq->completed),
			  "prism: tier %s: inserted %llu completed %lld merged away %lld started %llu (requeued %llu dispatched %llu merged %llu)\n",
			  prism_tier_name[t], tq->inserted,
			  atomic64_read(&tq->completed),
			  atomic64_read(&tq->merged_away), tq->started,
			  tq->requeued, tq->dispatched, tq->merged);
	}
	WARN_ONCE(pd->owned_in != atomic64_read(&pd->owned_out),
		  "prism: owned in %llu out %lld\n", pd->owned_in,
		  atomic64_read(&pd->owned_out));
	spin_unlock(&pd->lock);
	/* The queue is frozen: no limit_depth() can be reading them. */
	kfree(rcu_dereference_protected(pd->tun, true));
	kvfree(pd->flows);
	kvfree(pd->groups);
	kfree(pd);
}

static struct elevator_type prism_sched = {
	.ops = {
		.depth_updated		= prism_depth_updated,
		.limit_depth		= prism_limit_depth,
		.insert_requests	= prism_insert_requests,
		.dispatch_request	= prism_dispatch_request,
		.prepare_request	= prism_prepare_request,
		.finish_request		= prism_finish_request,
		.completed_request	= prism_completed_request,
		.next_request		= elv_rb_latter_request,
		.former_request		= elv_rb_former_request,
		.bio_merge		= prism_bio_merge,
		.allow_merge		= prism_allow_merge,
		.request_merge		= prism_request_merge,
		.requests_merged	= prism_requests_merged,
		.request_merged		= prism_request_merged,
		.has_work		= prism_has_work,
		.init_sched		= prism_init_sched,
		.exit_sched		= prism_exit_sched,
		.init_hctx		= prism_init_hctx,
		.exit_hctx		= prism_exit_hctx,
	},
#ifdef CONFIG_BLK_DEBUG_FS
	.queue_debugfs_attrs = prism_queue_debugfs_attrs,
#endif
	.elevator_attrs = prism_attrs,
	.elevator_name = "prism",
	.elevator_owner = THIS_MODULE,
};
MODULE_ALIAS("prism-iosched");

/*
 * The blkcg policy is registered before the elevator, so that it is in
 * place for the first init_sched(), and unregistered after it, when no
 * queue is prism's. Its failure leaves prism per process (it says so).
 */
static int __init prism_init(void)
{
	int ret;

	prism_cgroup_register();
	ret = elv_register(&prism_sched);
	if (ret)
		prism_cgroup_unregister();
	return ret;
}

static void __exit prism_exit(void)
{
	elv_unregister(&prism_sched);
	prism_cgroup_unregister();
}

module_init(prism_init);
module_exit(prism_exit);

MODULE_AUTHOR("The prism developers");
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("prism: priority-aware blk-mq I/O scheduler");
MODULE_VERSION(PRISM_VERSION);
