// SPDX-License-Identifier: GPL-2.0
/*
 * prism scheduling policy; see prism_policy.h for the split between policy
 * and mechanism. Builds in the kernel module and in userspace tests.
 */
#include "prism_policy.h"

void prism_tunables_init(struct prism_tunables *t, unsigned int hz)
{
	int i;

	/*
	 * The deadline knobs keep mq-deadline's defaults and meaning, with one
	 * exception: prio_aging_expire = 0 turns aging off (strict priority
	 * with shares), where mq-deadline would age every request at once.
	 */
	t->fifo_expire[PRISM_READ] = hz / 2;
	t->fifo_expire[PRISM_WRITE] = 5 * hz;
	/* Someone waits for a sync write as for a read. */
	t->fifo_expire[PRISM_SYNC_WRITE] = hz / 2;
	t->prio_aging_expire = 10 * hz;
	t->writes_starved = 2;
	t->fifo_batch = 16;
	prism_set_be_tiers(t, 3);
	/*
	 * Keep a quarter of the scheduler tags out of NORMAL's reach and half
	 * out of LOW's, so that a bulk job cannot hold every tag while a
	 * higher tier waits in tag allocation, invisible to the scheduler.
	 */
	t->normal_depth = 75;
	t->low_depth = 50;
	/* 64 sectors = 32 KiB: readahead windows and small skips still count. */
	t->seq_gap = 64;
	/*
	 * Bulk work keeps moving under a busy higher tier: LOW gets one
	 * dispatch in ten, NORMAL one in four of those from it and HIGH.
	 * The ratios follow bfq's weights by BE level (BE1 : BE7 = 7 : 1,
	 * BE1 : BE4 = 7 : 4), rounded towards the higher tier.
	 */
	t->share[PRISM_HIGH] = 0;
	t->share[PRISM_NORMAL] = 25;
	t->share[PRISM_LOW] = 10;
	/* In-flight control: both derived from what the device shows. */
	t->slice_idle = PRISM_AUTO;
	t->target = 0;
	/*
	 * A flow's turn: 16 ms of device time, a few MB of a stream on a disk
	 * (bfq's budgets are of the same order), far more than fifo_batch
	 * small requests on flash, where fifo_batch ends the turn first.
	 */
	t->quantum = 16000000ULL;
	/* CPQ's soft limit: half the tags per thread group. */
	t->flow_depth = 50;
	/* Cost coefficients: all 0, the media's defaults; fixed, not learned. */
	t->cost = (struct prism_cost_params){ };
	t->cost_auto = false;
	/* No rate caps: a cap wastes the device when nothing else wants it. */
	for (i = 0; i < PRISM_NR_TIERS; i++)
		t->rate_kbps[i] = 0;
	t->rate_burst = PRISM_BUCKET_BURST_MS * 1000000ULL;
	t->bulk_merge = 0;
	/* Background writeback is bulk work, whoever's it is. */
	t->writeback_low = true;
}

/*
 * be_tiers: how many tiers the eight BE levels span. 3 is seed 000's
 * mapping, BE 0-2 HIGH, 3-5 NORMAL, 6-7 LOW, which gives a raised level
 * priority over the default one; 1 puts every level in NORMAL, where the
 * levels are weights of flows sharing one tier, as under bfq (the
 * proportional-shares recipe). v2's two cut-offs were never set to
 * anything else.
 */
void prism_set_be_tiers(struct prism_tunables *t, int n)
{
	t->be_high_max = n == 1 ? -1 : 2;
	t->be_low_min = n == 1 ? 8 : 6;
}

/* The be_tiers that prism_set_be_tiers() set. */
int prism_be_tiers(const struct prism_tunables *t)
{
	return t->be_high_max < 0 ? 1 : 3;
}

bool prism_tunables_valid(const struct prism_tunables *t)
{
	/* The two BE cut-offs may not cross: a level is in exactly one tier. */
	return t->be_high_max >= -1 && t->be_high_max < t->be_low_min &&
	       t->be_low_min <= 8 && t->share[PRISM_NORMAL] <= PRISM_SHARE_MAX &&
	       t->share[PRISM_LOW] <= PRISM_SHARE_MAX &&
	       t->slice_idle >= PRISM_AUTO &&
	       t->slice_idle <= (s64)PRISM_ACTIVE_NS &&
	       t->quantum && t->rate_burst &&
	       t->flow_depth >= 1 && t->flow_depth <= 100;
}

void prism_batch_reset(struct prism_batch *b)
{
	int tier;

	b->tier = -1;
	b->flow = -1;
	b->dir = PRISM_READ;
	b->count = 0;
	b->cost = 0;
	b->starved = 0;
	for (tier = 0; tier < PRISM_NR_TIERS; tier++) {
		b->credit[tier] = 0;
		b->last_cost[tier] = 0;
	}
}

static bool tier_queued(const struct prism_tier_view *v)
{
	return v->dir[PRISM_READ].queued || v->dir[PRISM_WRITE].queued ||
	       v->dir[PRISM_SYNC_WRITE].queued;
}

/*
 * Aging: the oldest FIFO head of a tier below @first that has waited
 * prio_aging_expire or longer. Served ahead of @first so no tier starves.
 */
static bool pick_aged(const struct prism_tier_view view[PRISM_NR_TIERS],
		      int first, const struct prism_tunables *t,
		      unsigned long now, struct prism_choice *c)
{
	unsigned long oldest = 0;
	bool found = false;
	int tier, dir;

	if (!t->prio_aging_expire)
		return false;

	for (tier = first + 1; tier < PRISM_NR_TIERS; tier++) {
		for (dir = 0; dir < PRISM_NR_FIFOS; dir++) {
			const struct prism_fifo_view *f = &view[tier].dir[dir];

			if (!f->queued ||
			    !prism_time_after_eq(now, f->oldest +
						 t->prio_aging_expire))
				continue;
			if (found && prism_time_after_eq(f->oldest, oldest))
				continue;
			found = true;
			oldest = f->oldest;
			c->tier = tier;
			c->dir = dir;
			c->flow = f->flow;
		}
	}
	if (found) {
		c->take = PRISM_TAKE_FIFO;
		c->aged = true;
		c->expired = true;
	}
	return found;
}

