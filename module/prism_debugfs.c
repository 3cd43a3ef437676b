// SPDX-License-Identifier: GPL-2.0
/*
 * What prism shows under /sys/kernel/debug/block/<dev>/sched/: its books
 * per tier, the batch, flows, the cost model and the in-flight control,
 * and the latency histograms. Each file is read under prism's lock;
 * "cgroups" (prism_cgroup.c) under the queue's queue_lock.
 */
#include <linux/uaccess.h>

#include "prism.h"

static int prism_tiers_show(void *data, struct seq_file *m)
{
	struct request_queue *q = data;
	struct prism_data *pd = q->elevator->elevator_data;
	int t;

	/*
	 * completed: every finished request, dispatched or merged away, so
	 * that inserted == completed on an idle queue; owned: see
	 * prism_owned(); max_owned its high-water mark, which the tag reserve
	 * bounds; foreign: inserted without being prepared; throttled:
	 * dispatches that found its rate cap's bucket empty; direct: of the
	 * dispatched, those from the direct lane (prism_lane_allows());
	 * passthrough: inserted passthrough requests (prism_rq_passthrough()).
	 */
	seq_puts(m, "tier queued inserted requeued dispatched merged aged shared expired completed inflight owned max_owned foreign throttled direct passthrough\n");
	spin_lock(&pd->lock);
	for (t = 0; t < PRISM_NR_TIERS; t++) {
		struct prism_tier_queue *tq = &pd->tier[t];
		s64 completed = atomic64_read(&tq->completed) +
				atomic64_read(&tq->merged_away);

		seq_printf(m, "%s %u %llu %llu %llu %llu %llu %llu %llu %lld %llu %llu %llu %llu %llu %llu %llu\n",
			   prism_tier_name[t],
			   tq_queued(tq) + tq->queued_head +
			   (pd->direct_tier == t ? pd->nr_direct : 0),
			   tq->inserted, tq->requeued, tq->dispatched,
			   tq->merged, tq->aged, tq->shared, tq->expired,
			   completed, prism_inflight(tq), prism_owned(tq),
			   tq->max_owned,
			   tq->foreign, tq->throttled, tq->direct,
			   tq->passthrough);
	}
	spin_unlock(&pd->lock);
	return 0;
}

static int prism_batch_show(void *data, struct seq_file *m)
{
	struct request_queue *q = data;
	struct prism_data *pd = q->elevator->elevator_data;
	struct prism_batch b;
	sector_t head;
	u32 fifo_batch, lane;
	u64 spills;
	bool sorted, lane_off;

	spin_lock(&pd->lock);
	b = pd->batch;
	lane = pd->nr_direct;
	lane_off = pd->lane_off;
	spills = pd->lane_spills;
	head = pd->head_pos;
	sorted = pd->sorted;
	fifo_batch = prism_tun(pd)->fifo_batch;
	spin_unlock(&pd->lock);

	/* Credits in percent of a microsecond of device time. */
	seq_printf(m, "tier=%s flow=%d dir=%s count=%u cost_us=%llu fifo_batch=%u starved=%u order=%s head=%llu credit_normal=%lld credit_low=%lld lane=%s lane_queued=%u lane_spills=%llu\n",
		   b.tier >= 0 ? prism_tier_name[b.tier] : "none", b.flow,
		   prism_fifo_name[b.dir], b.count,
		   div_u64(b.cost, NSEC_PER_USEC), fifo_batch,
		   b.starved, sorted ? "sector" : "fifo",
		   (unsigned long long)head,
		   div_s64(b.credit[PRISM_NORMAL], NSEC_PER_USEC),
		   div_s64(b.credit[PRISM_LOW], NSEC_PER_USEC),
		   lane_off ? "off" : "open", lane, spills);
	return 0;
}

