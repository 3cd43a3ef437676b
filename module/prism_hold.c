// SPDX-License-Identifier: GPL-2.0
/*
 * prism's in-flight control: what keeps lower tiers out of the device
 * while a higher tier needs it, and what runs the queue again once that
 * ends; with it the tag limits and the timed completions.
 *
 * prism_choose_viewed() builds the full view that dispatch decides on:
 * each tier's lists, what it has in the device, whether its next request
 * is anticipated or its sync-write chain is under way, the flushes of
 * others in the device, the rate caps, pacing, the tiers that could not
 * get a tag. When prism_choose() holds, the queue is parked and run again
 * by a completion (the restart mark) or prism's one timer.
 * prism_park() and prism_wake_at() are inline in prism.h, since the
 * choice in prism_flow.c parks too, as are the tests the insert and
 * dispatch paths make on every request (prism_higher_quiet(),
 * prism_higher_active(), prism_chain_link()).
 *
 * The tag limits (limit_depth(): a tier's reserve and a flow's part of
 * the scheduler tags) are here, since a hold must know whether the tier
 * it protects could get a tag. Last come the timed completions: device
 * times summed for the depth controller (folded in at dispatch by
 * prism_fold_latency()) and the cost learner's points, folded into its
 * fit. Every decision is prism_policy.c's; the locking is described at
 * the top of prism_sched.c.
 */
#include "prism.h"

/*
 * The views: what each tier has queued and in the device, and whether
 * its next request is anticipated.
 */

/*
 * A request of a tier above LOW arrived (or a flush was seen in the
 * device): the next link of any sync-write chain whose last completion
 * has not been followed yet. The clock is read (into *@now, if not yet)
 * only when one is pending.
 */
noinline void prism_chain_sample_link(struct prism_data *pd,
				      struct prism_tier_queue *tq,
				      u64 done, u64 *now)
{
	if (!*now)
		*now = ktime_get_ns();
	tq->chain_sampled = done;
	tq->chain.last_done = done;
	prism_chain_sample(&tq->chain, *now,
			   prism_window(&pd->depth, prism_tun(pd),
					pd->rotational));
}

/*
 * @tq completed a request within its anticipation window (to the jiffy,
 * rounded up, so that the answer errs towards yes).
 */
noinline bool prism_recently_done(struct prism_data *pd,
				  const struct prism_tunables *tun,
				  struct request_queue *q,
				  struct prism_tier_queue *tq)
{
	unsigned long window = nsecs_to_jiffies(prism_window(&pd->depth, tun,
							     !blk_queue_nonrot(q))) + 2;

	return time_before(jiffies, READ_ONCE(tq->last_done) + window);
}

/*
 * A tier's lists as the policy sees them: per FIFO list the requests its
 * flows have queued, and the oldest head among its backlogged flows, with
 * the flow that holds it (aging serves that head).
 */
static void prism_tier_view(struct prism_data *pd, int t,
			    struct prism_tier_view *v)
{
	struct prism_tier_queue *tq = &pd->tier[t];
	struct prism_flow *fl;
	int d;

	for (d = 0; d < PRISM_NR_FIFOS; d++) {
		v->dir[d].queued = tq->queued[d];
		v->dir[d].oldest = 0;
		v->dir[d].flow = -1;
	}
	list_for_each_entry(fl, &tq->active, active) {
		for (d = 0; d < PRISM_NR_FIFOS; d++) {
			struct request *head;

			head = list_first_entry_or_null(&fl->fifo[d],
							struct request,
							queuelist);
			if (!head || (v->dir[d].flow >= 0 &&
				      !time_before((unsigned long)head->fifo_time,
						   v->dir[d].oldest)))
				continue;
			v->dir[d].oldest = head->fifo_time;
			v->dir[d].flow = prism_flow_slot(pd, fl);
		}
	}
}

/*
 * Whether two tiers or more are about: own requests or completed one
 * within PRISM_ACTIVE_NS. Otherwise the depth controller has nothing to
 * limit (prism_depth_observe(), prism_depth_idle()).
 */
bool prism_tiers_contend(struct prism_data *pd)
{
	unsigned long now = jiffies;
	int t, about = 0;

	for (t = 0; t < PRISM_NR_TIERS; t++) {
		struct prism_tier_queue *tq = &pd->tier[t];

		if ((prism_owned(tq) || prism_tier_recent(tq, now)) &&
		    ++about > 1)
			return true;
	}
	return false;
}

