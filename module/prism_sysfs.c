// SPDX-License-Identifier: GPL-2.0
/*
 * prism's tunables under /sys/block/<dev>/queue/iosched/: each value is
 * parsed, range-checked and validated on a copy of the tunables, which
 * replaces the old set whole (RCU) only if all is well, so a rejected
 * write returns -EINVAL and changes nothing.
 */
#include "prism.h"

enum prism_attr_id {
	PRISM_ATTR_READ_EXPIRE,
	PRISM_ATTR_WRITE_EXPIRE,
	PRISM_ATTR_WRITES_STARVED,
	PRISM_ATTR_FIFO_BATCH,
	PRISM_ATTR_PRIO_AGING_EXPIRE,
	PRISM_ATTR_BE_TIERS,
	PRISM_ATTR_NORMAL_SHARE,
	PRISM_ATTR_LOW_SHARE,
	PRISM_ATTR_SLICE_IDLE_US,
	PRISM_ATTR_TARGET_LATENCY_US,
	PRISM_ATTR_LOW_RATE_KBPS,
	PRISM_ATTR_WRITEBACK_LOW,
	PRISM_ATTR_BULK_MERGE_KB,
};

/* An hour: longer deadlines mean none; shown values stay within int. */
#define PRISM_MAX_MSECS		3600000

struct prism_attr_range {
	int min;
	int max;
};

/* cost_model: the coefficients as set (or the media's), or learned. */
static const char *const prism_cost_model_name[] = { "fixed", "auto" };

static const struct prism_attr_range prism_attr_ranges[] = {
	[PRISM_ATTR_READ_EXPIRE]	= { 0, PRISM_MAX_MSECS },
	[PRISM_ATTR_WRITE_EXPIRE]	= { 0, PRISM_MAX_MSECS },
	[PRISM_ATTR_WRITES_STARVED]	= { 0, INT_MAX },
	[PRISM_ATTR_FIFO_BATCH]		= { 0, INT_MAX },
	[PRISM_ATTR_PRIO_AGING_EXPIRE]	= { 0, PRISM_MAX_MSECS },
	[PRISM_ATTR_BE_TIERS]		= { 1, 3 },	/* 1 or 3 */
	[PRISM_ATTR_NORMAL_SHARE]	= { 0, PRISM_SHARE_MAX },
	[PRISM_ATTR_LOW_SHARE]		= { 0, PRISM_SHARE_MAX },
	/*
	 * -1: automatic; a window lasts at most the activity clock (no hold
	 * outlasts the tag reserve: PRISM_ACTIVE_NS), a target ten seconds.
	 */
	[PRISM_ATTR_SLICE_IDLE_US]	= { PRISM_AUTO, PRISM_ACTIVE_NS / NSEC_PER_USEC },
	[PRISM_ATTR_TARGET_LATENCY_US]	= { 0, 10 * USEC_PER_SEC },
	[PRISM_ATTR_LOW_RATE_KBPS]	= { 0, INT_MAX },
	[PRISM_ATTR_WRITEBACK_LOW]	= { 0, 1 },
	[PRISM_ATTR_BULK_MERGE_KB]	= { 0, 1 << 20 },
};

/*
 * Where each tunable lives. The jiffies ones are unsigned long, the rest
 * int or u32 of the same width as int; one accessor per kind keeps the
 * show and store paths single.
 */
static unsigned long *prism_attr_jiffies(struct prism_tunables *t,
					 enum prism_attr_id id)
{
	switch (id) {
	case PRISM_ATTR_READ_EXPIRE:
		return &t->fifo_expire[PRISM_READ];
	case PRISM_ATTR_WRITE_EXPIRE:
		return &t->fifo_expire[PRISM_WRITE];
	case PRISM_ATTR_PRIO_AGING_EXPIRE:
		return &t->prio_aging_expire;
	default:
		return NULL;
	}
}