/* Of the FIFO lists in @mask, the non-empty one with the oldest head. */
static int oldest_of(const struct prism_tier_view *v, unsigned int mask)
{
	int dir, best = -1;

	for (dir = 0; dir < PRISM_NR_FIFOS; dir++) {
		const struct prism_fifo_view *f = &v->dir[dir];

		if (!(mask & (1U << dir)) || !f->queued)
			continue;
		if (best < 0 ||
		    !prism_time_after_eq(f->oldest, v->dir[best].oldest))
			best = dir;
	}
	return best;
}

#define ALL_FIFOS	((1U << PRISM_NR_FIFOS) - 1)
#define SYNC_FIFOS	((1U << PRISM_READ) | (1U << PRISM_SYNC_WRITE))

/* A tier's oldest FIFO head: where a request served out of turn comes from. */
static int oldest_dir(const struct prism_tier_view *v)
{
	return oldest_of(v, ALL_FIFOS);
}

/* Requests in flight from @tier and the tiers below it. */
static u32 inflight_from(const struct prism_tier_view view[PRISM_NR_TIERS],
			 int tier)
{
	u32 n = 0;

	for (; tier < PRISM_NR_TIERS; tier++)
		n += view[tier].inflight;
	return n;
}

/*
 * Whether one more request of @tier, below an active tier, has room in
 * the device: not while it is full (a request handed out then waits for
 * a driver tag, where a higher tier's next request could not pass it;
 * requests that bypass the scheduler, such as flushes, count), nor while
 * @tier and those below already hold lower_limit.
 */
static bool depth_room(const struct prism_tier_view view[PRISM_NR_TIERS],
		       int tier, const struct prism_flight *f)
{
	return inflight_from(view, 0) + f->foreign < f->depth &&
	       inflight_from(view, tier) < f->lower_limit;
}

/*
 * Whether pacing (see prism_depth_ctl.duty) lets one more request of
 * @tier in: only alone and once its gap has passed.
 */
static bool paced_allows(const struct prism_tier_view view[PRISM_NR_TIERS],
			 int tier, const struct prism_flight *f)
{
	return f->lower_duty >= PRISM_DUTY_FULL ||
	       (!inflight_from(view, tier) && !prism_paced_wait(f, tier));
}

/*
 * Background writeback is not paced: a task over the dirty limits
 * (balance_dirty_pages()) and a journal commit in ordered mode wait for
 * writeback whoever issued it, so the higher tiers would wait for it too
 * (pgbench beside an IDLE buffered writer on the 16 MiB/s cloud volume:
 * 0.7 transactions a second with it paced, 2.5 under none). Held for a
 * gap, @tier and those below send their oldest background write instead,
 * one at a time, from its FIFO head.
 */
static bool pick_writeback(const struct prism_tier_view view[PRISM_NR_TIERS],
			   int tier, struct prism_choice *c)
{
	for (; tier < PRISM_NR_TIERS; tier++) {
		const struct prism_fifo_view *fv = &view[tier].dir[PRISM_WRITE];

		if (!fv->queued)
			continue;
		c->tier = tier;
		c->dir = PRISM_WRITE;
		c->flow = fv->flow;
		c->take = PRISM_TAKE_FIFO;
		return true;
	}
	return false;
}

/* What a share dispatch of @tier is expected to cost: its last one's. */
static u64 share_est(const struct prism_batch *b, int tier)
{
	u64 est = b->last_cost[tier];
	int above;

	/* None yet: as much as the dispatches it earned its credit from. */
	for (above = tier - 1; !est && above >= 0; above--)
		est = b->last_cost[above];
	return est ? est : 1;
}

/*
 * Shares: a tier below @first that is owed a dispatch (its credit has
 * reached (100 - share) x the cost of its next request), the lowest first
 * since it has the least. Served in its own order, from the FIFO head
 * only if that has expired, so a sequential stream stays sequential.
 *
 * An owed tier that already has lower_limit in flight is in the device
 * and waits. One that finds the device full is a different matter: a
 * higher tier that keeps requests queued refills the device the moment
 * it has room, so the owed request would never find any. Then @owed is
 * set, and the higher tiers are held until a request leaves the device.
 */
static bool pick_share(const struct prism_tier_view view[PRISM_NR_TIERS],
		       int first, const struct prism_batch *b,
		       const struct prism_tunables *t,
		       const struct prism_flight *f, struct prism_choice *c,
		       bool *owed)
{
	int tier;

	*owed = false;
	for (tier = PRISM_NR_TIERS - 1; tier > first; tier--) {
		u32 share = t->share[tier];

		if (!share || !tier_queued(&view[tier]) ||
		    b->credit[tier] < (s64)((PRISM_SHARE_UNIT - share) *
					    share_est(b, tier)) ||
		    inflight_from(view, tier) >= f->lower_limit)
			continue;
		if (inflight_from(view, 0) + f->foreign >= f->depth) {
			*owed = true;
			continue;
		}
		c->tier = tier;
		c->flow = -1;
		c->shared = true;
		return true;
	}
	return false;
}

/*
 * The device sat idle for @ns because lower tiers were held for @tier's
 * anticipated next request: that time was spent on @tier, as bfq charges
 * idling to the queue it idles for, so the waiting tiers below it earn
 * their shares of it. Without this a chain of small dependent requests,
 * whose own cost is tiny next to the gaps held for it, would keep a bulk
 * tier from ever earning a dispatch.
 *
 * But by no more than makes a tier owed its next dispatch, as a flow's
 * idle charge is capped at one request (prism_fq_charge_idle()): idle
 * time is wall-clock time and credit is spent in the model's cost,
 * which can be a hundred times shorter, so a few milliseconds held would
 * otherwise release a burst of dozens of lower requests into the device
 * the moment the hold ends.
 */