/*
 * Requests in the device that prism did not dispatch: flushes and
 * passthrough, which both kernels route past the elevator. A lower bound:
 * the driver tags in use less every request prism has in flight, some of
 * which may still wait for a tag.
 *
 * Only where the driver tags are this queue's alone: tags shared with
 * other disks (the LUNs of one SCSI host, NVMe namespaces) or across
 * hardware queues would count their requests as this disk's flushes and
 * keep an anticipation window open for as long as they are busy. There
 * prism sees no flush (0), and a chain's window is not restarted by one.
 * A hardware queue no CPU maps to has no tags.
 */
static u32 prism_foreign_inflight(struct request_queue *q, u32 ours)
{
	struct blk_mq_hw_ctx *hctx;
	unsigned long i;
	u32 busy = 0;

	queue_for_each_hw_ctx(q, hctx, i) {
		if (hctx->flags & (BLK_MQ_F_TAG_QUEUE_SHARED |
				   BLK_MQ_F_TAG_HCTX_SHARED))
			return 0;
		if (hctx->tags)
			busy += sbitmap_weight(&hctx->tags->bitmap_tags.sb);
	}
	return busy > ours ? busy - ours : 0;
}

/*
 * A flush after @tq's last completion (*@done_ns, at @done) is in the
 * device (@in_device), or one that was (*@flushing) has left it (no
 * @foreign request in flight any more): the tier's next request is due
 * from @now, not from that completion, nor from the last time a run saw
 * the flush, which may be a window ago (the hold marked the restart, so
 * this run is its completion). Returns the time the next request is
 * measured from.
 */
static u64 prism_flush_restart(struct prism_tier_queue *tq, u64 *done_ns,
			       bool *flushing, bool in_device, bool foreign,
			       u64 done, u64 now)
{
	if (!in_device && (foreign || !*flushing))
		return done;
	*flushing = in_device;
	WRITE_ONCE(*done_ns, now);
	WRITE_ONCE(tq->last_done, jiffies);
	return now;
}

/*
 * Whether @tq's sync-write chain is under way, for a view in which LOW is
 * the highest tier queued and @tq has nothing in flight. A flush in the
 * device within the chain's window is its next link (an fsync's cache
 * flush, the journal's commit record): the chain's time moves to now
 * while it is there, and once more when it has left, so that the link
 * after it (the commit record after the preflush, the waiter's next
 * write after the last flush) still finds the window open.
 */
static void prism_view_chain(struct prism_data *pd, struct request_queue *q,
			     struct prism_tier_queue *tq,
			     struct prism_tier_view *v,
			     const struct prism_flight *f, u64 *now,
			     u64 *window)
{
	u64 done = READ_ONCE(tq->sync_done_ns);
	bool in_device;

	if (!done)
		return;
	if (!*now)
		*now = ktime_get_ns();
	if (!*window)
		*window = prism_window(&pd->depth, prism_tun(pd),
				       !blk_queue_nonrot(q));
	in_device = f->foreign && *now - done < *window;
	/* A flush in the device is a link: timed from the completion before. */
	if (in_device)
		prism_chain_link(pd, now);
	done = prism_flush_restart(tq, &tq->sync_done_ns, &tq->chain_flush,
				   in_device, f->foreign, done, *now);
	tq->chain.last_done = done;
	v->chained = prism_chained(&tq->chain, *now, *window);
}

/*
 * Fill in the in-flight part of the view: what each tier has in the
 * device, whether a tier above @first (the highest with requests queued)
 * is anticipated, and the requests of others in the device. The clock and
 * the driver tags are read only when a tier above @first may be active.
 *
 * A flush is part of the chain it ends (an fsync's cache flush, a journal
 * commit's preflush): while one is in the device, an anticipated tier's
 * window starts again from now, so that the next link, issued only once
 * the flush completes, still finds the device free of bulk work.
 */