static int prism_attr_get(const struct prism_tunables *t, enum prism_attr_id id)
{
	switch (id) {
	case PRISM_ATTR_READ_EXPIRE:
		return jiffies_to_msecs(t->fifo_expire[PRISM_READ]);
	case PRISM_ATTR_WRITE_EXPIRE:
		return jiffies_to_msecs(t->fifo_expire[PRISM_WRITE]);
	case PRISM_ATTR_PRIO_AGING_EXPIRE:
		return jiffies_to_msecs(t->prio_aging_expire);
	case PRISM_ATTR_WRITES_STARVED:
		return t->writes_starved;
	case PRISM_ATTR_FIFO_BATCH:
		return t->fifo_batch;
	case PRISM_ATTR_BE_TIERS:
		return prism_be_tiers(t);
	case PRISM_ATTR_NORMAL_SHARE:
		return t->share[PRISM_NORMAL];
	case PRISM_ATTR_LOW_SHARE:
		return t->share[PRISM_LOW];
	case PRISM_ATTR_SLICE_IDLE_US:
		if (t->slice_idle == PRISM_AUTO)
			return PRISM_AUTO;
		return div_u64(t->slice_idle, NSEC_PER_USEC);
	case PRISM_ATTR_TARGET_LATENCY_US:
		return div_u64(t->target, NSEC_PER_USEC);
	case PRISM_ATTR_LOW_RATE_KBPS:
		return t->rate_kbps[PRISM_LOW];
	case PRISM_ATTR_WRITEBACK_LOW:
		return t->writeback_low;
	case PRISM_ATTR_BULK_MERGE_KB:
		return t->bulk_merge >> 10;
	}
	return 0;
}

static ssize_t prism_attr_show(struct elevator_queue *e, char *page,
			       enum prism_attr_id id)
{
	struct prism_data *pd = e->elevator_data;
	int val;

	spin_lock(&pd->lock);
	val = prism_attr_get(prism_tun(pd), id);
	spin_unlock(&pd->lock);
	return sysfs_emit(page, "%d\n", val);
}

/*
 * Publish @t, a valid changed copy of the tunables, in @new, under the
 * lock, with what is derived from it; returns the set it replaces, for
 * kfree_rcu() once the lock is dropped.
 */
static struct prism_tun_rcu *prism_tun_publish(struct prism_data *pd,
					       struct prism_tun_rcu *new,
					       const struct prism_tunables *t)
{
	struct prism_tun_rcu *old;

	new->t = *t;
	old = rcu_replace_pointer(pd->tun, new, lockdep_is_held(&pd->lock));
	WRITE_ONCE(pd->flow_frac, prism_flow_frac(t->flow_depth));
	WRITE_ONCE(pd->writeback_low, t->writeback_low);
	pd->rate_capped = t->rate_kbps[PRISM_HIGH] ||
			  t->rate_kbps[PRISM_NORMAL] || t->rate_kbps[PRISM_LOW];
	/*
	 * The next dispatch recomputes lane_off; none takes the lane till.
	 * What is on the lane joins its flows now: dispatch serves the lane
	 * without asking the caps, so a rate cap set here would otherwise
	 * let up to a device's depth of requests past it, uncharged (found
	 * in review; no test produces it: the lane admits only what the
	 * device takes at once, so a request stays on it for microseconds).
	 */
	prism_lane_close(pd);
	pd->lane_checked = jiffies - 1;
	prism_model_update(pd);
	/*
	 * A cap or a hold lifted or loosened (or a cost changed under one)
	 * must free what it holds now, not when its timer fires: while the
	 * queue is parked, has_work() says there is no work, and nothing
	 * else would run the queue.
	 */
	prism_unpark(pd);
	return old;
}

/*
 * Parse, range-check and validate on a copy; commit only if all is well,
 * so a rejected write (-EINVAL) leaves every tunable as it was.
 */