void prism_account_idle(struct prism_batch *b, const struct prism_tunables *t,
			u32 queued_tiers, int tier, u64 ns)
{
	int lower;

	for (lower = tier + 1; lower < PRISM_NR_TIERS; lower++) {
		u32 share = t->share[lower];
		s64 owed, credit;

		if (!(queued_tiers & (1U << lower)) || !share)
			continue;
		owed = (s64)((PRISM_SHARE_UNIT - share) * share_est(b, lower));
		credit = b->credit[lower] + (s64)(share * ns);
		if (credit > owed)
			credit = b->credit[lower] > owed ? b->credit[lower] : owed;
		b->credit[lower] = credit;
	}
}

/* A tier that holds the device for the tiers below it. */
static bool tier_active(const struct prism_tier_view *v)
{
	return tier_queued(v) || v->inflight || v->anticipated ||
	       v->chained || v->flushing;
}

/* The open batch in @tier waits for its flow (see prism_flow_expected()). */
static bool batch_waits(const struct prism_tier_view view[PRISM_NR_TIERS],
			const struct prism_batch *b,
			const struct prism_tunables *t, int tier)
{
	return b->tier == tier && view[tier].flow_waits &&
	       prism_batch_may_wait(b, t);
}

/* Close the open batch: the next dispatch arbitrates afresh. */
static void batch_close(struct prism_batch *b)
{
	b->tier = -1;
	b->flow = -1;
	b->count = 0;
	b->cost = 0;
}

/*
 * Choose the tier to dispatch from next, and whether the open batch goes
 * on. Returns false when nothing may be dispatched; *hold then says
 * whether requests are held back, and why. Order: aged lower-tier
 * requests, then a lower tier owed its share, then the highest non-empty
 * tier. There the open batch (one flow, one FIFO list, sort order) goes
 * on while its flow has requests on that list, up to fifo_batch requests
 * and quantum of device time; otherwise c->flow is -1: the mechanism asks
 * the tier's fair queue for a flow and prism_choose_in_flow() for its
 * list. An aged request is taken from its FIFO head, whoever's it is.
 *
 * A tier above the highest non-empty one may still be active: requests
 * in flight, or anticipated (its next link is due within the window),
 * or chained (a sync-write chain under way: see prism_chained()).
 * Below an anticipated tier nothing is dispatched in its own right, below
 * a chained one nothing of LOW; below one in flight only within the
 * device's depth and lower_limit. So too below a recent one (a request of
 * it completed lately) while the controller limits: on a device that
 * queues, the links of a transaction come tens of milliseconds apart
 * (an fsync'd append on the cloud volume: 20-40 ms), far past any window,
 * and a bulk tier let in between them fills the device's queue, where
 * the next link waits behind all of it (the limit at one request, LOW
 * still had the whole volume, and the appender's fsync P99 was 3.8x
 * alone). Shares
 * pass the window, since a share is what bounds the wait of the tiers
 * below, but not the depth; aging passes both.
 *
 * A batch whose flow has nothing queued but is expected back (flow_waits)
 * holds its tier's other flows, within its turn's bounds, and, while the
 * device holds nothing of its tier (an idle gap, not a request in
 * service, which depth control governs), the tiers below, as an
 * anticipated tier does: shares and aging pass.
 *
 * No tier is held for one that owns nothing and could not get a
 * scheduler tag (f->tagless): the tiers below own the tags it waits for,
 * and only their completions free them.
 */
bool prism_choose(const struct prism_tier_view view[PRISM_NR_TIERS],
		  struct prism_batch *b, const struct prism_tunables *t,
		  const struct prism_flight *f, unsigned long now,
		  struct prism_choice *c, enum prism_hold *hold)
{
	int tier, guard;
	bool owed;

	*hold = PRISM_HOLD_NONE;
	for (guard = 0; guard < PRISM_NR_TIERS; guard++)
		if (tier_active(&view[guard]) || batch_waits(view, b, t, guard) ||
		    (view[guard].recent &&
		     prism_depth_limits(f->lower_limit, f->lower_duty,
					f->depth)))
			break;
	for (tier = guard; tier < PRISM_NR_TIERS; tier++)
		if (tier_queued(&view[tier]))
			break;
	if (tier == PRISM_NR_TIERS)
		return false;

	prism_choice_plain(c);
	c->unheld = false;
	if (guard < tier && (f->tagless & (1U << guard))) {
		/* Nothing held for a tier that cannot get a tag. */
		c->unheld = true;
		guard = tier;
	}

	if (pick_aged(view, guard, t, now, c) ||
	    pick_share(view, guard, b, t, f, c, &owed)) {
		/* One request out of turn; then arbitrate afresh. */
		batch_close(b);
		return true;
	}
	if (owed) {
		/* A share is due and the device is full: it gets the room. */
		*hold = PRISM_HOLD_DEPTH;
		return false;
	}

	if (guard < tier) {
		int above;

		for (above = guard; above < tier; above++) {
			if (view[above].anticipated ||
			    (view[above].chained && tier == PRISM_LOW)) {
				*hold = PRISM_HOLD_WINDOW;
				return false;
			}
			if (!view[above].inflight &&
			    batch_waits(view, b, t, above)) {
				*hold = PRISM_HOLD_FLOW;
				return false;
			}
		}
		if (!depth_room(view, tier, f)) {
			*hold = PRISM_HOLD_DEPTH;
			return false;
		}
		if (!paced_allows(view, tier, f)) {
			if (!inflight_from(view, tier) &&
			    pick_writeback(view, tier, c)) {
				batch_close(b);
				return true;
			}
			*hold = PRISM_HOLD_DEPTH;
			return false;
		}
	}

	c->tier = tier;
	if (b->tier == tier && prism_choose_batch(b, t, view[tier].batch_left, c))
		return true;
	if (batch_waits(view, b, t, tier)) {
		/* Other flows of the tier are queued; its turn is not over. */
		*hold = PRISM_HOLD_FLOW;
		return false;
	}
	c->flow = -1;
	return true;
}

/*
 * Inside the flow c->flow the mechanism chose (its lists in @fv): for a
 * share dispatch, its oldest FIFO head's list, in the flow's own order
 * unless that head has expired; otherwise open a batch there with
 * mq-deadline's rules: reads and sync writes are what someone waits
 * for, so of the two the older head goes first, and background writes
 * only once passed over writes_starved times; from the FIFO head if it
 * has expired, or if the flow's reads are random (@fv->random: arrival
 * order, as none and kyber dispatch them).
 */