static void prism_view_flight(struct prism_data *pd, struct request_queue *q,
			      struct prism_tier_view view[PRISM_NR_TIERS],
			      int first, struct prism_flight *f, u64 *now,
			      u64 *window)
{
	const struct prism_tunables *tun = prism_tun(pd);
	bool guarded = false;
	u32 ours = 0;
	int t;

	for (t = 0; t < PRISM_NR_TIERS; t++) {
		view[t].inflight = prism_inflight(&pd->tier[t]);
		view[t].anticipated = false;
		view[t].chained = false;
		view[t].flushing = false;
		view[t].recent = t < first &&
				 prism_tier_recent(&pd->tier[t], jiffies);
		ours += view[t].inflight;
		if (t < first && (view[t].inflight || view[t].recent ||
				  READ_ONCE(pd->tier[t].done_ns)))
			guarded = true;
	}
	f->foreign = 0;
	if (!guarded || first == PRISM_NR_TIERS)
		return;
	f->foreign = prism_foreign_inflight(q, ours);

	for (t = 0; t < first; t++) {
		struct prism_tier_queue *tq = &pd->tier[t];
		u64 done;

		if (first == PRISM_LOW && !view[t].inflight)
			prism_view_chain(pd, q, tq, &view[t], f, now, window);
		if (view[t].inflight ||
		    (tq->think.samples < PRISM_THINK_MIN && !f->foreign)) {
			/*
			 * A flush seen has left the device meanwhile: forget
			 * it here too, or it keeps the one-tier shortcut off
			 * and opens a window long after, when this is reached.
			 */
			if (!f->foreign)
				tq->flush_seen = false;
			continue;
		}
		/*
		 * Each on its own: the clock may have been read already (a
		 * rate cap, the latency fold) without the window.
		 */
		if (!*now)
			*now = ktime_get_ns();
		if (!*window)
			*window = prism_window(&pd->depth, tun,
					       !blk_queue_nonrot(q));
		done = READ_ONCE(tq->done_ns);
		view[t].flushing = f->foreign && done && *now - done < *window;
		done = prism_flush_restart(tq, &tq->done_ns, &tq->flush_seen,
					   view[t].flushing, f->foreign, done,
					   *now);
		tq->think.last_done = done;
		view[t].anticipated = prism_anticipated(&tq->think, *now,
							*window);
	}
}

/* When the earliest anticipation window of the view closes. */
static u64 prism_window_end(struct prism_data *pd,
			    const struct prism_tier_view view[PRISM_NR_TIERS],
			    u64 window)
{
	u64 end = 0;
	int t;

	for (t = 0; t < PRISM_NR_TIERS; t++) {
		u64 e = pd->tier[t].think.last_done + window;

		if (view[t].anticipated && (!end || e < end))
			end = e;
		e = pd->tier[t].chain.last_done + window;
		if (view[t].chained && (!end || e < end))
			end = e;
	}
	return end;
}

/*
 * The hold, and what runs the queue again after it: the timer, the rate
 * caps' refills, the restart mark.
 */

/*
 * prism's one timer: a hold ends with time (a window, a flow's wait, a
 * paced gap, a rate cap's refill) or the queue was parked without one
 * (prism_park()'s backstop): run the queue. Armed by prism_wake_at() for
 * the earliest of them, never pushed later.
 */
enum hrtimer_restart prism_wake_timer(struct hrtimer *timer)
{
	struct prism_data *pd = container_of(timer, struct prism_data,
					     wake_timer);

	atomic64_inc(&pd->window_runs);
	/* Work again: the queue run below must find it (see prism_park()). */
	smp_mb();
	prism_unpark(pd);
	blk_mq_run_hw_queues(pd->q, true);
	return HRTIMER_NORESTART;
}

/* A tier's cap as device time per second (0: none), from the model. */
static u64 prism_tier_rate(struct prism_data *pd,
			   const struct prism_tunables *tun, int t)
{
	if (!tun->rate_kbps[t])
		return 0;
	return prism_bucket_rate(tun->rate_kbps[t],
				 pd->cost_params.bps[PRISM_READ]);
}

/*
 * Whether capped tier @t may dispatch now: its bucket filled to @now.
 * An empty one is shown to prism_choose() as holding nothing, so the
 * tiers below it are served meanwhile and it earns no share credit; its
 * requests stay where they are until the refill.
 */
static bool prism_tier_throttled(struct prism_data *pd, int t, u64 rate,
				 u64 now, struct prism_tier_view *v)
{
	struct prism_tier_queue *tq = &pd->tier[t];
	int d;

	prism_bucket_fill(&tq->bucket, rate, prism_tun(pd)->rate_burst,
			  now);
	if (prism_bucket_ready(&tq->bucket))
		return false;
	tq->throttled++;
	for (d = 0; d < PRISM_NR_FIFOS; d++)
		v->dir[d].queued = 0;
	return true;
}

/* When the first of the @throttled tiers' buckets refills (ns). */
static u64 prism_refill_end(struct prism_data *pd,
			    const struct prism_tunables *tun, u32 throttled,
			    u64 now)
{
	u64 wait = U64_MAX;
	int t;

	for (t = 0; t < PRISM_NR_TIERS; t++) {
		if (!(throttled & BIT(t)))
			continue;
		wait = min(wait, prism_bucket_wait(&pd->tier[t].bucket,
						   prism_tier_rate(pd, tun, t),
						   now));
	}
	return wait == U64_MAX ? 0 : now + wait;
}