/* Each live flow's sequential detector, as "streams" showed per thread. */
static int prism_streams_show(void *data, struct seq_file *m)
{
	struct request_queue *q = data;
	struct prism_data *pd = q->elevator->elevator_data;
	int i;

	seq_puts(m, "pid score sequential\n");
	spin_lock(&pd->lock);
	for (i = 0; i < PRISM_NR_FLOWS; i++) {
		const struct prism_flow *fl = &pd->flows[i];

		if (fl->key)
			seq_printf(m, "%u %u %d\n", fl->id, fl->stream.score,
				   fl->stream.score >= PRISM_SEQ_THRESHOLD);
	}
	spin_unlock(&pd->lock);
	return 0;
}

/*
 * Flows: one line per live flow (and per shared flow that took any
 * request): the process and its command, tier, weight, how far its
 * virtual start is ahead of its fair queue's virtual time (vt_lead, in ns
 * of service at weight 25: what it has taken beyond its share), the cost
 * (us) and bytes served, requests dispatched, queued, owned, tag
 * allocations its flow limit shallowed, its think time, and its group's
 * cgroup (cgroup_id(), 0 for the tier's own flows: the "cgroups" file has
 * the paths). Then the fair queues (vmin: the floor's reference, see
 * prism_fq_floor()), the groups' and the table's overflows. A command may hold spaces (prctl(PR_SET_NAME)): they and
 * backslashes are written as octal escapes (\040, \134), so every line
 * splits on white space.
 */
static int prism_flows_show(void *data, struct seq_file *m)
{
	struct request_queue *q = data;
	struct prism_data *pd = q->elevator->elevator_data;
	int i;

	seq_puts(m, "slot pid comm tier weight backlogged vt_lead cost_us bytes dispatched queued owned throttled think_us cgroup\n");
	spin_lock(&pd->lock);
	for (i = 0; i < PRISM_FLOW_SLOTS; i++) {
		struct prism_flow *fl = &pd->flows[i];
		s64 lead = (s64)(fl->fq.start - prism_flow_fq(pd, fl)->vtime);

		if (!fl->key && !fl->inserted)
			continue;
		seq_printf(m, "%d %u ", i, fl->id);
		seq_escape(m, fl->comm, " \t\n\\");
		seq_printf(m, " %s %u %d %lld %llu %llu %llu %u %llu %lld %llu %llu\n",
			   prism_tier_name[fl->tier],
			   fl->fq.weight, fl->fq.backlogged,
			   div_s64(lead * PRISM_WEIGHT_UNIT, PRISM_VT_SCALE),
			   div_u64(fl->cost, NSEC_PER_USEC), fl->bytes,
			   fl->dispatched, prism_flow_queued(fl),
			   prism_flow_owned(fl), atomic64_read(&fl->throttled),
			   div_u64(fl->think.mean, NSEC_PER_USEC),
			   fl->key && fl->group ? fl->group->id : 0);
	}
	for (i = 0; i < PRISM_NR_TIERS; i++)
		seq_printf(m, "fq %s vtime=%llu vmin=%llu wsum=%u backlogged=%u\n",
			   prism_tier_name[i], pd->tier[i].fq.vtime,
			   pd->tier[i].fq.vmin, pd->tier[i].fq.wsum,
			   pd->tier[i].fq.nr);
	for (i = 0; i < PRISM_NR_GROUPS; i++) {
		const struct prism_group *g = &pd->groups[i];

		if (!g->id)
			continue;
		seq_printf(m, "group %llu %s weight=%u backlogged=%d flows=%u vtime=%llu vmin=%llu wsum=%u\n",
			   g->id, prism_tier_name[g->tier], g->ent.weight,
			   g->ent.backlogged, g->nr_flows, g->fq.vtime,
			   g->fq.vmin, g->fq.wsum);
	}
	seq_printf(m, "group_overflows=%llu\n", pd->group_overflows);
	seq_printf(m, "overflows=%llu\n", pd->flow_overflows);
	seq_printf(m, "flow_starts=%llu\n", pd->flow_starts);
	seq_printf(m, "raised=%llu\n", pd->flows_raised);
	spin_unlock(&pd->lock);
	return 0;
}

