/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Every difference between the supported kernels (Debian's 6.1 and 6.12
 * LTS) that prism meets lives here, so the scheduler itself reads the same
 * for both. See ../shared/KERNEL-NOTES.md for how each was established.
 */
#ifndef _PRISM_COMPAT_H
#define _PRISM_COMPAT_H

#include <linux/blk-mq.h>
#include <linux/sbitmap.h>

/*
 * struct blk_mq_tags lives in the private block/blk-mq-tag.h on 6.1 and in
 * <linux/blk-mq.h> on 6.12, where that header is gone. Included after the
 * other private headers.
 */
#if __has_include("blk-mq-tag.h")
#include "blk-mq-tag.h"
#endif

/*
 * insert_requests() took "bool at_head" until 6.5, then a blk_insert_t
 * flags word with BLK_MQ_INSERT_AT_HEAD (a macro of block/blk-mq.h, so
 * its presence tells which one this kernel has).
 */
#ifdef BLK_MQ_INSERT_AT_HEAD
#define prism_insert_t blk_insert_t

static inline bool prism_insert_at_head(prism_insert_t flags)
{
	return flags & BLK_MQ_INSERT_AT_HEAD;
}
#else
#define prism_insert_t bool

static inline bool prism_insert_at_head(prism_insert_t at_head)
{
	return at_head;
}
#endif

/*
 * blk_mq_alloc_data.shallow_depth limits one sbitmap word on older
 * kernels and the whole bitmap on newer ones; the change reached 6.12.117
 * as a stable backport, so the kernel version cannot tell. The build
 * looks at the matching source (6.1's mq-deadline converts with a
 * word-depth helper) and defines PRISM_SHALLOW_DEPTH_PER_WORD.
 *
 * Returns the shallow_depth value that lets at most @depth of the
 * @nr_requests scheduler tags be taken. Never 0: 0 means "no limit".
 */
static inline unsigned int prism_shallow_depth(struct blk_mq_hw_ctx *hctx,
					       unsigned int nr_requests,
					       unsigned int depth)
{
#ifdef PRISM_SHALLOW_DEPTH_PER_WORD
	const struct sbitmap_queue *bt = &hctx->sched_tags->bitmap_tags;
	unsigned int word_depth;

	if (!nr_requests)
		return 1;
	word_depth = ((depth << bt->sb.shift) + nr_requests - 1) / nr_requests;
	return word_depth ? word_depth : 1;
#else
	return depth ? depth : 1;
#endif
}

/*
 * On 6.1, flush and passthrough requests get RQF_ELV and are prepared
 * (non-flush ones) but bypass insert_requests(); on 6.12 they never reach
 * the elevator. prism marks what it inserted in the request itself, which
 * works the same on both, so no flag test is needed here.
 */

#endif /* _PRISM_COMPAT_H */