/*
 * Run @hctx again when a request completes. With several hardware queues
 * (NVMe) a completion restarts only its own, and any of them drains
 * prism's one queue: mark them all, or a hold waits for blk-mq's 3 ms
 * re-run instead of the completion that ends it.
 */
void prism_mark_restart(struct blk_mq_hw_ctx *hctx)
{
	struct blk_mq_hw_ctx *h;
	unsigned long i;

	if (hctx->queue->nr_hw_queues == 1) {
		blk_mq_sched_mark_restart_hctx(hctx);
		return;
	}
	queue_for_each_hw_ctx(hctx->queue, h, i)
		blk_mq_sched_mark_restart_hctx(h);
}

/*
 * The one hold: prism_choose() dispatched nothing although requests are
 * queued (@hold says why; PRISM_HOLD_NONE: only rate-capped tiers had
 * any). The queue is parked: has_work() says there is no work until a
 * completion (the restart mark) or the timer at @until, which
 * prism_hold_until() chose (0: a completion alone; prism_park()'s
 * backstop covers a wake-up missed all the same), whichever comes first.
 * A hold for a tier's next request (@idle_tier) or a flow's (@idle_fl,
 * with nothing of it in the device) idles the device: that time is
 * theirs, charged when the next dispatch comes (prism_account_idle()).
 */
void prism_hold(struct prism_data *pd, struct blk_mq_hw_ctx *hctx,
		enum prism_hold hold, int idle_tier, struct prism_flow *idle_fl,
		u64 until, u64 now, u32 foreign)
{
	prism_park(pd, foreign, now);
	if (hold != PRISM_HOLD_NONE)
		prism_mark_restart(hctx);
	if (hold == PRISM_HOLD_WINDOW)
		pd->held_window++;
	else if (hold == PRISM_HOLD_FLOW)
		pd->held_flow++;
	else if (hold == PRISM_HOLD_DEPTH)
		pd->held_depth++;
	if (!pd->idle_since && (idle_tier >= 0 || idle_fl)) {
		pd->idle_since = now;
		pd->idle_tier = idle_fl ? idle_fl->tier : idle_tier;
		pd->idle_flow = idle_fl ? prism_flow_slot(pd, idle_fl) : -1;
	}
	if (until)
		prism_wake_at(pd, max(until, now), NSEC_PER_USEC * 50);
}

/*
 * When a hold for flow @fl may end with time: its window after its last
 * completion, or, with its request in the device (the restart mark ends
 * the hold at its completion), the cap on waiting for it.
 */
u64 prism_flow_wait_end(struct prism_flow *fl)
{
	if (prism_flow_owned(fl))
		return fl->dispatch_ns + PRISM_FLOW_WAIT_MAX;
	return fl->think.last_done + fl->wait_window;
}

/*
 * The full view and the choice on it (prism_choose_viewed()), which may
 * hold only for a tier that could get a scheduler tag.
 */

static u32 prism_tier_limit(struct prism_data *pd, const struct prism_tunables *t,
			    enum prism_tier tier, u32 nr, unsigned long now);

/*
 * Whether @tier's next request could get a scheduler tag: not while the
 * requests owned fill every tag, or the part of them its tier's tag
 * reserve lets it allocate from (see prism_tier_limit()). Holding the
 * device for a tier or a flow that cannot submit only keeps the tags from
 * coming free: on a depth-1 disk at the kernel's default nr_requests of
 * 2, two other flows' queued requests are enough.
 */
static bool prism_tier_can_allocate(struct prism_data *pd,
				    enum prism_tier tier)
{
	u32 nr = prism_queue_tags(pd->q), limit;

	limit = prism_tier_limit(pd, prism_tun(pd), tier, nr, jiffies);
	return prism_owned_total(pd) < (limit ? limit : nr);
}

/*
 * The tiers above @first that own nothing and could not get a tag
 * (prism_flight.tagless): prism_choose() holds nothing for them.
 */
static u32 prism_view_tagless(struct prism_data *pd, int first)
{
	u32 tagless = 0;
	int t;

	for (t = 0; t < first; t++)
		if (!prism_owned(&pd->tier[t]) &&
		    !prism_tier_can_allocate(pd, t))
			tagless |= BIT(t);
	return tagless;
}