/*
 * The cost model in force: coefficients, and a 4 KiB and 1 MiB read's
 * cost; then the learner: whether its fit is in force (cost_model=auto),
 * the points of each kind in its window, and the coefficients fitted.
 */
static int prism_cost_show(void *data, struct seq_file *m)
{
	struct request_queue *q = data;
	struct prism_data *pd = q->elevator->elevator_data;
	struct prism_cost_params p, l;
	struct prism_cost_learner lr;
	struct prism_cost_model mod;
	bool learning, any;

	spin_lock(&pd->lock);
	p = pd->cost_params;
	mod = pd->model;
	l = pd->learned;
	lr = pd->learner;
	any = pd->learned_any;
	learning = prism_tun(pd)->cost_auto;
	spin_unlock(&pd->lock);
	seq_printf(m, "model=%s rbps=%llu rseqiops=%u rrandiops=%u wbps=%llu wseqiops=%u wrandiops=%u\n",
		   pd->rotational ? "rotational" : "flash",
		   p.bps[PRISM_READ], p.seqiops[PRISM_READ],
		   p.randiops[PRISM_READ], p.bps[PRISM_WRITE],
		   p.seqiops[PRISM_WRITE], p.randiops[PRISM_WRITE]);
	seq_printf(m, "cost_ns read_4k_rand=%llu read_4k_seq=%llu read_1m_seq=%llu write_4k_rand=%llu\n",
		   prism_cost(&mod, PRISM_READ, 4096, false),
		   prism_cost(&mod, PRISM_READ, 4096, true),
		   prism_cost(&mod, PRISM_READ, 1 << 20, true),
		   prism_cost(&mod, PRISM_WRITE, 4096, false));
	seq_printf(m, "learning=%s samples=%llu window_rrand=%llu window_rseq=%llu window_wrand=%llu window_wseq=%llu\n",
		   !PRISM_CAN_LEARN ? "unavailable" :
		   learning ? (any ? "in_force" : "started") : "off",
		   lr.samples, lr.s[PRISM_READ][0].n, lr.s[PRISM_READ][1].n,
		   lr.s[PRISM_WRITE][0].n, lr.s[PRISM_WRITE][1].n);
	if (any)
		seq_printf(m, "learned rbps=%llu rseqiops=%u rrandiops=%u wbps=%llu wseqiops=%u wrandiops=%u\n",
			   l.bps[PRISM_READ], l.seqiops[PRISM_READ],
			   l.randiops[PRISM_READ], l.bps[PRISM_WRITE],
			   l.seqiops[PRISM_WRITE], l.randiops[PRISM_WRITE]);
	return 0;
}

/*
 * The in-flight control: per tier what is in the device, the think time
 * and the sync-write chain's gaps; the depth controller (times in
 * microseconds); how often dispatch held lower tiers back, and how often
 * the timer ran the queue (window_runs).
 */
