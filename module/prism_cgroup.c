// SPDX-License-Identifier: GPL-2.0
/*
 * prism's blkcg policy: the cgroup v2 file io.prism.weight, and where a
 * request's cgroup and weight are found for the scheduler.
 *
 * The pattern is bfq's (block/bfq-cgroup.c). The policy is registered
 * once, when the module loads, before the elevator; it is activated on
 * a queue at the end of prism's init_sched() and deactivated at the
 * start of its exit_sched(). While it is registered the core gives every
 * cgroup prism's per-cgroup data (a cpd, struct prism_cg_data); while it
 * is active on a queue, every (cgroup, queue) pair, a blkg, prism's
 * per-blkg data (a pd, struct prism_cg). A cgroup's default weight lives
 * in its cpd and lasts while the module is loaded; its weight on one
 * disk lives in the pd and goes when prism leaves that disk, as bfq's.
 *
 * io.prism.weight reads and writes as bfq's io.bfq.weight (the syntax is
 * prism_cgweight.c's): "default W" and a "MAJ:MIN W" line per disk with
 * a weight of its own; not on the root cgroup, whose I/O is nobody's
 * flow. A refused write changes nothing.
 *
 * Should registration fail (six policy slots, of which Debian's kernels
 * use two or three), the module loads without the file and schedules
 * per process, and says so once.
 */
#define pr_fmt(fmt) "prism: " fmt

#include <linux/cgroup.h>
#include <linux/kdev_t.h>

#include "prism.h"
#include "prism_cgweight.h"

/*
 * Per cgroup. weight: its default, written by io.prism.weight (process
 * context) with WRITE_ONCE and no lock, as it is one word and the last
 * write wins; read with READ_ONCE anywhere.
 */
struct prism_cg_data {
	struct blkcg_policy_data cpd;
	u32 weight;
};

/*
 * Per cgroup and queue. Written under the queue's queue_lock, which the
 * core takes with spin_lock_irq() (on PREEMPT_RT a sleeping lock,
 * interrupts left on): dev_weight by io.prism.weight, between
 * prism_blkg_conf_prep() and _finish(); online by the core's pd_init_fn
 * and pd_offline_fn, which it calls under that lock. Both are read
 * locklessly where requests are looked up (READ_ONCE).
 *
 * online: between pd_init_fn and pd_offline_fn. prism keeps its own flag,
 * as bfq on 6.1 does, so that nothing depends on when a kernel calls
 * pd_online_fn or sets the core's pd->online.
 */
struct prism_cg {
	struct blkg_policy_data pd;
	u32 dev_weight;		/* "MAJ:MIN W"; 0: the cgroup's default */
	bool online;
};

static struct blkcg_policy prism_blkcg_policy;

/* prism_cgweight.c's limits, which it cannot take from kernel headers. */
static_assert(PRISM_CG_WEIGHT_MIN == CGROUP_WEIGHT_MIN);
static_assert(PRISM_CG_WEIGHT_DFL == CGROUP_WEIGHT_DFL);
static_assert(PRISM_CG_WEIGHT_MAX == CGROUP_WEIGHT_MAX);
static_assert(PRISM_CG_MINOR_MAX == MINORMASK);
static_assert(PRISM_CG_MAJOR_MAX == (~(dev_t)0 >> MINORBITS));

/*
 * Set at module load if the policy could be registered, before any queue
 * is prism's; without it, plid is no slot of prism's.
 */
static bool prism_cg_registered __ro_after_init;

static struct prism_cg_data *cpd_to_pcgd(struct blkcg_policy_data *cpd)
{
	return cpd ? container_of(cpd, struct prism_cg_data, cpd) : NULL;
}

static struct prism_cg_data *blkcg_to_pcgd(struct blkcg *blkcg)
{
	return cpd_to_pcgd(blkcg_to_cpd(blkcg, &prism_blkcg_policy));
}

static struct prism_cg *pd_to_pcg(struct blkg_policy_data *pd)
{
	return pd ? container_of(pd, struct prism_cg, pd) : NULL;
}