/*
 * How long waiting for @fl may last (prism_flow_idle_window()): in a
 * group, the longer of what its group's fair queue and its tier's (for
 * the group) would wait, since either's ratio may need the wait.
 */
static u64 prism_flow_wait_window(struct prism_data *pd,
				  struct prism_flow *fl, u32 depth)
{
	bool rotational = !blk_queue_nonrot(pd->q);
	u64 w;

	w = prism_flow_idle_window(depth, rotational, &fl->stream,
				   prism_flow_fq(pd, fl), &fl->fq,
				   pd->flow_window);
	if (fl->group)
		w = max(w, prism_flow_idle_window(depth, rotational,
						  &fl->stream,
						  &pd->tier[fl->tier].fq,
						  &fl->group->ent,
						  pd->flow_window));
	return w;
}

/*
 * The batch's flow, if it has nothing queued and is expected back, and
 * waiting for it can pay on a device of @depth, and no other flow of its
 * tier has sync writes queued (prism_flow_wait_yields()), and its next
 * request could get a scheduler tag: one of its own in the device frees
 * the tag it needs (taken for another's, a start-up's dependent reads
 * beside buffered readers at nr_requests 2 were waited for 1-4 times in
 * 256). Its view then says so (flow_waits), and prism_choose() may hold
 * for it.
 */
static struct prism_flow *prism_flow_waited(struct prism_data *pd,
					    struct prism_tier_view *view,
					    u32 throttled, u32 depth, u64 *now)
{
	struct prism_flow *fl;

	if (!pd->flow_window || pd->batch.tier < 0 || pd->batch.flow < 0)
		return NULL;
	fl = &pd->flows[pd->batch.flow];
	if (!fl->key || fl->tier != pd->batch.tier || fl->fq.backlogged ||
	    (throttled & BIT(fl->tier)) ||
	    prism_flow_wait_yields(&view[fl->tier]) ||
	    (!prism_flow_owned(fl) && !prism_tier_can_allocate(pd, fl->tier)))
		return NULL;
	fl->wait_window = prism_flow_wait_window(pd, fl, depth);
	if (!fl->wait_window)
		return NULL;
	if (!*now)
		*now = ktime_get_ns();
	fl->think.last_done = READ_ONCE(fl->done_ns);
	if (!prism_flow_expected(&fl->think, prism_flow_owned(fl),
				 fl->dispatch_ns, *now, fl->wait_window))
		return NULL;
	view[fl->tier].flow_waits = true;
	return fl;
}

/*
 * What pacing needs (see prism_depth_ctl.duty): the tiers' service time
 * on an idle device (unmeasured: none, and pacing only keeps them to one
 * at a time) and how long ago (from @now, ns) each tier's last paced
 * request left the device, read where it completed: a gap shorter than
 * a jiffy stays that short. Not its last background write: one sent
 * in each gap would start the gap again, and the reads paced behind a
 * steady writeback would never be let in (pgbench beside an IDLE reader
 * on the small cloud volume: seconds without a read).
 */
static void prism_view_paced(struct prism_data *pd, struct prism_flight *f,
			     u64 now)
{
	int t;

	f->lower_service = pd->depth.bulk_samples ? pd->depth.bulk : 0;
	for (t = 0; t < PRISM_NR_TIERS; t++) {
		u64 done = READ_ONCE(pd->tier[t].paced_done_ns);

		f->quiet[t] = !done ? ~0ULL : now > done ? now - done : 0;
	}
}

/*
 * Whether a tier above @first (the highest with requests queued) has a
 * request overdue in the device (prism_tier_stalled()): then none of the
 * tiers below may have one more there. Jiffies only: both times are
 * stored once a jiffy.
 */
static bool prism_view_stalled(struct prism_data *pd,
			       const struct prism_tier_view view[PRISM_NR_TIERS],
			       int first)
{
	unsigned long now = jiffies, stall = msecs_to_jiffies(PRISM_STALL_MS);
	int t;

	for (t = 0; t < first && t < PRISM_LOW; t++)
		if (prism_tier_stalled(view[t].inflight,
				       READ_ONCE(pd->tier[t].last_done),
				       pd->tier[t].last_dispatch, now, stall))
			return true;
	return false;
}

/*
 * prism_choose() on the full view of the tiers: false if nothing may be
 * dispatched now, after arranging for the queue to run again (a window,
 * depth, flow or rate hold). The tiers that had requests to offer go to
 * @queued_tiers, a flow expected back that the choice may wait for to
 * @waited. Not inlined: Debian's kernels zero every stack variable
 * (INIT_STACK_ALL_ZERO), and the views are the biggest ones of a
 * dispatch; the one-tier shortcut does without them.
 */
