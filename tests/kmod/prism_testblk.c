// SPDX-License-Identifier: GPL-2.0
/*
 * prism_testblk: a test-only blk-mq disk that misbehaves the way real
 * drivers may, on purpose, so prism's handling of it can be tested in the
 * VM. No stock driver on Debian's kernels does these on demand (null_blk's
 * requeue injection needs CONFIG_BLK_DEV_NULL_BLK_FAULT_INJECTION, which
 * Debian leaves off; nvme and scsi mark requests RQF_DONTPREP, so their
 * requeues bypass the elevator).
 *
 * - Every requeue_every-th request is requeued with blk_mq_requeue_request()
 *   instead of completed, without RQF_DONTPREP, so it goes back through the
 *   scheduler's insert_requests(); before that the driver writes garbage
 *   into rq->special_vec, which shares a union with rq->rb_node (drivers
 *   use it for discard payloads), as a scheduler must never read it.
 * - A volatile write cache with FUA, so O_DSYNC writes carry REQ_FUA: on
 *   6.1 they are never prepared by the elevator, and a requeue brings them
 *   to insert_requests() all the same.
 * - Multi-range discard (64 segments).
 * Data is not stored: reads return whatever the pages held.
 */
#include <linux/module.h>
#include <linux/blk-mq.h>
#include <linux/blkdev.h>

static unsigned int requeue_every = 7;
module_param(requeue_every, uint, 0644);
MODULE_PARM_DESC(requeue_every, "requeue every Nth request (0: never)");

static unsigned int size_mb = 256;
module_param(size_mb, uint, 0444);
MODULE_PARM_DESC(size_mb, "capacity in MiB");

static unsigned int queue_depth = 4;
module_param(queue_depth, uint, 0444);
MODULE_PARM_DESC(queue_depth, "device queue depth");

struct testblk {
	struct blk_mq_tag_set tag_set;
	struct gendisk *disk;
	atomic_t seq;
	atomic64_t requeued;
};

static struct testblk *tb;

/* 7.x's slab.h has it (and its checkpatch asks for it); older ones not. */
#ifndef kzalloc_obj
#define kzalloc_obj(P, gfp)	kzalloc(sizeof(P), gfp)
#endif

static ssize_t requeued_show(struct device *dev, struct device_attribute *attr,
			     char *buf)
{
	return sysfs_emit(buf, "%lld\n", atomic64_read(&tb->requeued));
}
static DEVICE_ATTR_RO(requeued);

static struct attribute *testblk_attrs[] = {
	&dev_attr_requeued.attr,
	NULL,
};

static const struct attribute_group testblk_group = {
	.attrs = testblk_attrs,
};

static const struct attribute_group *testblk_groups[] = {
	&testblk_group,
	NULL,
};

static blk_status_t testblk_queue_rq(struct blk_mq_hw_ctx *hctx,
				     const struct blk_mq_queue_data *bd)
{
	struct request *rq = bd->rq;
	unsigned int every = READ_ONCE(requeue_every);

	blk_mq_start_request(rq);
	if (every && (unsigned int)atomic_inc_return(&tb->seq) % every == 0 &&
	    !(rq->rq_flags & RQF_SPECIAL_PAYLOAD)) {
		/* What a driver's discard payload leaves in the union. */
		rq->special_vec.bv_page = (struct page *)0xdeadbeefUL;
		rq->special_vec.bv_len = 0x5a5a5a5a;
		rq->special_vec.bv_offset = 0xa5a5a5a5;
		atomic64_inc(&tb->requeued);
		blk_mq_requeue_request(rq, true);
		return BLK_STS_OK;
	}
	blk_mq_end_request(rq, BLK_STS_OK);
	return BLK_STS_OK;
}

static const struct blk_mq_ops testblk_mq_ops = {
	.queue_rq = testblk_queue_rq,
};

static const struct block_device_operations testblk_fops = {
	.owner = THIS_MODULE,
};

static int __init testblk_init(void)
{
	struct gendisk *disk;
	int ret;

	tb = kzalloc_obj(*tb, GFP_KERNEL);
	if (!tb)
		return -ENOMEM;
	tb->tag_set.ops = &testblk_mq_ops;
	tb->tag_set.nr_hw_queues = 1;
	tb->tag_set.queue_depth = queue_depth;
	tb->tag_set.numa_node = NUMA_NO_NODE;
	ret = blk_mq_alloc_tag_set(&tb->tag_set);
	if (ret)
		goto free_tb;

/* Queue limits are passed at allocation since 6.11 (with BLK_FEAT_*). */
#ifdef BLK_FEAT_WRITE_CACHE
	{
		struct queue_limits lim = {
			.features = BLK_FEAT_WRITE_CACHE | BLK_FEAT_FUA,
			.max_hw_discard_sectors = UINT_MAX >> 9,
			.max_discard_segments = 64,
			.discard_granularity = 512,
		};

		disk = blk_mq_alloc_disk(&tb->tag_set, &lim, tb);
	}
#else
	disk = blk_mq_alloc_disk(&tb->tag_set, tb);
#endif
	if (IS_ERR(disk)) {
		ret = PTR_ERR(disk);
		goto free_tags;
	}
#ifndef BLK_FEAT_WRITE_CACHE
	blk_queue_write_cache(disk->queue, true, true);
	blk_queue_max_discard_sectors(disk->queue, UINT_MAX >> 9);
	blk_queue_max_discard_segments(disk->queue, 64);
	disk->queue->limits.discard_granularity = 512;
#endif
	disk->fops = &testblk_fops;
	disk->private_data = tb;
	strscpy(disk->disk_name, "prismtb0", DISK_NAME_LEN);
	set_capacity(disk, (sector_t)size_mb << 11);
	tb->disk = disk;
	ret = device_add_disk(NULL, disk, testblk_groups);
	if (ret)
		goto put_disk;
	return 0;

put_disk:
	put_disk(disk);
free_tags:
	blk_mq_free_tag_set(&tb->tag_set);
free_tb:
	kfree(tb);
	return ret;
}

static void __exit testblk_exit(void)
{
	del_gendisk(tb->disk);
	put_disk(tb->disk);
	blk_mq_free_tag_set(&tb->tag_set);
	kfree(tb);
}

module_init(testblk_init);
module_exit(testblk_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("prism test disk: requeues, FUA, multi-range discard");