static struct prism_cg *blkg_to_pcg(struct blkcg_gq *blkg)
{
	return pd_to_pcg(blkg_to_pd(blkg, &prism_blkcg_policy));
}

/* The weight in force: the disk's own if it has one, else the default. */
static u32 prism_cg_weight(struct prism_cg *pcg)
{
	u32 weight = READ_ONCE(pcg->dev_weight);

	return weight ?: READ_ONCE(blkcg_to_pcgd(pcg->pd.blkg->blkcg)->weight);
}

/*
 * Default weight set here, not in cpd_init_fn, which 6.12 no longer has:
 * prism has no cgroup v1 file, so no default to change on a rebind.
 */
static struct blkcg_policy_data *prism_cg_cpd_alloc(gfp_t gfp)
{
	struct prism_cg_data *pcgd = kzalloc(sizeof(*pcgd), gfp);

	if (!pcgd)
		return NULL;
	pcgd->weight = PRISM_CG_WEIGHT_DFL;
	return &pcgd->cpd;
}

static void prism_cg_cpd_free(struct blkcg_policy_data *cpd)
{
	kfree(cpd_to_pcgd(cpd));
}

/* Called through prism_cg_pd_alloc_fn() (prism_compat.h). */
struct blkg_policy_data *prism_cg_pd_alloc(gfp_t gfp, int node)
{
	struct prism_cg *pcg = kzalloc_node(sizeof(*pcg), gfp, node);

	return pcg ? &pcg->pd : NULL;
}

static void prism_cg_pd_init(struct blkg_policy_data *pd)
{
	WRITE_ONCE(pd_to_pcg(pd)->online, true);
}

static void prism_cg_pd_offline(struct blkg_policy_data *pd)
{
	WRITE_ONCE(pd_to_pcg(pd)->online, false);
}

static void prism_cg_pd_free(struct blkg_policy_data *pd)
{
	kfree(pd_to_pcg(pd));
}

/* Under the blkg's queue_lock (blkcg_print_blkgs()). */
static u64 prism_cg_prfill_weight(struct seq_file *sf,
				  struct blkg_policy_data *pd, int off)
{
	u32 weight = pd_to_pcg(pd)->dev_weight;

	return weight ? __blkg_prfill_u64(sf, pd, weight) : 0;
}

static int prism_cg_weight_show(struct seq_file *sf, void *v)
{
	struct blkcg *blkcg = css_to_blkcg(seq_css(sf));

	seq_printf(sf, "default %u\n", READ_ONCE(blkcg_to_pcgd(blkcg)->weight));
	blkcg_print_blkgs(sf, blkcg, prism_cg_prfill_weight,
			  &prism_blkcg_policy, 0, false);
	return 0;
}

/*
 * The whole input is checked before anything is looked up, so that a
 * refused write changes nothing; blkg_conf_prep() then reads the same
 * MAJ:MIN (prism_cg_weight_parse() refused any its sscanf() would read
 * differently) and finds the disk, creating the cgroup's blkg there if
 * it had none yet.
 */
static ssize_t prism_cg_weight_write(struct kernfs_open_file *of, char *buf,
				     size_t nbytes, loff_t off)
{
	struct blkcg *blkcg = css_to_blkcg(of_css(of));
	struct prism_cg_weight_req req;
	struct blkg_conf_ctx ctx;
	int ret;

	ret = prism_cg_weight_parse(buf, &req);
	if (ret)
		return ret;
	if (!req.dev) {
		WRITE_ONCE(blkcg_to_pcgd(blkcg)->weight, req.weight);
		return nbytes;
	}
	ret = prism_blkg_conf_prep(blkcg, &prism_blkcg_policy, buf, &ctx);
	if (ret)
		return ret;
	WRITE_ONCE(blkg_to_pcg(ctx.blkg)->dev_weight, req.weight);
	prism_blkg_conf_finish(&ctx);
	return nbytes;
}