void prism_choose_in_flow(const struct prism_tier_view *fv,
			  struct prism_batch *b, const struct prism_tunables *t,
			  unsigned long now, struct prism_choice *c)
{
	bool sync, writes;
	int dir;

	if (c->shared) {
		dir = oldest_dir(fv);
	} else {
		sync = fv->dir[PRISM_READ].queued ||
		       fv->dir[PRISM_SYNC_WRITE].queued;
		writes = fv->dir[PRISM_WRITE].queued;
		if (sync && !(writes && b->starved++ >= t->writes_starved)) {
			dir = oldest_of(fv, SYNC_FIFOS);
		} else {
			dir = PRISM_WRITE;
			b->starved = 0;
		}
	}
	c->dir = dir;
	c->expired = prism_time_after_eq(now, fv->dir[dir].oldest +
					 t->fifo_expire[dir]);
	c->take = prism_take_for(dir, c->expired, fv->random);
	if (c->shared)
		return;
	b->tier = c->tier;
	b->flow = c->flow;
	b->dir = dir;
	b->count = 1;
	b->cost = 0;
}

/* Scheduler tags a tier may hold at once; never zero, so no tier hangs. */
u32 prism_tier_depth(enum prism_tier tier, u32 nr_requests,
		     const struct prism_tunables *t)
{
	u32 pct, depth;

	switch (tier) {
	case PRISM_HIGH:
		return nr_requests;
	case PRISM_NORMAL:
		pct = t->normal_depth;
		break;
	default:
		pct = t->low_depth;
		break;
	}
	depth = (u32)(((u64)nr_requests * pct) / 100);
	return depth ? depth : 1;
}

/*
 * Scheduler tags an allocation for @tier may use, 0 for no limit. A limit
 * only protects a higher tier that is active; without one it would only
 * cost the allocation its batching (a shallow depth turns off the
 * batched tag allocation of plugged I/O) and so CPU for nothing.
 */
u32 prism_alloc_depth(enum prism_tier tier, bool higher_active,
		      u32 nr_requests, const struct prism_tunables *t)
{
	u32 depth;

	if (tier == PRISM_HIGH || !higher_active)
		return 0;
	depth = prism_tier_depth(tier, nr_requests, t);
	return depth < nr_requests ? depth : 0;
}

/*
 * The per-word shallow depth that lets at most @depth of the @sb_depth
 * bits of an sbitmap with 2^@shift bits per word be taken, for kernels
 * whose shallow depth limits each word (6.1). Every word is full but the
 * last, which sbitmap_resize() leaves partial when nr_requests is lowered;
 * a word gives min(its bits, word depth), so the total for a word depth d
 * is (words - 1) * min(2^shift, d) + min(last, d). Returns the largest d
 * whose total is at most @depth; but never 0 (0 means no limit), so when
 * @depth is below the number of words the limit is one bit per word.
 */
u32 prism_word_depth(u32 depth, u32 sb_depth, u32 shift)
{
	u32 bits = 1U << shift;
	u32 words, last, d;

	if (!sb_depth || depth >= sb_depth)
		return bits;
	words = (sb_depth + bits - 1) >> shift;
	last = sb_depth - ((words - 1) << shift);

	/* Every word gives d while d is within the last word's bits... */
	d = depth / words;
	if (d > last)
		d = last;
	/* ...and the full words alone give more beyond it. */
	if (words > 1 && depth > last) {
		u32 beyond = (depth - last) / (words - 1);

		if (beyond > bits)
			beyond = bits;
		if (beyond > d)
			d = beyond;
	}
	return d ? d : 1;
}

void prism_think_sample(struct prism_think *th, u64 now)
{
	u64 think;

	if (!th->last_done)
		return;
	think = now > th->last_done ? now - th->last_done : 0;
	if (think > PRISM_THINK_CAP)
		think = PRISM_THINK_CAP;
	if (th->samples < PRISM_THINK_SAMPLES)
		th->samples++;
	/* The first samples weigh 1/1, 1/2, ...: no bias towards zero. */
	if (think >= th->mean)
		th->mean += (think - th->mean) / th->samples;
	else
		th->mean -= (th->mean - think) / th->samples;
}

/*
 * One gap of a sync-write chain (see prism_chained()): the think time, and
 * whether it ended within @window (0: not known yet, left as it was).
 */
void prism_chain_sample(struct prism_think *th, u64 now, u64 window)
{
	u64 gap;
	u32 hit;

	if (!th->last_done)
		return;
	prism_think_sample(th, now);
	if (!window)
		return;
	gap = now > th->last_done ? now - th->last_done : 0;
	hit = gap <= window ? PRISM_QUICK_ONE : 0;
	/* The same weights as the mean's: 1/1, 1/2, ... then 1/8. */
	if (hit >= th->quick)
		th->quick += (hit - th->quick) / th->samples;
	else
		th->quick -= (th->quick - hit) / th->samples;
}

static void ewma(u64 *mean, u64 sample)
{
	if (sample >= *mean)
		*mean += (sample - *mean) / 8;
	else
		*mean -= (*mean - sample) / 8;
}

/*
 * A running minimum that forgets: a lower sample replaces it at once, a
 * higher one raises it by 1/256 of the difference, so that a device which
 * really became slower is believed after about a thousand samples, while
 * a burst of inflated samples barely moves it.
 */
static void floor_sample(u64 *floor, u32 *samples, u64 sample)
{
	if (!*samples || sample < *floor)
		*floor = sample;
	else
		*floor += (sample - *floor) / 256;
	if (*samples < PRISM_THINK_SAMPLES)
		(*samples)++;
}

/* A weighted mean of @samples so far whose first is taken as it is. */
static void mean_fold(u64 *mean, u32 samples, u64 sample)
{
	if (!samples)
		*mean = sample;
	else
		ewma(mean, sample);
}

/* The same, counting its own samples. */
static void mean_sample(u64 *mean, u32 *samples, u64 sample)
{
	mean_fold(mean, *samples, sample);
	if (*samples < PRISM_THINK_SAMPLES)
		(*samples)++;
}

