/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The syntax of the cgroup v2 file io.prism.weight, which is that of
 * bfq's io.bfq.weight: "W" or "default W" sets the cgroup's default
 * weight, "MAJ:MIN W" its weight on one disk, "MAJ:MIN default" takes
 * that back. Pure C, so that tests/policy/ checks it in userspace;
 * prism_cgroup.c does the rest.
 */
#ifndef _PRISM_CGWEIGHT_H
#define _PRISM_CGWEIGHT_H

#ifdef __KERNEL__
#include <linux/types.h>
#else
#include <stdbool.h>
#include <stddef.h>
#endif

/*
 * cgroup v2's weight range (CGROUP_WEIGHT_MIN/DFL/MAX, which
 * prism_cgroup.c checks these against at build time).
 */
#define PRISM_CG_WEIGHT_MIN	1
#define PRISM_CG_WEIGHT_DFL	100
#define PRISM_CG_WEIGHT_MAX	10000

/* The largest MAJ:MIN a dev_t holds (MINORBITS is 20). */
#define PRISM_CG_MAJOR_MAX	((1U << 12) - 1)
#define PRISM_CG_MINOR_MAX	((1U << 20) - 1)

/* What a write to io.prism.weight asks for. */
struct prism_cg_weight_req {
	bool dev;		/* for one disk, major:minor; else the default */
	unsigned int major;
	unsigned int minor;
	/*
	 * PRISM_CG_WEIGHT_MIN..MAX; with dev, 0 for "default": the disk
	 * goes back to the cgroup's default weight.
	 */
	unsigned int weight;
};

int prism_cg_weight_parse(const char *buf, struct prism_cg_weight_req *req);

#endif /* _PRISM_CGWEIGHT_H */