static struct cftype prism_cg_files[] = {
	{
		.name = "prism.weight",
		.flags = CFTYPE_NOT_ON_ROOT,
		.seq_show = prism_cg_weight_show,
		.write = prism_cg_weight_write,
	},
	{ }	/* terminate */
};

static struct blkcg_policy prism_blkcg_policy = {
	.dfl_cftypes	= prism_cg_files,
	.cpd_alloc_fn	= prism_cg_cpd_alloc,
	.cpd_free_fn	= prism_cg_cpd_free,
	.pd_alloc_fn	= prism_cg_pd_alloc_fn,
	.pd_init_fn	= prism_cg_pd_init,
	.pd_offline_fn	= prism_cg_pd_offline,
	.pd_free_fn	= prism_cg_pd_free,
};

/*
 * A bio's cgroup, for scheduling by cgroup: the nearest online cgroup
 * with prism's data on @q's disk, from the bio's blkg up (as
 * bfq_bio_bfqg() walks), since the bio's own cgroup may be going away.
 * Writeback bios carry the cgroup that dirtied the pages
 * (wbc_init_bio()), not the flusher's. False for no bio (a request
 * without data) or one whose walk ends at the root cgroup, which is
 * nobody's flow, and wherever the policy is not active.
 *
 * Lockless, from any context the bio is handled in: the bio holds
 * its blkg and each blkg its parent, and a pd is freed only with its
 * blkg or when exit_sched() deactivates the policy, with the queue
 * frozen and so no request left.
 */
bool __prism_cgroup_of(struct bio *bio, struct request_queue *q,
		       struct prism_cgroup_info *info)
{
	struct blkcg_gq *blkg = bio->bi_blkg;

	if (!prism_cg_registered || blkg->q != q)
		return false;
	for (; blkg->parent; blkg = blkg->parent) {
		struct prism_cg *pcg = blkg_to_pcg(blkg);

		if (!READ_ONCE(blkg->online) || !pcg || !READ_ONCE(pcg->online))
			continue;
		info->id = cgroup_id(blkg->blkcg->css.cgroup);
		info->weight = prism_cg_weight(pcg);
		return true;
	}
	return false;
}

/*
 * @cgrp's path, written straight into @m's buffer: the show runs where it
 * must not allocate (see prism_debugfs_lock()). A path that does not fit
 * marks the buffer full, and seq_read() retries with a larger one.
 * kernfs_path_from_node() cuts the last name short with scnprintf() and
 * returns what it wrote, so a path that filled the buffer may have been
 * cut: only one that left a byte over is taken as whole.
 */
static void prism_cg_seq_path(struct seq_file *m, struct cgroup *cgrp)
{
	char *buf;
	size_t size = seq_get_buf(m, &buf);
	int len = size ? cgroup_path(cgrp, buf, size) : -E2BIG;

	if (len >= 0 && (size_t)len + 1 < size) {
		seq_commit(m, len);
	} else if (size < PATH_MAX) {
		seq_commit(m, -1);
	} else {
		seq_commit(m, 0);
		seq_putc(m, '?');
	}
}

/* What a cgroup's groups served and hold on one queue, over its tiers. */
struct prism_cg_totals {
	u64 cost;		/* ns of estimated device time */
	u64 bytes;
	u64 dispatched;
	u64 queued;
	u64 owned;
};

/*
 * @id's totals on @pd, for debugfs. Without prism's lock, which is not
 * taken inside the queue_lock: a figure may be a moment stale, and a slot
 * given to another cgroup meanwhile counted or not. The tables live as
 * long as the queue's prism data, which the debugfs guard keeps.
 */
static void prism_cg_totals(struct prism_data *pd, u64 id,
			    struct prism_cg_totals *tot)
{
	int i;