static u64 div_u64_u64(u64 a, u64 b)
{
#ifdef __KERNEL__
	return div64_u64(a, b);
#else
	return a / b;
#endif
}

void prism_depth_init(struct prism_depth_ctl *d, u32 depth)
{
	*d = (struct prism_depth_ctl){ .limit = depth ? depth : 1,
				       .duty = PRISM_DUTY_FULL };
}

/*
 * How long the device stays free of the tiers below after one of their
 * requests, of @service on an idle device, left it, when they may have
 * one in it @duty percent of the time; at most PRISM_PACED_GAP_MAX.
 */
u64 prism_paced_gap(u64 service, u32 duty)
{
	u64 gap;

	if (!duty || duty >= PRISM_DUTY_FULL)
		return 0;
	gap = div_u64_u64(service * (PRISM_DUTY_FULL - duty), duty);
	return gap < PRISM_PACED_GAP_MAX ? gap : PRISM_PACED_GAP_MAX;
}

/* The earlier of two times, 0 being none. */
static u64 earliest(u64 a, u64 b)
{
	if (!a)
		return b;
	if (!b)
		return a;
	return a < b ? a : b;
}

/*
 * Until when prism_choose()'s @hold lasts unless a completion ends it
 * first (0: only a completion; the mechanism runs the queue at both).
 * @first is the highest tier with requests offered. A rate-capped tier's
 * refill ends its wait whatever else holds. A window hold lasts until the
 * window of the tier held for closes, a flow's until its window does or
 * its wait's cap is reached. A depth hold with nothing of HIGH or NORMAL
 * in the device ends when their activity lapses (PRISM_ACTIVE_NS after
 * now at most: the "recent" guard, the controller's limit), or, paced,
 * when the gap of @first and the tiers below has passed (@e->paced says
 * whether it waits for that gap, for the books).
 */
u64 prism_hold_until(enum prism_hold hold,
		     const struct prism_tier_view view[PRISM_NR_TIERS],
		     const struct prism_flight *f, int first,
		     struct prism_hold_ends *e)
{
	u64 until = e->refill, wait;

	e->paced = false;
	switch (hold) {
	case PRISM_HOLD_WINDOW:
		until = earliest(until, e->window);
		break;
	case PRISM_HOLD_FLOW:
		until = earliest(until, e->flow);
		break;
	case PRISM_HOLD_DEPTH:
		if (!view[PRISM_HIGH].inflight && !view[PRISM_NORMAL].inflight)
			until = earliest(until, e->now + PRISM_ACTIVE_NS);
		wait = f->lower_duty < PRISM_DUTY_FULL && first < PRISM_NR_TIERS ?
		       prism_paced_wait(f, first) : 0;
		if (wait)
			until = earliest(until, e->now + wait);
		e->paced = wait != 0;
		break;
	case PRISM_HOLD_NONE:
		break;
	}
	return until;
}

/*
 * How long @tier and those below still wait, paced, before one of their
 * requests may enter the device again (0: it may now). The gap counts
 * from the last of their requests to leave it.
 */
u64 prism_paced_wait(const struct prism_flight *f, int tier)
{
	u64 gap = prism_paced_gap(f->lower_service, f->lower_duty);
	u64 quiet = ~0ULL;

	if (!gap)
		return 0;
	for (; tier < PRISM_NR_TIERS; tier++)
		if (f->quiet[tier] < quiet)
			quiet = f->quiet[tier];
	return quiet >= gap ? 0 : gap - quiet;
}

void prism_bulk_sample(struct prism_depth_ctl *d, u64 service)
{
	mean_sample(&d->bulk, &d->bulk_samples, service);
}

/*
 * Lift the limit once the higher tiers have been quiet a while: no sample
 * for PRISM_ACTIVE_NS and nothing of theirs in the device. A request
 * still in flight is not quiet: on a queueing disk it may be the one
 * starved behind the bulk work, and lifting the limit then would hand
 * the drive back to the bulk work at the worst moment. Or at once when
 * one tier alone is about (not @contended): there is nothing to limit,
 * and the tiers below come back to a device at full depth, as after a
 * quiet spell.
 */
void prism_depth_idle(struct prism_depth_ctl *d, u64 now, u32 depth,
		      bool higher_inflight, bool contended)
{
	if ((d->limit != depth || d->duty != PRISM_DUTY_FULL) &&
	    (!contended || (!higher_inflight &&
	     (!d->last_sample || now - d->last_sample > PRISM_ACTIVE_NS)))) {
		d->limit = depth ? depth : 1;
		d->duty = PRISM_DUTY_FULL;
	}
}

/* The device time a higher tier's request should keep to; 0: none yet. */
u64 prism_depth_target(const struct prism_depth_ctl *d,
		       const struct prism_tunables *t)
{
	if (t->target)
		return t->target;
	if (d->solo_samples >= PRISM_THINK_MIN)
		return 2 * d->solo;
	if (d->floor_samples >= PRISM_THINK_MIN)
		return 2 * d->floor;
	return 0;
}

/*
 * One higher-tier completion with device time @lat, taken for the device's
 * latency (the target is drawn from it) but not acted on: the mechanism's
 * choice while one tier alone is about, when nothing below could be the
 * cause of a slow completion and a cut would only close the direct lane.
 */
void prism_depth_observe(struct prism_depth_ctl *d, u64 lat, bool solo,
			 u64 now)
{
	if (solo) {
		/* Counted with the minimum's samples: the same ones. */
		mean_fold(&d->solo_mean, d->solo_samples, lat);
		floor_sample(&d->solo, &d->solo_samples, lat);
	} else {
		mean_sample(&d->mixed, &d->mixed_samples, lat);
	}
	floor_sample(&d->floor, &d->floor_samples, lat);
	ewma(&d->lat, lat);
	d->last_sample = now;
}

/*
 * One higher-tier completion with device time @lat; @solo if nothing of a
 * lower tier was in flight when it was dispatched. Additive increase,
 * multiplicative decrease, as TCP's congestion window: the limit settles
 * where the higher tier's requests just keep to the target.
 */