static ssize_t prism_attr_store(struct elevator_queue *e, const char *page,
				size_t count, enum prism_attr_id id)
{
	const struct prism_attr_range *r = &prism_attr_ranges[id];
	struct prism_data *pd = e->elevator_data;
	struct prism_tun_rcu *new, *old;
	struct prism_tunables t;
	unsigned long *jp;
	int val, ret;

	ret = kstrtoint(page, 0, &val);
	if (ret < 0)
		return -EINVAL;
	if (val < r->min || val > r->max)
		return -EINVAL;
	if (id == PRISM_ATTR_BE_TIERS && val == 2)
		return -EINVAL;
	new = kzalloc_obj(*new, GFP_KERNEL);
	if (!new)
		return -ENOMEM;

	spin_lock(&pd->lock);
	t = *prism_tun(pd);
	jp = prism_attr_jiffies(&t, id);
	if (jp) {
		*jp = msecs_to_jiffies(val);
		/* Someone waits for a sync write as for a read. */
		if (id == PRISM_ATTR_READ_EXPIRE)
			t.fifo_expire[PRISM_SYNC_WRITE] = *jp;
	} else {
		switch (id) {
		case PRISM_ATTR_WRITES_STARVED:
			t.writes_starved = val;
			break;
		case PRISM_ATTR_FIFO_BATCH:
			t.fifo_batch = val;
			break;
		case PRISM_ATTR_BE_TIERS:
			prism_set_be_tiers(&t, val);
			break;
		case PRISM_ATTR_NORMAL_SHARE:
			t.share[PRISM_NORMAL] = val;
			break;
		case PRISM_ATTR_LOW_SHARE:
			t.share[PRISM_LOW] = val;
			break;
		case PRISM_ATTR_SLICE_IDLE_US:
			t.slice_idle = val == PRISM_AUTO ? PRISM_AUTO :
				       (s64)val * NSEC_PER_USEC;
			break;
		case PRISM_ATTR_TARGET_LATENCY_US:
			t.target = (u64)val * NSEC_PER_USEC;
			break;
		case PRISM_ATTR_LOW_RATE_KBPS:
			t.rate_kbps[PRISM_LOW] = val;
			break;
		case PRISM_ATTR_WRITEBACK_LOW:
			t.writeback_low = val;
			break;
		case PRISM_ATTR_BULK_MERGE_KB:
			t.bulk_merge = (u32)val << 10;
			break;
		default:
			break;
		}
	}
	if (!prism_tunables_valid(&t)) {
		spin_unlock(&pd->lock);
		kfree(new);
		return -EINVAL;
	}
	old = prism_tun_publish(pd, new, &t);
	spin_unlock(&pd->lock);
	kfree_rcu(old, rcu);
	blk_mq_run_hw_queues(pd->q, true);
	return count;
}

/*
 * cost_model: the cost model as one value set, in the shape of iocost's
 * io.cost.model: "fixed" or "auto" (learn the coefficients left at 0 from
 * completion times), then rbps, rseqiops, rrandiops, wbps, wseqiops and
 * wrandiops (bytes per second streaming; 4 KiB I/Os per second,
 * sequential and random), 0 meaning the media's default. A write names
 * the mode, any of the keys, or both; what it does not name keeps its
 * value. v2 had a file per coefficient (cost_rkbps, in KiB/s, ...).
 */
static const char *const prism_cost_keys[] = {
	"rbps", "rseqiops", "rrandiops", "wbps", "wseqiops", "wrandiops",
};

#define PRISM_COST_KEYS		ARRAY_SIZE(prism_cost_keys)
#define PRISM_COST_BPS_MAX	((u64)INT_MAX << 10)
#define PRISM_COST_IOPS_MAX	10000000ULL

struct prism_cost_write {
	int mode;		/* in prism_cost_model_name, -1: unchanged */
	u32 set;		/* the keys given, by bit */
	u64 val[PRISM_COST_KEYS];
};

/* Parse @buf (modified) into @w: 0, or -EINVAL for anything amiss. */
static int prism_cost_parse(char *buf, struct prism_cost_write *w)
{
	char *tok, *eq;
	u64 v;
	int i;

	w->mode = -1;
	w->set = 0;
	while ((tok = strsep(&buf, " \t\n"))) {
		if (!*tok)
			continue;
		eq = strchr(tok, '=');
		if (!eq) {
			i = match_string(prism_cost_model_name,
					 ARRAY_SIZE(prism_cost_model_name), tok);
			if (i < 0 || w->mode >= 0)
				return -EINVAL;
			w->mode = i;
			continue;
		}
		*eq = '\0';
		i = match_string(prism_cost_keys, PRISM_COST_KEYS, tok);
		if (i < 0 || (w->set & BIT(i)) || kstrtou64(eq + 1, 10, &v))
			return -EINVAL;
		if (v > (i % 3 ? PRISM_COST_IOPS_MAX : PRISM_COST_BPS_MAX))
			return -EINVAL;
		w->set |= BIT(i);
		w->val[i] = v;
	}
	return w->mode < 0 && !w->set ? -EINVAL : 0;
}

static ssize_t prism_cost_model_show(struct elevator_queue *e, char *page)
{
	struct prism_data *pd = e->elevator_data;
	struct prism_cost_params c;
	bool learn;

	spin_lock(&pd->lock);
	c = prism_tun(pd)->cost;
	learn = prism_tun(pd)->cost_auto;
	spin_unlock(&pd->lock);
	return sysfs_emit(page, "%s rbps=%llu rseqiops=%u rrandiops=%u wbps=%llu wseqiops=%u wrandiops=%u\n",
			  prism_cost_model_name[learn], c.bps[PRISM_READ],
			  c.seqiops[PRISM_READ], c.randiops[PRISM_READ],
			  c.bps[PRISM_WRITE], c.seqiops[PRISM_WRITE],
			  c.randiops[PRISM_WRITE]);
}