noinline_for_stack bool
prism_choose_viewed(struct prism_data *pd, struct blk_mq_hw_ctx *hctx,
		    const struct prism_tunables *tun, u32 depth, u64 *now,
		    struct prism_choice *c, u32 *queued_tiers,
		    struct prism_flow **waited)
{
	struct prism_tier_view view[PRISM_NR_TIERS];
	struct prism_hold_ends ends;
	struct prism_flight flight;
	struct prism_flow *fl;
	enum prism_hold hold;
	u64 window = 0, rate, until;
	u32 throttled = 0;
	int t, first = PRISM_NR_TIERS, idle_tier = -1;

	for (t = 0; t < PRISM_NR_TIERS; t++) {
		prism_tier_view(pd, t, &view[t]);
		view[t].batch_left = 0;
		view[t].flow_waits = false;
		if (!tq_queued(&pd->tier[t]))
			continue;
		rate = prism_tier_rate(pd, tun, t);
		if (rate) {
			if (!*now)
				*now = ktime_get_ns();
			if (prism_tier_throttled(pd, t, rate, *now, &view[t])) {
				throttled |= BIT(t);
				continue;
			}
		}
		*queued_tiers |= 1U << t;
		if (first == PRISM_NR_TIERS)
			first = t;
	}
	if (pd->batch.tier >= 0 && pd->batch.flow >= 0) {
		fl = &pd->flows[pd->batch.flow];
		if (fl->tier == pd->batch.tier && !(throttled & BIT(fl->tier)))
			view[fl->tier].batch_left = fl->queued[pd->batch.dir];
	}
	prism_view_flight(pd, hctx->queue, view, first, &flight, now, &window);
	*waited = *queued_tiers ?
		  prism_flow_waited(pd, view, throttled, depth, now) : NULL;

	flight.depth = depth;
	flight.lower_limit = pd->depth.limit;
	if (prism_view_stalled(pd, view, first)) {
		flight.lower_limit = 0;
		pd->held_stalled++;
	}
	flight.lower_duty = pd->depth.duty;
	if (flight.lower_duty < PRISM_DUTY_FULL) {
		if (!*now)
			*now = ktime_get_ns();
		prism_view_paced(pd, &flight, *now);
	}
	flight.tagless = prism_view_tagless(pd, first);
	if (prism_choose(view, &pd->batch, tun, &flight, jiffies, c, &hold)) {
		if (c->unheld)
			pd->tags_short++;
		return true;
	}
	if (hold == PRISM_HOLD_NONE && !throttled)
		return false;		/* nothing queued to hold */
	if (!*now)
		*now = ktime_get_ns();
	ends.now = *now;
	ends.window = prism_window_end(pd, view, window);
	ends.flow = *waited ? prism_flow_wait_end(*waited) : 0;
	ends.refill = throttled ? prism_refill_end(pd, tun, throttled, *now) : 0;
	until = prism_hold_until(hold, view, &flight, first, &ends);
	if (ends.paced)
		pd->held_paced++;
	if (hold == PRISM_HOLD_WINDOW) {
		/* The device idles for the highest tier held for. */
		for (t = 0; t < PRISM_NR_TIERS - 1 && !view[t].anticipated &&
			    !view[t].chained; t++)
			;
		idle_tier = t;
	}
	prism_hold(pd, hctx, hold, idle_tier,
		   hold == PRISM_HOLD_FLOW && !prism_flow_owned(*waited) ?
		   *waited : NULL, until, *now, flight.foreign);
	return false;
}

/*
 * The tag limits (limit_depth()): a tier's reserve while a tier above it
 * is active, and a flow's part of the tags.
 */

/*
 * Tag reserve: while a higher tier is active, a NORMAL or LOW allocation
 * may take only its tier's share of the scheduler tags, so a higher-tier
 * request finds one free instead of queueing in tag allocation where
 * prism cannot see it. 0: no limit.
 */
static u32 prism_tier_limit(struct prism_data *pd, const struct prism_tunables *t,
			    enum prism_tier tier, u32 nr, unsigned long now)
{
	if (!prism_higher_active(pd, tier, now))
		return 0;
	return prism_alloc_depth(tier, true, nr, t);
}