void prism_depth_sample(struct prism_depth_ctl *d,
			const struct prism_tunables *t, u64 lat, bool solo,
			u64 now, u32 depth)
{
	bool probe;
	u64 target;

	if (!depth)
		depth = 1;
	prism_depth_observe(d, lat, solo, now);
	if (d->limit > depth)
		d->limit = depth;

	/* Judged on the interval's worst: the tail is what is protected. */
	if (lat > d->worst)
		d->worst = lat;
	target = prism_depth_target(d, t);
	if (!target)
		return;
	if (d->last_change && now - d->last_change < target)
		return;
	lat = d->worst;
	d->worst = 0;
	/*
	 * Without solo samples the target is drawn from samples taken beside
	 * the bulk work, which may wait as long as each other: a metered
	 * volume whose queue the bulk work keeps full holds every read alike
	 * (120-140 ms on the cloud volume, 1.8 ms alone), twice their floor
	 * is never exceeded, and nothing is ever cut. So until the tier has
	 * been seen alone, a sample beside the bulk work counts as over the
	 * target: the limit halves down to one, then the pacing's gaps give
	 * the solo samples that set the real target. A set target needs no
	 * probe.
	 */
	probe = !t->target && !solo && d->solo_samples < PRISM_THINK_MIN;
	if (lat > target || probe) {
		u32 cut = d->limit / (probe || lat > 2 * target ? 2 : 4);

		if (d->limit > 1) {
			d->limit -= cut ? cut : 1;
			if (!d->limit)
				d->limit = 1;
		} else if (depth > 1) {
			u32 floor = t->share[PRISM_LOW] ? t->share[PRISM_LOW] : 1;

			d->duty = d->duty / 2 > floor ? d->duty / 2 : floor;
		}
		d->cuts++;
		d->last_change = now;
	} else if (d->duty < PRISM_DUTY_FULL) {
		/*
		 * Only on evidence: a sample with lower requests beside it.
		 * Paced, most are solo, from the gaps, and say nothing of
		 * what the next lower request will do.
		 */
		if (solo)
			return;
		d->duty += PRISM_DUTY_STEP;
		if (d->duty > PRISM_DUTY_FULL)
			d->duty = PRISM_DUTY_FULL;
		d->last_change = now;
	} else if (d->limit < depth) {
		d->limit++;
		d->last_change = now;
	}
}

/*
 * Default coefficients. Rotational: a 7200 rpm disk in the band a
 * workload keeps to (150 MB/s streaming; a 4 KiB random I/O about 6.5 ms:
 * a short seek and half a turn; a sequential one 0.2 ms of command
 * overhead plus its transfer), as prism's emulated HDD measures.
 * Otherwise a SATA-class SSD (500 MB/s reads, 400 MB/s writes; 50,000 and
 * 40,000 4 KiB I/Os per second, alike sequential or random). Learning
 * (cost_model=auto) replaces them with the device's own.
 */
void prism_cost_defaults(struct prism_cost_params *p, bool rotational)
{
	int d;

	for (d = 0; d < PRISM_NR_DIRS; d++) {
		if (rotational) {
			p->bps[d] = 150000000ULL;
			p->seqiops[d] = 5000;
			p->randiops[d] = 150;
		} else {
			p->bps[d] = d == PRISM_READ ? 500000000ULL : 400000000ULL;
			p->seqiops[d] = d == PRISM_READ ? 50000 : 40000;
			p->randiops[d] = p->seqiops[d];
		}
	}
}

/*
 * The coefficients in force: each one as set, else as learned (with
 * @use_learned and a learned value), else the media's default.
 */
void prism_cost_effective(struct prism_cost_params *out,
			  const struct prism_cost_params *set,
			  const struct prism_cost_params *learned,
			  bool use_learned, bool rotational)
{
	struct prism_cost_params dfl;
	int d;

	prism_cost_defaults(&dfl, rotational);
	for (d = 0; d < PRISM_NR_DIRS; d++) {
		out->bps[d] = set->bps[d] ? set->bps[d] :
			      use_learned && learned->bps[d] ? learned->bps[d] :
			      dfl.bps[d];
		out->seqiops[d] = set->seqiops[d] ? set->seqiops[d] :
				  use_learned && learned->seqiops[d] ?
				  learned->seqiops[d] : dfl.seqiops[d];
		out->randiops[d] = set->randiops[d] ? set->randiops[d] :
				   use_learned && learned->randiops[d] ?
				   learned->randiops[d] : dfl.randiops[d];
	}
}

#define NSEC_PER_SECOND	1000000000ULL

/* Digest coefficients into what prism_cost() reads. */
void prism_cost_digest(struct prism_cost_model *m,
		       const struct prism_cost_params *p)
{
	int d;

	for (d = 0; d < PRISM_NR_DIRS; d++) {
		u64 bps = p->bps[d] ? p->bps[d] : 1, per_byte;
		u64 page = div_u64_u64(NSEC_PER_SECOND * PRISM_PAGE_BYTES, bps);
		u64 seq = div_u64_u64(NSEC_PER_SECOND,
				      p->seqiops[d] ? p->seqiops[d] : 1);
		u64 rnd = div_u64_u64(NSEC_PER_SECOND,
				      p->randiops[d] ? p->randiops[d] : 1);

		/*
		 * prism_cost() multiplies this by a request's bytes (a u32):
		 * kept within 32 bits, the product never wraps. That floors
		 * the streaming rate at about 239 KiB/s (cost_rkbps and
		 * cost_wkbps accept 1); at 1 KiB/s a request of 17 MiB would
		 * have cost next to nothing.
		 */
		per_byte = div_u64_u64((NSEC_PER_SECOND * PRISM_PAGE_BYTES) << 8,
				       bps);
		m->page_ns[d] = per_byte < U32_MAX ? per_byte : U32_MAX;
		m->seq_base[d] = seq > page ? seq - page : 0;
		m->rand_base[d] = rnd > page ? rnd - page : 0;
	}
}

/*
 * One completed request of @bytes that used @device_ns of the device
 * (prism_learn_busy()) as a point of the fit: @x its size in KiB, @y its
 * time in us, both bounded.
 */
