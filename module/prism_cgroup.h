/* SPDX-License-Identifier: GPL-2.0 */
/*
 * prism's blkcg policy (prism_cgroup.c): the cgroup v2 file
 * io.prism.weight and the lookup of a request's cgroup. Without
 * CONFIG_BLK_CGROUP there are no cgroups to tell apart, and these do
 * nothing.
 */
#ifndef _PRISM_CGROUP_H
#define _PRISM_CGROUP_H

#include <linux/types.h>

struct bio;
struct request_queue;
struct seq_file;

/* A request's cgroup, as prism_cgroup_of() finds it. */
struct prism_cgroup_info {
	u64 id;		/* cgroup_id(): unique and stable while the cgroup lives */
	u32 weight;	/* its io.prism.weight on the request's disk */
};

#ifdef CONFIG_BLK_CGROUP
#include <linux/blkdev.h>

void prism_cgroup_register(void);
void prism_cgroup_unregister(void);
void prism_cgroup_activate(struct request_queue *q);
void prism_cgroup_deactivate(struct request_queue *q);
bool __prism_cgroup_of(struct bio *bio, struct request_queue *q,
		       struct prism_cgroup_info *info);
int prism_cgroup_show(void *data, struct seq_file *m);

/*
 * A request's cgroup flow, if its bio belongs to a cgroup other than the
 * root (the queue's root_blkg), whose processes are no group.
 * That test, the common case on a machine without cgroups, inline; the
 * walk up to an online cgroup of prism's out of line.
 */
static inline bool prism_cgroup_of(struct bio *bio, struct request_queue *q,
				   struct prism_cgroup_info *info)
{
	if (!bio || !bio->bi_blkg || bio->bi_blkg == q->root_blkg)
		return false;
	return __prism_cgroup_of(bio, q, info);
}
#else
static inline void prism_cgroup_register(void)
{
}

static inline void prism_cgroup_unregister(void)
{
}

static inline void prism_cgroup_activate(struct request_queue *q)
{
}

static inline void prism_cgroup_deactivate(struct request_queue *q)
{
}

static inline bool prism_cgroup_of(struct bio *bio, struct request_queue *q,
				   struct prism_cgroup_info *info)
{
	return false;
}
#endif

#endif /* _PRISM_CGROUP_H */