	*tot = (struct prism_cg_totals){ };
	for (i = 0; i < PRISM_NR_GROUPS; i++) {
		const struct prism_group *g = &pd->groups[i];

		if (READ_ONCE(g->id) != id)
			continue;
		tot->cost += READ_ONCE(g->cost);
		tot->bytes += READ_ONCE(g->bytes);
		tot->dispatched += READ_ONCE(g->dispatched);
	}
	for (i = 0; i < PRISM_NR_FLOWS; i++) {
		struct prism_flow *fl = &pd->flows[i];
		const struct prism_group *g = READ_ONCE(fl->group);
		int d;

		if (!READ_ONCE(fl->key) || !g || READ_ONCE(g->id) != id)
			continue;
		for (d = 0; d < PRISM_NR_FIFOS; d++)
			tot->queued += READ_ONCE(fl->queued[d]);
		tot->owned += prism_flow_owned(fl);
	}
}

/*
 * debugfs "cgroups": the cgroups prism knows on this disk (those
 * prism_cgroup_of() can return: online and not the root), with their
 * cgroup_id(), the weight in force, the estimated device time (us), bytes
 * and requests dispatched for them and what they have queued and own
 * (prism_cg_totals()); the path last, as it may hold spaces. Under the
 * queue_lock, which keeps the list. A blkg stays on it
 * after it went offline until its free work ran, which on 6.12 and 7.3
 * frees its pd (and on 6.12 may drop its cgroup) before taking it off
 * without the queue_lock: only an online blkg's pd and cgroup are
 * looked at. blkg_destroy() takes it offline under the queue_lock, and
 * deactivation frees the pds under it too.
 */
int prism_cgroup_show(void *data, struct seq_file *m)
{
	struct request_queue *q = data;
	struct prism_data *pd = q->elevator->elevator_data;
	struct blkcg_gq *blkg;

	seq_puts(m, "cgroup weight cost_us bytes dispatched queued owned path\n");
	if (!prism_cg_registered)
		return 0;
	spin_lock_irq(&q->queue_lock);
	list_for_each_entry(blkg, &q->blkg_list, q_node) {
		struct prism_cg_totals tot;
		struct prism_cg *pcg;
		struct cgroup *cgrp;

		if (!blkg->parent || !blkg->online)
			continue;
		pcg = blkg_to_pcg(blkg);
		if (!pcg || !pcg->online)
			continue;
		cgrp = blkg->blkcg->css.cgroup;
		prism_cg_totals(pd, cgroup_id(cgrp), &tot);
		seq_printf(m, "%llu %u %llu %llu %llu %llu %llu ",
			   cgroup_id(cgrp), prism_cg_weight(pcg),
			   div_u64(tot.cost, NSEC_PER_USEC), tot.bytes,
			   tot.dispatched, tot.queued, tot.owned);
		prism_cg_seq_path(m, cgrp);
		seq_putc(m, '\n');
	}
	spin_unlock_irq(&q->queue_lock);
	return 0;
}

/*
 * At the end of init_sched(), with prism's data set up: the core
 * allocates a pd for each of the queue's blkgs, with the queue frozen.
 * Failing, the queue is scheduled per process.
 */
void prism_cgroup_activate(struct request_queue *q)
{
	int ret;

	if (!prism_cg_registered)
		return;
	ret = prism_blkcg_activate(q, &prism_blkcg_policy);
	if (ret)
		pr_warn("%s: io.prism.weight not in force, I/O scheduled per process (%pe)\n",
			q->disk->disk_name, ERR_PTR(ret));
}

/* At the start of exit_sched(): frees the queue's pds, the queue frozen. */
void prism_cgroup_deactivate(struct request_queue *q)
{
	if (prism_cg_registered)
		prism_blkcg_deactivate(q, &prism_blkcg_policy);
}

/* At module load, before elv_register(): never fails the load. */
void prism_cgroup_register(void)
{
	int ret;

	ret = blkcg_policy_register(&prism_blkcg_policy);
	if (ret) {
		pr_warn("no blkcg policy (%pe): no io.prism.weight, I/O scheduled per process\n",
			ERR_PTR(ret));
		return;
	}
	prism_cg_registered = true;
}

/* At module unload, after elv_unregister(): no queue is prism's. */
void prism_cgroup_unregister(void)
{
	if (prism_cg_registered)
		blkcg_policy_unregister(&prism_blkcg_policy);
}