void prism_learn_point(u32 bytes, u64 device_ns, u64 *x, u64 *y)
{
	*x = ((u64)bytes + 1023) / 1024;
	*y = div_u64_u64(device_ns, 1000);
	if (!*x)
		*x = 1;
	if (*x > 4096)
		*x = 4096;
	if (*y > 1000000)
		*y = 1000000;
}

/*
 * Add the sums @b of some points of one kind. The window halves first as
 * often as it must to stay within PRISM_LEARN_DECAY points, so old points
 * fade: the device may change (caches, wear, another tenant).
 */
void prism_learn_add(struct prism_cost_learner *l, int dir, bool seq,
		     const struct prism_learn_sums *b)
{
	struct prism_learn_sums *s = &l->s[dir][seq ? 1 : 0];

	while (s->n && s->n + b->n > PRISM_LEARN_DECAY) {
		s->n /= 2;
		s->x /= 2;
		s->y /= 2;
		s->xx /= 2;
		s->xy /= 2;
	}
	s->n += b->n;
	s->x += b->x;
	s->y += b->y;
	s->xx += b->xx;
	s->xy += b->xy;
	l->samples += b->n;
}

/* One completed request (see prism_learn_point()). */
void prism_learn_sample(struct prism_cost_learner *l, int dir, bool seq,
			u32 bytes, u64 device_ns)
{
	struct prism_learn_sums b = { .n = 1 };

	prism_learn_point(bytes, device_ns, &b.x, &b.y);
	b.xx = b.x * b.x;
	b.xy = b.x * b.y;
	prism_learn_add(l, dir, seq, &b);
}

/*
 * Fit y = a + b x (us, KiB) to one kind's samples. False while there are
 * too few, or their sizes do not vary enough to tell a from b (then b is
 * left as it was and only a is fitted to the mean).
 */
static bool learn_fit(const struct prism_learn_sums *s, u64 prior_b_ps,
		      u64 *a_ps, u64 *b_ps)
{
	/* In ps (1e-12 s) per KiB and ps, to keep precision in integers. */
	s64 sxx, sxy;
	u64 mean_x, mean_y;

	if (s->n < PRISM_LEARN_MIN)
		return false;
	sxx = (s64)(s->n * s->xx - s->x * s->x);
	sxy = (s64)(s->n * s->xy - s->x * s->y);
	/* Sizes vary by at least 4 KiB around their mean: fit the slope. */
	if (sxx > 0 && div_u64_u64(sxx, s->n * s->n) >= 16 && sxy > 0) {
		/* sxy stays below 2^53 (x <= 4096 KiB, y <= 1e6 us). */
		*b_ps = div_u64_u64((u64)sxy * 1000ULL, (u64)sxx) * 1000ULL;
	} else {
		*b_ps = prior_b_ps;
	}
	mean_x = div_u64_u64(s->x * 1000000ULL, s->n);	/* KiB x 1e6 */
	mean_y = div_u64_u64(s->y * 1000000ULL, s->n);	/* ps */
	/* a = mean_y - b * mean_x, never below zero. */
	{
		u64 bx = div_u64_u64(*b_ps * mean_x, 1000000ULL);

		*a_ps = mean_y > bx ? mean_y - bx : 0;
	}
	return true;
}

/*
 * Coefficients from what was learned, each kind that has enough samples
 * replacing @prior's: the streaming rate from the sequential fit's time
 * per byte (else the random one's), the I/Os per second from the time of
 * a 4 KiB I/O of each kind. False if nothing was learned yet.
 */
bool prism_learn_params(const struct prism_cost_learner *l,
			const struct prism_cost_params *prior,
			struct prism_cost_params *out)
{
	bool any = false;
	int d;

	*out = *prior;
	for (d = 0; d < PRISM_NR_DIRS; d++) {
		u64 prior_b = prior->bps[d] ?
			div_u64_u64(1024ULL * 1000000000000ULL, prior->bps[d]) : 0;
		u64 a[2], b[2];
		bool ok[2];
		int k;

		for (k = 0; k < 2; k++)
			ok[k] = learn_fit(&l->s[d][k], prior_b, &a[k], &b[k]);
		/* The slope from the sequential kind, the better streamer. */
		if (ok[1] && b[1] != prior_b && b[1])
			out->bps[d] = div_u64_u64(1024ULL * 1000000000000ULL, b[1]);
		else if (ok[0] && b[0] != prior_b && b[0])
			out->bps[d] = div_u64_u64(1024ULL * 1000000000000ULL, b[0]);
		for (k = 0; k < 2; k++) {
			u64 t4k, iops;

			if (!ok[k])
				continue;
			/* A 4 KiB I/O: a + 4 b, in ps. */
			t4k = a[k] + 4 * b[k];
			iops = t4k ? div_u64_u64(1000000000000ULL, t4k) : 0;
			if (!iops)
				iops = 1;
			if (iops > 10000000)
				iops = 10000000;
			if (k)
				out->seqiops[d] = (u32)iops;
			else
				out->randiops[d] = (u32)iops;
			any = true;
		}
	}
	return any;
}

/*
 * A cap of @kbps KiB per second of streaming reads as device time per
 * second, on a device that streams reads at @bps bytes per second; 0 for
 * no cap.
 */
u64 prism_bucket_rate(u32 kbps, u64 bps)
{
	u64 bytes = (u64)kbps * 1024ULL, rate;

	if (!kbps || !bps)
		return 0;
	/*
	 * bytes x 1e9 wraps above 17 GiB/s (kbps can be up to INT_MAX); such
	 * caps divide bytes x 1e6 (< 2^62) instead, and the rounding costs
	 * under 0.01% of the rate on any device slower than 100 GB/s.
	 */
	if (bytes <= U64_MAX / NSEC_PER_SECOND)
		rate = div_u64_u64(bytes * NSEC_PER_SECOND, bps);
	else
		rate = div_u64_u64(bytes * 1000000ULL, bps) * 1000ULL;
	if (rate > PRISM_BUCKET_RATE_MAX)
		rate = PRISM_BUCKET_RATE_MAX;
	return rate ? rate : 1;
}

