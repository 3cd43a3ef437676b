// SPDX-License-Identifier: GPL-2.0
/*
 * prism scheduling policy; see prism_policy.h for the split between policy
 * and mechanism. Builds in the kernel module and in userspace tests.
 */
#include "prism_policy.h"

void prism_tunables_init(struct prism_tunables *t, unsigned int hz)
{
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
	/* Seed 000's mapping: BE 0-2 HIGH, 3-5 NORMAL, 6-7 LOW. */
	t->be_high_max = 2;
	t->be_low_min = 6;
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
	t->anticipate = PRISM_AUTO;
	t->target = 0;
}

bool prism_tunables_valid(const struct prism_tunables *t)
{
	/* The two BE cut-offs may not cross: a level is in exactly one tier. */
	return t->be_high_max >= -1 && t->be_high_max < t->be_low_min &&
	       t->be_low_min <= 8 && t->share[PRISM_NORMAL] <= PRISM_SHARE_MAX &&
	       t->share[PRISM_LOW] <= PRISM_SHARE_MAX &&
	       t->anticipate >= PRISM_AUTO;
}

void prism_batch_reset(struct prism_batch *b)
{
	int tier;

	b->tier = -1;
	b->dir = PRISM_READ;
	b->count = 0;
	b->starved = 0;
	for (tier = 0; tier < PRISM_NR_TIERS; tier++)
		b->credit[tier] = 0;
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

/*
 * How to take from FIFO list @dir: next in sort order, unless the head has
 * expired; sync writes always in arrival order, since they are few, small
 * and each the link of a chain someone waits on, and the sort tree holds
 * background writes too.
 */
static enum prism_take take_for(int dir, bool expired)
{
	return expired || dir == PRISM_SYNC_WRITE ? PRISM_TAKE_FIFO :
						    PRISM_TAKE_NEXT;
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
 * Whether one more request of @tier, below an active tier, may enter the
 * device: not while the device is full (a request handed out then waits
 * for a driver tag, where a higher tier's next request could not pass
 * it; requests that bypass the scheduler, such as flushes, count), nor
 * while @tier and those below already hold lower_limit.
 */
static bool depth_allows(const struct prism_tier_view view[PRISM_NR_TIERS],
			 int tier, const struct prism_flight *f)
{
	return inflight_from(view, 0) + f->foreign < f->depth &&
	       inflight_from(view, tier) < f->lower_limit;
}

/*
 * Shares: a tier below @first that is owed a dispatch (its credit has
 * reached 100 - share), the lowest first since it has the least. Served
 * in its own order, from the FIFO head only if that has expired, so a
 * sequential stream stays sequential.
 */
static bool pick_share(const struct prism_tier_view view[PRISM_NR_TIERS],
		       int first, const struct prism_batch *b,
		       const struct prism_tunables *t,
		       const struct prism_flight *f, unsigned long now,
		       struct prism_choice *c)
{
	int tier;

	for (tier = PRISM_NR_TIERS - 1; tier > first; tier--) {
		u32 share = t->share[tier];

		if (!share || !tier_queued(&view[tier]) ||
		    b->credit[tier] < PRISM_SHARE_UNIT - share ||
		    !depth_allows(view, tier, f))
			continue;
		c->tier = tier;
		c->dir = oldest_dir(&view[tier]);
		c->expired = prism_time_after_eq(now,
						 view[tier].dir[c->dir].oldest +
						 t->fifo_expire[c->dir]);
		c->take = take_for(c->dir, c->expired);
		c->shared = true;
		return true;
	}
	return false;
}

/*
 * Keep the share credits after a choice: a waiting tier below the one
 * served earns its share; a tier served by its share pays for the
 * dispatch; one served in its own right, or with nothing queued, starts
 * again from zero, so no tier banks credit while it is idle or first.
 */
static void account_shares(const struct prism_tier_view view[PRISM_NR_TIERS],
			   struct prism_batch *b,
			   const struct prism_tunables *t,
			   const struct prism_choice *c)
{
	int tier;

	for (tier = 0; tier < PRISM_NR_TIERS; tier++) {
		if (!tier_queued(&view[tier]))
			b->credit[tier] = 0;
		else if (tier > c->tier)
			b->credit[tier] += t->share[tier];
		else if (tier == c->tier && c->shared)
			b->credit[tier] -= PRISM_SHARE_UNIT - t->share[tier];
		else if (tier == c->tier)
			b->credit[tier] = 0;
	}
}

/* A tier that holds the device for the tiers below it. */
static bool tier_active(const struct prism_tier_view *v)
{
	return tier_queued(v) || v->inflight || v->anticipated || v->flushing;
}

/*
 * Choose the tier, direction and request to dispatch next. Returns false
 * when nothing may be dispatched; *hold then says whether requests are
 * held back, and why. Order: aged lower-tier requests, then a lower tier
 * owed its share, then the highest non-empty tier; inside a tier,
 * mq-deadline's rules: continue the current batch in sort order up to
 * fifo_batch, otherwise start a new one, preferring reads and sync writes
 * (whichever head is older) unless background writes have been passed
 * over writes_starved times, and starting from the FIFO head when it has
 * expired.
 *
 * A tier above the highest non-empty one may still be active: requests
 * in flight, or anticipated (its next link is due within the window).
 * Below an anticipated tier nothing is dispatched in its own right; below
 * one in flight only within the device's depth and lower_limit. Shares
 * pass the window, since a share is what bounds the wait of the tiers
 * below, but not the depth; aging passes both.
 */
bool prism_choose(const struct prism_tier_view view[PRISM_NR_TIERS],
		  struct prism_batch *b, const struct prism_tunables *t,
		  const struct prism_flight *f, unsigned long now,
		  struct prism_choice *c, enum prism_hold *hold)
{
	const struct prism_tier_view *v;
	int tier, guard, dir;
	bool sync, writes;

	*hold = PRISM_HOLD_NONE;
	for (guard = 0; guard < PRISM_NR_TIERS; guard++)
		if (tier_active(&view[guard]))
			break;
	for (tier = guard; tier < PRISM_NR_TIERS; tier++)
		if (tier_queued(&view[tier]))
			break;
	if (tier == PRISM_NR_TIERS)
		return false;

	c->aged = false;
	c->shared = false;
	c->expired = false;

	if (pick_aged(view, guard, t, now, c) ||
	    pick_share(view, guard, b, t, f, now, c)) {
		/* One request out of turn; then arbitrate afresh. */
		account_shares(view, b, t, c);
		b->tier = -1;
		b->count = 0;
		return true;
	}

	if (guard < tier) {
		int above;

		for (above = guard; above < tier; above++) {
			if (view[above].anticipated) {
				*hold = PRISM_HOLD_WINDOW;
				return false;
			}
		}
		if (!depth_allows(view, tier, f)) {
			*hold = PRISM_HOLD_DEPTH;
			return false;
		}
	}

	v = &view[tier];
	c->tier = tier;

	if (b->tier == tier && b->count < t->fifo_batch &&
	    v->dir[b->dir].queued) {
		c->dir = b->dir;
		c->take = take_for(b->dir, false);
		b->count++;
		account_shares(view, b, t, c);
		return true;
	}

	/*
	 * Reads and sync writes are what someone waits for: of the two the
	 * older head goes first, and background writes only once passed
	 * over writes_starved times.
	 */
	sync = v->dir[PRISM_READ].queued || v->dir[PRISM_SYNC_WRITE].queued;
	writes = v->dir[PRISM_WRITE].queued;
	if (sync && !(writes && b->starved++ >= t->writes_starved)) {
		dir = oldest_of(v, SYNC_FIFOS);
	} else {
		dir = PRISM_WRITE;
		b->starved = 0;
	}

	c->dir = dir;
	c->expired = prism_time_after_eq(now, v->dir[dir].oldest +
					 t->fifo_expire[dir]);
	c->take = take_for(dir, c->expired);
	b->tier = tier;
	b->dir = dir;
	b->count = 1;
	account_shares(view, b, t, c);
	return true;
}

/*
 * After a dispatch in sector order: a request from a random stream ends
 * the batch, since the next request in sort order is a seek anyway and
 * the FIFO deadlines should be looked at again; a sequential stream keeps
 * its batch so that a disk can stream it.
 */
void prism_note_dispatch(struct prism_batch *b, const struct prism_tunables *t,
			 bool sorted, bool sequential)
{
	if (sorted && !sequential && b->count < t->fifo_batch)
		b->count = t->fifo_batch;
}

u32 prism_stream_slot(u32 id)
{
	/* Fibonacci hashing, as the kernel's hash_32(). */
	return (u32)(id * 0x61C88647U) >> (32 - PRISM_STREAM_BITS);
}

/*
 * Feed one request of stream @id into its slot @s; returns whether the
 * stream now counts as sequential. A slot taken by another stream is
 * reset: the table is a small direct-mapped cache, not a registry.
 */
bool prism_stream_update(struct prism_stream *s, u32 id, u64 pos, u32 sectors,
			 u32 seq_gap)
{
	u64 gap;

	if (s->id != id) {
		s->id = id;
		s->score = 0;
		s->last_end = pos + sectors;
		return false;
	}

	gap = pos >= s->last_end ? pos - s->last_end : s->last_end - pos;
	if (gap <= seq_gap) {
		if (s->score < PRISM_SEQ_SCORE_MAX)
			s->score++;
	} else {
		/* Fall faster than rising: one seek costs more than a hit. */
		s->score = s->score >= 2 ? s->score - 2 : 0;
	}
	s->last_end = pos + sectors;
	return s->score >= PRISM_SEQ_THRESHOLD;
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

bool prism_sorted(enum prism_sort_mode mode, bool rotational)
{
	switch (mode) {
	case PRISM_SORT_SECTOR:
		return true;
	case PRISM_SORT_FIFO:
		return false;
	case PRISM_SORT_AUTO:
	default:
		return rotational;
	}
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

/* A weighted mean whose first sample is taken as it is. */
static void mean_sample(u64 *mean, u32 *samples, u64 sample)
{
	if (!*samples)
		*mean = sample;
	else
		ewma(mean, sample);
	if (*samples < PRISM_THINK_SAMPLES)
		(*samples)++;
}

void prism_depth_init(struct prism_depth_ctl *d, u32 depth)
{
	*d = (struct prism_depth_ctl){ .limit = depth ? depth : 1 };
}

void prism_bulk_sample(struct prism_depth_ctl *d, u64 service)
{
	mean_sample(&d->bulk, &d->bulk_samples, service);
}

/* Lift the limit once the higher tiers have been quiet a while. */
void prism_depth_idle(struct prism_depth_ctl *d, u64 now, u32 depth)
{
	if (d->limit != depth &&
	    (!d->last_sample || now - d->last_sample > PRISM_DEPTH_QUIET))
		d->limit = depth ? depth : 1;
}

/* The device time a higher tier's request should keep to; 0: none yet. */
u64 prism_depth_target(const struct prism_depth_ctl *d,
		       const struct prism_tunables *t)
{
	if (t->target)
		return t->target;
	if (d->solo_samples < PRISM_THINK_MIN)
		return 0;
	return 2 * d->solo;
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
	u64 target;

	if (!depth)
		depth = 1;
	if (solo)
		floor_sample(&d->solo, &d->solo_samples, lat);
	ewma(&d->lat, lat);
	d->last_sample = now;
	if (d->limit > depth)
		d->limit = depth;

	target = prism_depth_target(d, t);
	if (!target)
		return;
	if (lat > target) {
		if (d->last_cut && now - d->last_cut < target)
			return;
		d->last_cut = now;
		d->cuts++;
		d->limit -= d->limit >= 4 ? d->limit / 4 : 1;
		if (!d->limit)
			d->limit = 1;
	} else if (d->limit < depth) {
		d->limit++;
	}
}

/*
 * The anticipation window: the tunable, or automatically the service time
 * of a LOW request on an idle device, within 0.5-20 ms. That is the break
 * even: waiting W for the next link costs the tiers below at most W of
 * device time, while not waiting costs the link one LOW request's
 * service. Before any measurement bfq's slice_idle (8 ms) on rotational
 * media and 1 ms on flash.
 */
u64 prism_window(const struct prism_depth_ctl *d,
		 const struct prism_tunables *t, bool rotational)
{
	u64 w;

	if (t->anticipate != PRISM_AUTO)
		return (u64)t->anticipate;
	if (d->bulk_samples < PRISM_THINK_MIN)
		return rotational ? 8000000ULL : 1000000ULL;
	w = d->bulk;
	if (w < PRISM_WINDOW_MIN)
		w = PRISM_WINDOW_MIN;
	if (w > PRISM_WINDOW_MAX)
		w = PRISM_WINDOW_MAX;
	return w;
}