/*
 * Per-flow tag limit (CPQ): while another flow owns requests, a process
 * holding flow_depth % of the scheduler tags or more allocates within a
 * shallower depth, so light processes at its priority still find tags
 * and reach the fair queue. RT flows are exempt. 0: no limit.
 */
static u32 prism_flow_limit(struct prism_data *pd,
			    const struct prism_tunables *t,
			    enum prism_tier tier, u32 nr, u64 total)
{
	struct prism_flow *fl;
	u32 depth, key, group;
	u64 owned;

	if (!prism_flow_limit_may(total, nr, t->flow_depth))
		return 0;
	/*
	 * The flow's group is the one the thread's last request was in
	 * (the group is not known before the bio is: see prism_alloc_tier());
	 * a slot given to another group since finds no flow, or another's,
	 * which only shallows one allocation wrongly.
	 */
	key = READ_ONCE(pd->recent[prism_recent_slot(current->pid)]);
	group = prism_alloc_tier(key, current->pid, PRISM_NR_TIERS) == tier ?
		prism_alloc_group(key) : 0;
	fl = prism_flow_find(pd, prism_flow_key(current->tgid, tier, group));
	if (!fl || READ_ONCE(fl->rt))
		return 0;
	owned = prism_flow_owned(fl);
	depth = prism_flow_alloc_depth(owned, total > owned, nr, t);
	if (depth)
		atomic64_inc(&fl->throttled);
	return depth;
}

/*
 * Both limits for an allocation that may get one, the smaller applying.
 * Out of line: the tunables are read under RCU (rcu_read_lock() is a call
 * on preemptible-RCU kernels), which the common case does without.
 */
static noinline void prism_limit_depth_slow(struct prism_data *pd,
					    struct blk_mq_alloc_data *data,
					    enum prism_tier tier, u32 nr,
					    unsigned long now)
{
	const struct prism_tunables *t;
	u32 depth, fdepth;

	rcu_read_lock();
	t = &rcu_dereference(pd->tun)->t;
	if (tier == PRISM_NR_TIERS)
		tier = prism_tier_of(t, get_current_ioprio(), data->cmd_flags);
	depth = prism_tier_limit(pd, t, tier, nr, now);
	/*
	 * A flow's requests, counted over the whole queue, against one
	 * hardware queue's tags: a process submitting from one CPU allocates
	 * from one hardware queue's tags, and CPQ's half is of those. Against
	 * every queue's tags (as the tagless test counts) a greedy process
	 * on QEMU's two-queue NVMe disk could take all of its queue's tags:
	 * flows_greedy saw it limited 0-1 times, against about 1,900. A
	 * process on several CPUs is held to half of one queue's tags in
	 * all, stricter than it need be.
	 */
	fdepth = prism_flow_limit(pd, t, tier, nr, prism_owned_total(pd));
	rcu_read_unlock();

	if (fdepth && (!depth || fdepth < depth))
		depth = fdepth;
	if (depth)
		data->shallow_depth = prism_shallow_depth(data->hctx, depth);
}

/*
 * The tier is the one the allocating thread's last request carried (see
 * prism_alloc_tier()), else its own I/O priority's. Runs locklessly: the
 * tunables under RCU, the counters as atomics or READ_ONCE. The common
 * case (no tier above the thread's active, too few requests owned for a
 * flow to hold its part of the tags) returns after a few loads, since
 * this runs for every request: no tunables, no array on the stack (which
 * Debian's INIT_STACK_ALL_ZERO would clear on every call).
 */
void prism_limit_depth(blk_opf_t opf, struct blk_mq_alloc_data *data)
{
	struct prism_data *pd = data->q->elevator->elevator_data;
	unsigned int nr = data->q->nr_requests;
	unsigned long now = jiffies;
	u32 pid = current->pid;
	enum prism_tier tier;

	if (prism_op_background(opf) && READ_ONCE(pd->writeback_low))
		tier = PRISM_LOW;
	else
		tier = prism_alloc_tier(READ_ONCE(pd->recent[prism_recent_slot(pid)]),
					pid, PRISM_NR_TIERS);
	if (tier != PRISM_NR_TIERS &&
	    !prism_higher_active(pd, tier, now) &&
	    !prism_flow_limit_near(prism_owned_total(pd), nr,
				   READ_ONCE(pd->flow_frac)))
		return;
	prism_limit_depth_slow(pd, data, tier, nr, now);
}

/*
 * The timed completions: the cost model and its learner, and the device
 * times that dispatch folds into the depth controller.
 */

/*
 * The cost model in force, from the tunables and the media; whenever
 * either changes. Coefficients set to 0 take the media's defaults.
 */