static ssize_t prism_cost_model_store(struct elevator_queue *e,
				      const char *page, size_t count)
{
	struct prism_data *pd = e->elevator_data;
	struct prism_tun_rcu *new, *old;
	struct prism_cost_write w;
	struct prism_tunables t;
	char *buf;
	int ret, i;

	buf = kstrndup(page, count, GFP_KERNEL);
	if (!buf)
		return -ENOMEM;
	ret = prism_cost_parse(buf, &w);
	kfree(buf);
	if (ret)
		return ret;
	new = kzalloc_obj(*new, GFP_KERNEL);
	if (!new)
		return -ENOMEM;

	spin_lock(&pd->lock);
	t = *prism_tun(pd);
	if (w.mode >= 0)
		t.cost_auto = w.mode;
	for (i = 0; i < PRISM_COST_KEYS; i++) {
		int dir = i < 3 ? PRISM_READ : PRISM_WRITE;

		if (!(w.set & BIT(i)))
			continue;
		if (i % 3 == 0)
			t.cost.bps[dir] = w.val[i];
		else if (i % 3 == 1)
			t.cost.seqiops[dir] = w.val[i];
		else
			t.cost.randiops[dir] = w.val[i];
	}
	if (!prism_tunables_valid(&t)) {
		spin_unlock(&pd->lock);
		kfree(new);
		return -EINVAL;
	}
	old = prism_tun_publish(pd, new, &t);
	spin_unlock(&pd->lock);
	kfree_rcu(old, rcu);
	blk_mq_run_hw_queues(pd->q, true);
	return count;
}

#define PRISM_ATTR(name, id)						\
static ssize_t prism_##name##_show(struct elevator_queue *e, char *page) \
{									\
	return prism_attr_show(e, page, id);				\
}									\
static ssize_t prism_##name##_store(struct elevator_queue *e,		\
				    const char *page, size_t count)	\
{									\
	return prism_attr_store(e, page, count, id);			\
}

PRISM_ATTR(read_expire, PRISM_ATTR_READ_EXPIRE)
PRISM_ATTR(write_expire, PRISM_ATTR_WRITE_EXPIRE)
PRISM_ATTR(writes_starved, PRISM_ATTR_WRITES_STARVED)
PRISM_ATTR(fifo_batch, PRISM_ATTR_FIFO_BATCH)
PRISM_ATTR(prio_aging_expire, PRISM_ATTR_PRIO_AGING_EXPIRE)
PRISM_ATTR(be_tiers, PRISM_ATTR_BE_TIERS)
PRISM_ATTR(normal_share, PRISM_ATTR_NORMAL_SHARE)
PRISM_ATTR(low_share, PRISM_ATTR_LOW_SHARE)
PRISM_ATTR(slice_idle_us, PRISM_ATTR_SLICE_IDLE_US)
PRISM_ATTR(target_latency_us, PRISM_ATTR_TARGET_LATENCY_US)
PRISM_ATTR(low_rate_kbps, PRISM_ATTR_LOW_RATE_KBPS)
PRISM_ATTR(bulk_merge_kb, PRISM_ATTR_BULK_MERGE_KB)
PRISM_ATTR(writeback_low, PRISM_ATTR_WRITEBACK_LOW)

#define PRISM_ATTR_ENTRY(name) \
	__ATTR(name, 0644, prism_##name##_show, prism_##name##_store)

struct elv_fs_entry prism_attrs[] = {
	PRISM_ATTR_ENTRY(read_expire),
	PRISM_ATTR_ENTRY(write_expire),
	PRISM_ATTR_ENTRY(writes_starved),
	PRISM_ATTR_ENTRY(fifo_batch),
	PRISM_ATTR_ENTRY(prio_aging_expire),
	PRISM_ATTR_ENTRY(be_tiers),
	PRISM_ATTR_ENTRY(normal_share),
	PRISM_ATTR_ENTRY(low_share),
	PRISM_ATTR_ENTRY(slice_idle_us),
	PRISM_ATTR_ENTRY(target_latency_us),
	PRISM_ATTR_ENTRY(cost_model),
	PRISM_ATTR_ENTRY(low_rate_kbps),
	PRISM_ATTR_ENTRY(bulk_merge_kb),
	PRISM_ATTR_ENTRY(writeback_low),
	__ATTR_NULL
};