static int prism_flight_show(void *data, struct seq_file *m)
{
	struct request_queue *q = data;
	struct prism_data *pd = q->elevator->elevator_data;
	u64 inflight[PRISM_NR_TIERS], think[PRISM_NR_TIERS];
	u64 chain[PRISM_NR_TIERS];
	u32 samples[PRISM_NR_TIERS], chain_samples[PRISM_NR_TIERS];
	u32 chain_quick[PRISM_NR_TIERS];
	struct prism_depth_ctl d;
	u64 window, target, held_window, held_depth, held_flow;
	u64 flow_window, held_paced, empty, tags_short, held_stalled;
	u32 parked;
	int t;

	spin_lock(&pd->lock);
	for (t = 0; t < PRISM_NR_TIERS; t++) {
		inflight[t] = prism_inflight(&pd->tier[t]);
		think[t] = pd->tier[t].think.mean;
		samples[t] = pd->tier[t].think.samples;
		chain[t] = pd->tier[t].chain.mean;
		chain_samples[t] = pd->tier[t].chain.samples;
		chain_quick[t] = pd->tier[t].chain.quick;
	}
	d = pd->depth;
	window = prism_window(&d, prism_tun(pd), !blk_queue_nonrot(q));
	target = prism_depth_target(&d, prism_tun(pd));
	held_window = pd->held_window;
	held_depth = pd->held_depth;
	held_flow = pd->held_flow;
	held_paced = pd->held_paced;
	empty = pd->empty_dispatches;
	tags_short = pd->tags_short;
	held_stalled = pd->held_stalled;
	parked = pd->nr_parked;
	flow_window = prism_flow_window_now(pd, prism_tun(pd),
					    prism_weights_differ_now(pd));
	spin_unlock(&pd->lock);

	seq_puts(m, "tier inflight think_us think_samples chain_us chain_samples chain_quick_pct\n");
	for (t = 0; t < PRISM_NR_TIERS; t++)
		seq_printf(m, "%s %llu %llu %u %llu %u %u\n", prism_tier_name[t],
			   inflight[t], div_u64(think[t], NSEC_PER_USEC),
			   samples[t], div_u64(chain[t], NSEC_PER_USEC),
			   chain_samples[t],
			   chain_quick[t] * 100 / PRISM_QUICK_ONE);
	seq_printf(m, "device_depth=%u lower_limit=%u window_us=%llu target_us=%llu bulk_us=%llu bulk_samples=%u solo_us=%llu solo_samples=%u floor_us=%llu floor_samples=%u lat_us=%llu solo_mean_us=%llu mixed_us=%llu mixed_samples=%u cuts=%llu held_window=%llu held_depth=%llu window_runs=%lld flow_window_us=%llu held_flow=%llu lower_duty=%u held_paced=%llu empty_dispatches=%llu parked=%u tags_short=%llu held_stalled=%llu\n",
		   pd->device_depth, d.limit,
		   div_u64(window, NSEC_PER_USEC),
		   div_u64(target, NSEC_PER_USEC),
		   div_u64(d.bulk, NSEC_PER_USEC), d.bulk_samples,
		   div_u64(d.solo, NSEC_PER_USEC), d.solo_samples,
		   div_u64(d.floor, NSEC_PER_USEC), d.floor_samples,
		   div_u64(d.lat, NSEC_PER_USEC),
		   div_u64(d.solo_mean, NSEC_PER_USEC),
		   div_u64(d.mixed, NSEC_PER_USEC), d.mixed_samples,
		   d.cuts, held_window,
		   held_depth, atomic64_read(&pd->window_runs),
		   div_u64(flow_window, NSEC_PER_USEC), held_flow,
		   d.duty, held_paced, empty, parked, tags_short,
		   held_stalled);
	return 0;
}

/*
 * The latency histograms: a line of bucket lower bounds in ns, then one
 * line per kind, tier and direction with its count per bucket. Kept only
 * once "1" is written here, which empties them and starts counting;
 * "0" empties them and stops (a completion racing with either may
 * survive). Off at first: they cost about 50 instructions a request.
 */
/* One histogram line; the FIFO names of reads and writes are the dirs'. */
static void prism_latency_line(struct seq_file *m, const char *kind, int t,
			       int d, const u64 *counts)
{
	int b;

	seq_printf(m, "%s %s %s", kind, prism_tier_name[t], prism_fifo_name[d]);
	for (b = 0; b < PRISM_HIST_BUCKETS; b++)
		seq_printf(m, " %llu", counts[b]);
	seq_putc(m, '\n');
}