/*
 * Fill @bk for the time since it was last filled, in whole microseconds
 * (the remainder waits for the next fill, so nothing is lost), up to the
 * burst. The whole time counts, however long: a request may cost many
 * seconds of a low cap (a slow random read, a large write), and a bucket
 * refilled with less than its time would hold the tier far longer than
 * the cap says (prism_bucket_wait() promises the debt paid on time). A
 * new bucket starts full.
 */
void prism_bucket_fill(struct prism_bucket *bk, u64 rate, u64 burst_ns,
		       u64 now)
{
	/*
	 * At least one token: a burst that rounds to none (a low cap with a
	 * burst of a few microseconds) would never make the bucket ready,
	 * and hold the tier for good. One is enough: a request is sent on
	 * any positive balance and its debt paid at the rate.
	 */
	s64 burst = (s64)div_u64_u64(rate * div_u64_u64(burst_ns, 1000),
				     1000000);
	u64 us, secs, room;

	if (burst < 1)
		burst = 1;
	if (!bk->stamp || now < bk->stamp) {
		bk->tokens = burst;
		bk->stamp = now;
		return;
	}
	us = div_u64_u64(now - bk->stamp, 1000);
	bk->stamp += us * 1000;
	if (bk->tokens >= burst || !rate) {
		/* A burst lowered since the bucket filled applies at once. */
		if (bk->tokens > burst)
			bk->tokens = burst;
		return;
	}
	/* Whole seconds first: rate x secs stays below room + rate. */
	room = (u64)(burst - bk->tokens);
	secs = div_u64_u64(us, 1000000);
	if (secs > div_u64_u64(room, rate)) {
		bk->tokens = burst;
		return;
	}
	/* rate <= 1e12 ns/s and the rest < 1e6 us: the product fits. */
	bk->tokens += (s64)(rate * secs +
			    div_u64_u64(rate * (us - secs * 1000000), 1000000));
	if (bk->tokens > burst)
		bk->tokens = burst;
}

/*
 * ns from @now (when @bk was last filled) until a fill gives it a token
 * again at @rate; 0 if it holds some now. Fills count whole microseconds
 * from the stamp, so the wait ends on one.
 */
u64 prism_bucket_wait(const struct prism_bucket *bk, u64 rate, u64 now)
{
	u64 debt, secs, us, ready;

	if (bk->tokens > 0 || !rate)
		return 0;
	debt = (u64)(-bk->tokens) + 1;
	/* ceil(debt x 1e6 / rate) us, whole seconds first: it cannot wrap. */
	secs = div_u64_u64(debt, rate);
	us = secs * 1000000ULL +
	     div_u64_u64((debt - secs * rate) * 1000000ULL + rate - 1, rate);
	ready = bk->stamp + us * 1000;
	return ready > now ? ready - now : 1000;
}

/*
 * The device idled @ns for a flow's expected next request: that time was
 * the flow's (it held the device), so its virtual time moves as if it had
 * been served that long, and the tier's with it; but by no more than one
 * request of the cost its last one had (est), the device time it would
 * have used had it been ready. Idle time is wall-clock time and cost is
 * the model's estimate, which can be a hundred times shorter (the fixed
 * flash model on a volume metered at 400 IOPS: 20 us against 2.5 ms): a
 * few milliseconds of a reader's think time would otherwise cost it
 * hundreds of requests' worth of its share. Its turn's cost is not
 * touched: the turn bounds how much a stream gets at a time, not how long
 * it may take.
 */
void prism_fq_charge_idle(struct prism_fq *fq, struct prism_fq_flow *f,
			  u64 ns)
{
	u32 wsum = fq->wsum + (f->backlogged ? 0 : f->weight);

	if (f->est && ns > f->est)
		ns = f->est;

	f->start += prism_vt_delta(ns, f->weight);
	fq->vtime += prism_vt_delta(ns, wsum ? wsum : 1);
}

/*
 * Whether an idle flow's slot may be given to another: it owes nothing
 * (its start is not after the tier's virtual time), so forgetting it
 * loses no debt: it would start at the virtual time anyway.
 */
bool prism_fq_reclaimable(const struct prism_fq *fq,
			  const struct prism_fq_flow *f)
{
	return !f->backlogged && !prism_vt_before(fq->vtime, f->start);
}

void prism_fq_pick_init(struct prism_fq_pick *p)
{
	p->best = -1;
	p->low = -1;
	p->best_finish = 0;
	p->best_start = 0;
	p->low_start = 0;
	p->low_finish = 0;
}

void prism_fq_pick_consider(struct prism_fq_pick *p, const struct prism_fq *fq,
			    const struct prism_fq_flow *f, int id)
{
	u64 fin = prism_fq_finish(f);

	if (!prism_vt_before(fq->vtime, f->start)) {
		/* Eligible: the earliest finish, on a tie the earlier start. */
		if (p->best < 0 || prism_vt_before(fin, p->best_finish) ||
		    (fin == p->best_finish &&
		     prism_vt_before(f->start, p->best_start))) {
			p->best = id;
			p->best_finish = fin;
			p->best_start = f->start;
		}
	}
	if (p->low < 0 || prism_vt_before(f->start, p->low_start) ||
	    (f->start == p->low_start && prism_vt_before(fin, p->low_finish))) {
		p->low = id;
		p->low_start = f->start;
		p->low_finish = fin;
	}
}

int prism_fq_pick_done(struct prism_fq_pick *p, struct prism_fq *fq)
{
	if (p->low >= 0 && prism_vt_before(fq->vmin, p->low_start))
		fq->vmin = p->low_start;
	if (p->best >= 0)
		return p->best;
	if (p->low >= 0)
		fq->vtime = p->low_start;	/* V = max(V, min S) */
	return p->low;
}

u64 prism_flow_part(u32 nr_requests, const struct prism_tunables *t)
{
	return prism_flow_part_pct(nr_requests, t->flow_depth);
}

u32 prism_flow_alloc_depth(u64 owned, bool others, u32 nr_requests,
			   const struct prism_tunables *t)
{
	u64 part = prism_flow_part(nr_requests, t);
	u64 depth;

	if (!others || t->flow_depth >= 100 || owned < part)
		return 0;
	depth = 2 * part > owned ? 2 * part - owned : 1;
	return (u32)depth;
}