void prism_model_update(struct prism_data *pd)
{
	const struct prism_tunables *tun = prism_tun(pd);

	prism_cost_effective(&pd->cost_params, &tun->cost, &pd->learned,
			     tun->cost_auto && pd->learned_any, pd->rotational);
	prism_cost_digest(&pd->model, &pd->cost_params);
	WRITE_ONCE(pd->learning, PRISM_CAN_LEARN && tun->cost_auto);
}

/*
 * A timed request completed at @done, the completion before it at
 * @prev_done: sum its point. Lockless.
 */
static void prism_learn_complete(struct prism_data *pd, struct request *rq,
				 unsigned long st, u64 prev_done, u64 done)
{
#if PRISM_CAN_LEARN
	u32 bytes = ((st >> PRISM_RQ_KIB_SHIFT) & 0x1fff) * 1024;
	u64 dispatched = (unsigned long)rq->elv.priv[1];
	struct prism_learn_acc *a;
	u64 x, y;

	prism_learn_point(bytes, prism_learn_busy(dispatched, prev_done, done),
			  &x, &y);
	a = &pd->learn_acc[op_is_write(req_op(rq)) ? PRISM_WRITE : PRISM_READ]
			  [st & PRISM_RQ_LEARN_SEQ ? 1 : 0];
	atomic64_add(y, &a->y);
	atomic64_add(x * x, &a->xx);
	atomic64_add(x * y, &a->xy);
	atomic64_add((1ULL << PRISM_LEARN_N_SHIFT) | x, &a->nx);
#endif
}

/*
 * Fold the points that completed since the last time into the learner,
 * refit, and put the fit in force if cost_model=auto.
 */
void prism_learn_fold(struct prism_data *pd)
{
	struct prism_cost_params prior;
	bool any = false;
	int d, k;

	lockdep_assert_held(&pd->lock);

	pd->learn_folded = jiffies;
	for (d = 0; d < PRISM_NR_DIRS; d++) {
		for (k = 0; k < 2; k++) {
			struct prism_learn_acc *a = &pd->learn_acc[d][k];
			struct prism_learn_sums b;
			u64 nx = atomic64_xchg(&a->nx, 0);

			if (!nx)
				continue;
			b.n = nx >> PRISM_LEARN_N_SHIFT;
			b.x = nx & ((1ULL << PRISM_LEARN_N_SHIFT) - 1);
			b.y = atomic64_xchg(&a->y, 0);
			b.xx = atomic64_xchg(&a->xx, 0);
			b.xy = atomic64_xchg(&a->xy, 0);
			prism_learn_add(&pd->learner, d, k, &b);
			any = true;
		}
	}
	if (!any)
		return;
	prism_cost_defaults(&prior, pd->rotational);
	pd->learned_any = prism_learn_params(&pd->learner, &prior,
					     &pd->learned);
	prism_model_update(pd);
}

/* Add one device time, from the dispatch stamp in priv[1], to @acc. */
static void prism_lat_add(struct request *rq, u64 done, atomic64_t *acc)
{
	u64 us = (unsigned long)done - (unsigned long)rq->elv.priv[1];

	us = div_u64(us, NSEC_PER_USEC);
	if (us > PRISM_LAT_US_MAX)
		us = PRISM_LAT_US_MAX;
	atomic64_add((1ULL << PRISM_LAT_COUNT_SHIFT) | us, acc);
}

/*
 * A completion someone times: the in-flight control's latencies, the
 * cost learner's samples. Out of line: most completions are not timed.
 */
noinline void prism_finish_timed(struct prism_data *pd,
				 struct request *rq,
				 struct prism_tier_queue *tq,
				 unsigned long st, u64 done,
				 bool learning)
{
	if (!done)
		done = ktime_get_ns();
	if (st & PRISM_RQ_TIMED) {
		WRITE_ONCE(tq->done_ns, done);
		if (st & PRISM_RQ_SYNC_FIFO)
			WRITE_ONCE(tq->sync_done_ns, done);
		prism_lat_add(rq, done, (st & PRISM_RQ_SOLO) ? &pd->lat.solo :
							       &pd->lat.all);
	} else if (st & PRISM_RQ_IDLE_DEV) {
		prism_lat_add(rq, done, &pd->lat.bulk);
	}
	if (learning) {
		u64 prev_done = atomic64_xchg(&pd->last_done, done);

		if (st & PRISM_RQ_LEARN)
			prism_learn_complete(pd, rq, st, prev_done, done);
	}
}