static int prism_latency_show(void *data, struct seq_file *m)
{
	struct request_queue *q = data;
	struct prism_data *pd = q->elevator->elevator_data;
	u64 counts[PRISM_HIST_BUCKETS];
	int t, d, b;

	for (b = 0; b < PRISM_HIST_BUCKETS; b++)
		counts[b] = prism_hist_lower(b);
	seq_puts(m, "bucket_ns");
	for (b = 0; b < PRISM_HIST_BUCKETS; b++)
		seq_printf(m, " %llu", counts[b]);
	seq_putc(m, '\n');
	spin_lock(&pd->lock);
	for (t = 0; t < PRISM_NR_TIERS; t++)
		for (d = 0; d < PRISM_NR_DIRS; d++)
			prism_latency_line(m, "wait", t, d, pd->hist_wait[t][d]);
	spin_unlock(&pd->lock);
	for (t = 0; t < PRISM_NR_TIERS; t++)
		for (d = 0; d < PRISM_NR_DIRS; d++) {
			for (b = 0; b < PRISM_HIST_BUCKETS; b++)
				counts[b] = atomic64_read(&pd->hist_device[t][d][b]);
			prism_latency_line(m, "device", t, d, counts);
		}
	return 0;
}

static ssize_t prism_latency_write(void *data, const char __user *buf,
				   size_t count, loff_t *ppos)
{
	struct request_queue *q = data;
	struct prism_data *pd;
	char kbuf[4] = {}, *val;
	int t, d, b, ret;

	if (count > sizeof(kbuf) - 1 || copy_from_user(kbuf, buf, count))
		return -EINVAL;
	val = strim(kbuf);
	if (strcmp(val, "0") && strcmp(val, "1"))
		return -EINVAL;
	ret = prism_debugfs_lock(q);
	if (ret)
		return ret;
	pd = q->elevator->elevator_data;
	spin_lock(&pd->lock);
	memset(pd->hist_wait, 0, sizeof(pd->hist_wait));
	/* Dispatch reads it under the lock, completions locklessly. */
	WRITE_ONCE(pd->latency_hist, *val == '1');
	spin_unlock(&pd->lock);
	for (t = 0; t < PRISM_NR_TIERS; t++)
		for (d = 0; d < PRISM_NR_DIRS; d++)
			for (b = 0; b < PRISM_HIST_BUCKETS; b++)
				atomic64_set(&pd->hist_device[t][d][b], 0);
	prism_debugfs_unlock(q);
	return count;
}

/*
 * Each show runs under prism_debugfs_lock() (see prism_compat.h): where
 * the core may leave these files up past exit_sched(), only while
 * prism is the queue's elevator; elsewhere it takes nothing.
 */
#define PRISM_DEBUGFS_GUARD(show)					\
static int show##_guarded(void *data, struct seq_file *m)		\
{									\
	int ret = prism_debugfs_lock(data);				\
									\
	if (ret)							\
		return ret;						\
	ret = show(data, m);						\
	prism_debugfs_unlock(data);					\
	return ret;							\
}

PRISM_DEBUGFS_GUARD(prism_latency_show)
PRISM_DEBUGFS_GUARD(prism_flight_show)
PRISM_DEBUGFS_GUARD(prism_tiers_show)
PRISM_DEBUGFS_GUARD(prism_batch_show)
PRISM_DEBUGFS_GUARD(prism_streams_show)
PRISM_DEBUGFS_GUARD(prism_flows_show)
PRISM_DEBUGFS_GUARD(prism_cost_show)
#ifdef CONFIG_BLK_CGROUP
PRISM_DEBUGFS_GUARD(prism_cgroup_show)
#endif

const struct blk_mq_debugfs_attr prism_queue_debugfs_attrs[] = {
	{"latency", 0600, prism_latency_show_guarded, prism_latency_write},
	{"flight", 0400, prism_flight_show_guarded},
	{"tiers", 0400, prism_tiers_show_guarded},
	{"batch", 0400, prism_batch_show_guarded},
	{"streams", 0400, prism_streams_show_guarded},
	{"flows", 0400, prism_flows_show_guarded},
	{"cost", 0400, prism_cost_show_guarded},
#ifdef CONFIG_BLK_CGROUP
	{"cgroups", 0400, prism_cgroup_show_guarded},
#endif
	{},
};
