// SPDX-License-Identifier: GPL-2.0
/*
 * Userspace tests of prism's scheduling policy (module/prism_policy.c):
 * tiers, deadlines, shares, the in-flight control. Each TEST() is one
 * case; "policy_test NAME" runs one, no argument runs all (flow_test.c
 * holds the flows'). tests/test_policy.py runs each as its own pytest
 * case.
 */
#include "check.h"

int failures;

#define MAX_TESTS 128
static struct test tests[MAX_TESTS];
static int ntests;

void register_test(const char *name, void (*fn)(void))
{
	if (ntests == MAX_TESTS) {
		fprintf(stderr, "too many tests: raise MAX_TESTS\n");
		exit(2);
	}
	tests[ntests].name = name;
	tests[ntests++].fn = fn;
}

static struct prism_tunables defaults(void)
{
	struct prism_tunables t;

	prism_tunables_init(&t, HZ);
	return t;
}

/*
 * The locals a prism_choose() test starts from: default tunables, empty
 * queues, no batch open.
 */
#define CHOOSE_SETUP							\
	struct prism_tunables t = defaults();				\
	struct prism_tier_view v[PRISM_NR_TIERS];			\
	struct prism_batch b;						\
	struct prism_choice c;						\
	view_clear(v);							\
	prism_batch_reset(&b)

/*
 * mech_choose() on a device with room for everything (unlimited, check.h):
 * the v1 behaviour, which the in-flight control leaves alone while no
 * higher tier is active.
 */
static bool choose(struct prism_tier_view v[PRISM_NR_TIERS],
		   struct prism_batch *b, const struct prism_tunables *t,
		   unsigned long now, struct prism_choice *c)
{
	enum prism_hold hold;
	bool ok = mech_choose(v, b, t, &unlimited, now, c, &hold);

	CHECK_EQ(hold, PRISM_HOLD_NONE);
	return ok;
}

static void view_clear(struct prism_tier_view v[PRISM_NR_TIERS])
{
	memset(v, 0, sizeof(struct prism_tier_view) * PRISM_NR_TIERS);
}

static void view_set(struct prism_tier_view v[PRISM_NR_TIERS], int tier,
		     int dir, unsigned int queued, unsigned long oldest)
{
	v[tier].dir[dir].queued = queued;
	v[tier].dir[dir].oldest = oldest;
}

TEST(classify_default_mapping)
{
	struct prism_tunables t = defaults();
	static const int be[8] = {
		PRISM_HIGH, PRISM_HIGH, PRISM_HIGH,
		PRISM_NORMAL, PRISM_NORMAL, PRISM_NORMAL,
		PRISM_LOW, PRISM_LOW,
	};
	int level;

	CHECK_EQ(prism_classify(PRISM_CLASS_RT, 0, &t), PRISM_HIGH);
	CHECK_EQ(prism_classify(PRISM_CLASS_RT, 7, &t), PRISM_HIGH);
	CHECK_EQ(prism_classify(PRISM_CLASS_IDLE, 0, &t), PRISM_LOW);
	CHECK_EQ(prism_classify(PRISM_CLASS_NONE, 0, &t), PRISM_NORMAL);
	CHECK_EQ(prism_classify(PRISM_CLASS_NONE, 7, &t), PRISM_NORMAL);
	for (level = 0; level < 8; level++)
		CHECK_EQ(prism_classify(PRISM_CLASS_BE, level, &t), be[level]);
}

TEST(classify_cutoffs_follow_be_tiers)
{
	struct prism_tunables t = defaults();

	t.be_high_max = 0;
	t.be_low_min = 7;
	CHECK_EQ(prism_classify(PRISM_CLASS_BE, 0, &t), PRISM_HIGH);
	CHECK_EQ(prism_classify(PRISM_CLASS_BE, 1, &t), PRISM_NORMAL);
	CHECK_EQ(prism_classify(PRISM_CLASS_BE, 6, &t), PRISM_NORMAL);
	CHECK_EQ(prism_classify(PRISM_CLASS_BE, 7, &t), PRISM_LOW);

	/* be_tiers=1 (-1 and 8): every BE level is NORMAL. */
	prism_set_be_tiers(&t, 1);
	for (int level = 0; level < 8; level++)
		CHECK_EQ(prism_classify(PRISM_CLASS_BE, level, &t),
			 PRISM_NORMAL);
	CHECK(prism_tunables_valid(&t));
	CHECK_EQ(prism_be_tiers(&t), 1);
	/* be_tiers=3 is the default mapping again. */
	prism_set_be_tiers(&t, 3);
	CHECK_EQ(prism_be_tiers(&t), 3);
	CHECK_EQ(t.be_high_max, defaults().be_high_max);
	CHECK_EQ(t.be_low_min, defaults().be_low_min);
	prism_set_be_tiers(&t, 1);
	/* Classes outside BE ignore the cut-offs. */
	CHECK_EQ(prism_classify(PRISM_CLASS_RT, 7, &t), PRISM_HIGH);
	CHECK_EQ(prism_classify(PRISM_CLASS_IDLE, 0, &t), PRISM_LOW);
	/* An unknown class (a future kernel's) is treated as NONE. */
	CHECK_EQ(prism_classify(5, 0, &t), PRISM_NORMAL);
}

TEST(classify_background_writeback_is_low)
{
	struct prism_tunables t = defaults();

	/* By default background writeback is LOW whatever its priority. */
	CHECK(t.writeback_low);
	CHECK_EQ(prism_classify_rq(PRISM_CLASS_NONE, 4, true, &t), PRISM_LOW);
	CHECK_EQ(prism_classify_rq(PRISM_CLASS_BE, 0, true, &t), PRISM_LOW);
	CHECK_EQ(prism_classify_rq(PRISM_CLASS_RT, 0, true, &t), PRISM_LOW);
	/* Everything else keeps its priority's tier. */
	CHECK_EQ(prism_classify_rq(PRISM_CLASS_NONE, 4, false, &t),
		 PRISM_NORMAL);
	CHECK_EQ(prism_classify_rq(PRISM_CLASS_RT, 0, false, &t), PRISM_HIGH);
	/* Off: the flusher's own priority decides, as for any request. */
	t.writeback_low = false;
	CHECK_EQ(prism_classify_rq(PRISM_CLASS_NONE, 4, true, &t),
		 PRISM_NORMAL);
	CHECK_EQ(prism_classify_rq(PRISM_CLASS_BE, 0, true, &t), PRISM_HIGH);
}

TEST(tunables_valid_rejects_crossed_cutoffs)
{
	struct prism_tunables t = defaults();

	CHECK(prism_tunables_valid(&t));
	t.be_high_max = 6;
	CHECK(!prism_tunables_valid(&t));
	t.be_high_max = 5;
	CHECK(prism_tunables_valid(&t));
	t.be_high_max = -1;
	t.be_low_min = 0;
	CHECK(prism_tunables_valid(&t));
	t.be_low_min = 9;
	CHECK(!prism_tunables_valid(&t));
	t.be_low_min = 8;
	t.be_high_max = -2;
	CHECK(!prism_tunables_valid(&t));
	t.be_high_max = 2;
	t.share[PRISM_LOW] = PRISM_SHARE_MAX + 1;
	CHECK(!prism_tunables_valid(&t));
	t.share[PRISM_LOW] = PRISM_SHARE_MAX;
	CHECK(prism_tunables_valid(&t));
	t.share[PRISM_NORMAL] = PRISM_SHARE_MAX + 1;
	CHECK(!prism_tunables_valid(&t));
}

TEST(empty_queues_choose_nothing)
{
	CHOOSE_SETUP;
	CHECK(!choose(v, &b, &t, 1000, &c));
}

TEST(strict_priority_high_normal_low)
{
	CHOOSE_SETUP;
	view_set(v, PRISM_LOW, PRISM_READ, 5, 100);
	view_set(v, PRISM_NORMAL, PRISM_READ, 5, 200);
	view_set(v, PRISM_HIGH, PRISM_WRITE, 1, 300);
	CHECK(choose(v, &b, &t, 301, &c));
	CHECK_EQ(c.tier, PRISM_HIGH);
	CHECK_EQ(c.dir, PRISM_WRITE);
	CHECK(!c.aged);

	view_set(v, PRISM_HIGH, PRISM_WRITE, 0, 0);
	CHECK(choose(v, &b, &t, 301, &c));
	CHECK_EQ(c.tier, PRISM_NORMAL);

	view_set(v, PRISM_NORMAL, PRISM_READ, 0, 0);
	CHECK(choose(v, &b, &t, 301, &c));
	CHECK_EQ(c.tier, PRISM_LOW);
	CHECK(!c.aged);	/* nothing above it waits: not a promotion */
}

TEST(aging_serves_lower_tier_after_expire)
{
	CHOOSE_SETUP;
	unsigned long arrival = 1000;

	view_set(v, PRISM_HIGH, PRISM_READ, 8, 5000);
	view_set(v, PRISM_LOW, PRISM_READ, 1, arrival);

	/* One jiffy short of prio_aging_expire: HIGH still goes first. */
	CHECK(choose(v, &b, &t, arrival + t.prio_aging_expire - 1, &c));
	CHECK_EQ(c.tier, PRISM_HIGH);

	/* At the expiry: the LOW FIFO head is served, flagged as aged. */
	CHECK(choose(v, &b, &t, arrival + t.prio_aging_expire, &c));
	CHECK_EQ(c.tier, PRISM_LOW);
	CHECK_EQ(c.dir, PRISM_READ);
	CHECK_EQ(c.take, PRISM_TAKE_FIFO);
	CHECK(c.aged);
	/* And the batch is closed so the next choice arbitrates afresh. */
	CHECK_EQ(b.tier, -1);
}

TEST(aging_picks_the_oldest_of_several)
{
	CHOOSE_SETUP;
	view_set(v, PRISM_HIGH, PRISM_READ, 8, 9000);
	view_set(v, PRISM_NORMAL, PRISM_WRITE, 2, 200);
	view_set(v, PRISM_LOW, PRISM_READ, 2, 100);
	view_set(v, PRISM_LOW, PRISM_WRITE, 2, 150);
	CHECK(choose(v, &b, &t, 100 + t.prio_aging_expire + 500, &c));
	CHECK_EQ(c.tier, PRISM_LOW);
	CHECK_EQ(c.dir, PRISM_READ);

	/* Aging never promotes above the highest waiting tier's own turn. */
	view_set(v, PRISM_HIGH, PRISM_READ, 0, 0);
	view_set(v, PRISM_LOW, PRISM_READ, 0, 0);
	view_set(v, PRISM_LOW, PRISM_WRITE, 0, 0);
	CHECK(choose(v, &b, &t, 200 + t.prio_aging_expire + 500, &c));
	CHECK_EQ(c.tier, PRISM_NORMAL);
	CHECK(!c.aged);
}

TEST(aging_zero_disables)
{
	CHOOSE_SETUP;

	t.prio_aging_expire = 0;
	view_set(v, PRISM_HIGH, PRISM_READ, 8, 1000000);
	view_set(v, PRISM_LOW, PRISM_READ, 1, 0);
	CHECK(choose(v, &b, &t, 1000000, &c));
	CHECK_EQ(c.tier, PRISM_HIGH);
}

TEST(aging_survives_jiffies_wrap)
{
	CHOOSE_SETUP;
	unsigned long arrival = (unsigned long)-100;	/* just before wrap */

	view_set(v, PRISM_HIGH, PRISM_READ, 8, 5);
	view_set(v, PRISM_LOW, PRISM_READ, 1, arrival);
	CHECK(choose(v, &b, &t, arrival + 50, &c));
	CHECK_EQ(c.tier, PRISM_HIGH);
	CHECK(choose(v, &b, &t, arrival + t.prio_aging_expire + 1, &c));
	CHECK_EQ(c.tier, PRISM_LOW);
}

TEST(batch_continues_up_to_fifo_batch)
{
	CHOOSE_SETUP;
	unsigned int i;

	view_set(v, PRISM_NORMAL, PRISM_READ, 100, 10);
	for (i = 1; i <= t.fifo_batch; i++) {
		CHECK(choose(v, &b, &t, 20, &c));
		CHECK_EQ(c.take, PRISM_TAKE_NEXT);
		CHECK_EQ(b.count, i);
	}
	/* The batch is full: a new one starts, looking at the FIFO again. */
	CHECK(choose(v, &b, &t, 20, &c));
	CHECK_EQ(b.count, 1);
}

TEST(random_reads_go_in_arrival_order)
{
	CHOOSE_SETUP;
	/* A sequential flow's reads, and any flow's writes, in sort order. */
	view_set(v, PRISM_NORMAL, PRISM_READ, 3, 10);
	CHECK(choose(v, &b, &t, 20, &c));
	CHECK_EQ(c.take, PRISM_TAKE_NEXT);
	/* A random flow's reads from the FIFO head, though not expired. */
	prism_batch_reset(&b);
	v[PRISM_NORMAL].random = true;
	CHECK(choose(v, &b, &t, 20, &c));
	CHECK_EQ(c.dir, PRISM_READ);
	CHECK_EQ(c.take, PRISM_TAKE_FIFO);
	CHECK(!c.expired);
	prism_batch_reset(&b);
	view_set(v, PRISM_NORMAL, PRISM_READ, 0, 0);
	view_set(v, PRISM_NORMAL, PRISM_WRITE, 3, 10);
	CHECK(choose(v, &b, &t, 20, &c));
	CHECK_EQ(c.dir, PRISM_WRITE);
	CHECK_EQ(c.take, PRISM_TAKE_NEXT);
}

TEST(higher_tier_breaks_a_batch)
{
	CHOOSE_SETUP;
	view_set(v, PRISM_LOW, PRISM_READ, 100, 10);
	CHECK(choose(v, &b, &t, 20, &c));
	CHECK(choose(v, &b, &t, 20, &c));
	CHECK_EQ(b.tier, PRISM_LOW);
	CHECK_EQ(b.count, 2);
	view_set(v, PRISM_HIGH, PRISM_READ, 1, 19);
	CHECK(choose(v, &b, &t, 20, &c));
	CHECK_EQ(c.tier, PRISM_HIGH);
	CHECK_EQ(b.tier, PRISM_HIGH);
	CHECK_EQ(b.count, 1);
}

TEST(expired_fifo_head_starts_the_batch)
{
	CHOOSE_SETUP;
	view_set(v, PRISM_NORMAL, PRISM_READ, 3, 100);
	CHECK(choose(v, &b, &t, 100 + t.fifo_expire[PRISM_READ] - 1, &c));
	CHECK_EQ(c.take, PRISM_TAKE_NEXT);
	CHECK(!c.expired);

	prism_batch_reset(&b);
	CHECK(choose(v, &b, &t, 100 + t.fifo_expire[PRISM_READ], &c));
	CHECK_EQ(c.take, PRISM_TAKE_FIFO);
	CHECK(c.expired);
}

TEST(writes_starved_limits_read_preference)
{
	CHOOSE_SETUP;
	int reads = 0, i;

	t.fifo_batch = 1;	/* every choice starts a new batch */
	view_set(v, PRISM_NORMAL, PRISM_READ, 100, 10);
	view_set(v, PRISM_NORMAL, PRISM_WRITE, 100, 10);
	/* mq-deadline: writes_starved read batches, then one write batch. */
	for (i = 0; i <= (int)t.writes_starved; i++) {
		CHECK(choose(v, &b, &t, 20, &c));
		reads += c.dir == PRISM_READ;
	}
	CHECK_EQ(reads, t.writes_starved);
	CHECK_EQ(c.dir, PRISM_WRITE);
	CHECK_EQ(b.starved, 0);
	/* Only writes queued: writes, whatever starved says. */
	view_set(v, PRISM_NORMAL, PRISM_READ, 0, 0);
	CHECK(choose(v, &b, &t, 20, &c));
	CHECK_EQ(c.dir, PRISM_WRITE);
}

TEST(random_stream_ends_a_sorted_batch)
{
	struct prism_tunables t = defaults();
	struct prism_batch b;

	prism_batch_reset(&b);
	b.tier = PRISM_NORMAL;
	b.count = 1;
	prism_note_dispatch(&b, &t, true, true, true);	/* sequential keeps */
	CHECK_EQ(b.count, 1);
	prism_note_dispatch(&b, &t, false, false, false);	/* FIFO, alone: keeps */
	CHECK_EQ(b.count, 1);
	prism_note_dispatch(&b, &t, true, false, false);	/* random on disk ends */
	CHECK_EQ(b.count, t.fifo_batch);
	b.count = 1;
	prism_note_dispatch(&b, &t, false, true, true);	/* FIFO, others: ends */
	CHECK_EQ(b.count, t.fifo_batch);
}

TEST(stream_detects_sequential)
{
	struct prism_stream s = { 0 };
	struct prism_tunables t = defaults();
	unsigned long long pos = 1000;
	bool seq = false;
	int i;

	for (i = 0; i < 10; i++) {
		seq = prism_stream_update(&s, pos, 256, t.seq_gap);
		if (i < PRISM_SEQ_THRESHOLD)
			CHECK(!seq);	/* needs THRESHOLD hits after the first */
		pos += 256;
	}
	CHECK(seq);
	CHECK_EQ(s.score, PRISM_SEQ_SCORE_MAX);
	/* A small skip (within seq_gap) still counts. */
	CHECK(prism_stream_update(&s, pos + t.seq_gap, 8, t.seq_gap));
}

TEST(stream_detects_random)
{
	struct prism_stream s = { 0 };
	struct prism_tunables t = defaults();
	unsigned long long pos = 12345;
	int i, seq = 0;

	for (i = 0; i < 50; i++) {
		seq += prism_stream_update(&s, pos, 8, t.seq_gap);
		pos = (pos * 1103515245ULL + 12345ULL) % 100000000ULL;
	}
	CHECK_EQ(seq, 0);
	CHECK_EQ(s.score, 0);
}

TEST(stream_turns_random_after_seeks)
{
	struct prism_stream s = { 0 };
	struct prism_tunables t = defaults();
	unsigned long long pos = 0;
	int i;

	for (i = 0; i < 12; i++, pos += 8)
		prism_stream_update(&s, pos, 8, t.seq_gap);
	CHECK(s.score >= PRISM_SEQ_THRESHOLD);
	/* Seeks lose two points each: sequential no more after three. */
	CHECK_EQ(s.score, PRISM_SEQ_SCORE_MAX);
	CHECK(prism_stream_update(&s, 1000000, 8, t.seq_gap));
	CHECK(prism_stream_update(&s, 5000000, 8, t.seq_gap));
	CHECK(!prism_stream_update(&s, 9000000, 8, t.seq_gap));
}

TEST(tier_depth_never_zero)
{
	struct prism_tunables t = defaults();

	CHECK_EQ(prism_tier_depth(PRISM_HIGH, 64, &t), 64);
	CHECK_EQ(prism_tier_depth(PRISM_NORMAL, 64, &t), 48);
	CHECK_EQ(prism_tier_depth(PRISM_LOW, 64, &t), 32);
	CHECK_EQ(prism_tier_depth(PRISM_LOW, 1, &t), 1);
	CHECK_EQ(prism_tier_depth(PRISM_NORMAL, 1, &t), 1);
	t.low_depth = 1;
	CHECK_EQ(prism_tier_depth(PRISM_LOW, 8, &t), 1);
	CHECK_EQ(prism_tier_depth(PRISM_LOW, 0, &t), 1);
	t.low_depth = 100;
	CHECK_EQ(prism_tier_depth(PRISM_LOW, 8, &t), 8);
}

/*
 * Dispatch @n times with the tiers in @busy always backlogged (reads, in
 * arrival order at time 10, never expiring before @now = 20) and count
 * what each tier got.
 */
/* What sbitmap grants with a per-word shallow depth @d (6.1's meaning). */
static u32 granted(u32 d, u32 sb_depth, u32 shift)
{
	u32 bits = 1U << shift, total = 0, left = sb_depth;

	while (left) {
		u32 word = left < bits ? left : bits;

		total += word < d ? word : d;
		left -= word;
	}
	return total;
}

TEST(word_depth_is_the_largest_within_the_limit)
{
	u32 shift, sb_depth, depth;

	/* Full words, the partial word sbitmap_resize() leaves, one word. */
	for (shift = 0; shift <= 6; shift++) {
		for (sb_depth = 1; sb_depth <= 300; sb_depth++) {
			u32 words = (sb_depth + (1U << shift) - 1) >> shift;

			for (depth = 1; depth < sb_depth; depth++) {
				u32 d = prism_word_depth(depth, sb_depth, shift);

				CHECK(d >= 1 && d <= (1U << shift));
				if (depth >= words) {
					CHECK(granted(d, sb_depth, shift) <= depth);
					/* The largest: one more bit would exceed. */
					if (d < (1U << shift))
						CHECK(granted(d + 1, sb_depth, shift) > depth ||
						      granted(d + 1, sb_depth, shift) ==
						      granted(d, sb_depth, shift));
				} else {
					/* Below one bit per word: the closest it gets. */
					CHECK_EQ(d, 1);
				}
			}
		}
	}
}

TEST(word_depth_after_lowering_nr_requests)
{
	/*
	 * 128 tags (shift 5, four words of 32) lowered to 16: one partial
	 * word of 16 bits. Half of it is 8, not (8 << 5) / 16 = 16, which the
	 * full-word conversion gives and which is no limit at all.
	 */
	CHECK_EQ(prism_word_depth(8, 16, 5), 8);
	CHECK_EQ(granted(prism_word_depth(8, 16, 5), 16, 5), 8);
	/* 256 tags (four words of 64) lowered to 100: 64 + 36 bits. */
	CHECK_EQ(granted(prism_word_depth(50, 100, 6), 100, 6), 50);
	/* Untouched full words: as the kernel's own conversion. */
	CHECK_EQ(prism_word_depth(64, 128, 5), 16);
}

TEST(alloc_depth_limits_only_below_an_active_tier)
{
	struct prism_tunables t = defaults();

	CHECK_EQ(prism_alloc_depth(PRISM_HIGH, true, 64, &t), 0);
	CHECK_EQ(prism_alloc_depth(PRISM_NORMAL, false, 64, &t), 0);
	CHECK_EQ(prism_alloc_depth(PRISM_LOW, false, 64, &t), 0);
	CHECK_EQ(prism_alloc_depth(PRISM_NORMAL, true, 64, &t), 48);
	CHECK_EQ(prism_alloc_depth(PRISM_LOW, true, 64, &t), 32);
	/* At least one tag, and a limit of everything is no limit. */
	CHECK_EQ(prism_alloc_depth(PRISM_LOW, true, 1, &t), 0);
	CHECK_EQ(prism_alloc_depth(PRISM_LOW, true, 2, &t), 1);
	t.low_depth = 100;
	CHECK_EQ(prism_alloc_depth(PRISM_LOW, true, 64, &t), 0);
}

TEST(tier_active_while_owning_and_shortly_after)
{
	unsigned long window = PRISM_ACTIVE_MS * HZ / 1000;
	unsigned long done = (unsigned long)-5;	/* across the wrap */

	CHECK(prism_tier_active(1, 0, 1000000, HZ));
	CHECK(prism_tier_active(0, done, done, HZ));
	CHECK(prism_tier_active(0, done, done + window - 1, HZ));
	CHECK(!prism_tier_active(0, done, done + window, HZ));
	/* A tier that never completed anything is idle once time moves on. */
	CHECK(!prism_tier_active(0, 0, 100000, HZ));
}

TEST(alloc_tier_from_the_threads_last_request)
{
	u32 key = prism_recent_key(4194303, PRISM_LOW, 0);	/* PID_MAX_LIMIT - 1 */

	CHECK_EQ(prism_alloc_tier(key, 4194303, PRISM_NORMAL), PRISM_LOW);
	/* Another thread in the slot, an empty slot, pid 0: the fallback. */
	CHECK_EQ(prism_alloc_tier(key, 77, PRISM_NORMAL), PRISM_NORMAL);
	CHECK_EQ(prism_alloc_tier(0, 77, PRISM_HIGH), PRISM_HIGH);
	CHECK_EQ(prism_alloc_tier(prism_recent_key(0, PRISM_LOW, 0), 0,
				  PRISM_HIGH), PRISM_HIGH);
	/* A corrupt tier value is never used. */
	CHECK_EQ(prism_alloc_tier((77U << 2) | 3, 77, PRISM_NORMAL), PRISM_NORMAL);
	CHECK_EQ(prism_alloc_tier(prism_recent_key(77, PRISM_HIGH, 0), 77,
				  PRISM_LOW), PRISM_HIGH);
	CHECK(prism_recent_slot(77) < PRISM_NR_RECENT);
	/*
	 * The group (a slot plus one, up to 63) rides above the largest pid
	 * and changes neither the pid nor the tier read back.
	 */
	key = prism_recent_key(4194303, PRISM_NORMAL, 63);
	CHECK_EQ(prism_alloc_tier(key, 4194303, PRISM_LOW), PRISM_NORMAL);
	CHECK_EQ(prism_alloc_group(key), 63);
	CHECK_EQ(prism_alloc_tier(key, 4194303 & ~1U, PRISM_LOW), PRISM_LOW);
	CHECK_EQ(prism_alloc_group(prism_recent_key(5, PRISM_LOW, 0)), 0);
	CHECK(!(prism_recent_key(4194303, PRISM_LOW, 63) & (1U << 31)));
}

static void dispatch_backlogged(struct prism_tunables *t, const bool busy[],
				int n, unsigned int got[PRISM_NR_TIERS])
{
	struct prism_tier_view v[PRISM_NR_TIERS];
	struct prism_batch b;
	struct prism_choice c;
	int i, tier;

	view_clear(v);
	prism_batch_reset(&b);
	for (tier = 0; tier < PRISM_NR_TIERS; tier++) {
		got[tier] = 0;
		if (busy[tier])
			view_set(v, tier, PRISM_READ, 100, 10);
	}
	for (i = 0; i < n; i++) {
		CHECK(choose(v, &b, t, 20, &c));
		got[c.tier]++;
	}
}

TEST(share_gives_low_its_part_of_a_busy_device)
{
	struct prism_tunables t = defaults();
	const bool busy[PRISM_NR_TIERS] = { true, false, true };
	unsigned int got[PRISM_NR_TIERS];

	/* Default: one dispatch in ten for LOW, exactly. */
	dispatch_backlogged(&t, busy, 1000, got);
	CHECK_EQ(got[PRISM_LOW], 100);
	CHECK_EQ(got[PRISM_HIGH], 900);

	/* A share that does not divide 100 is met in the long run. */
	t.share[PRISM_LOW] = 30;
	dispatch_backlogged(&t, busy, 1000, got);
	CHECK_EQ(got[PRISM_LOW], 300);

	/* 0: strict priority, as with no share at all. */
	t.share[PRISM_LOW] = 0;
	dispatch_backlogged(&t, busy, 1000, got);
	CHECK_EQ(got[PRISM_LOW], 0);
}

TEST(shares_of_three_busy_tiers)
{
	struct prism_tunables t = defaults();
	const bool busy[PRISM_NR_TIERS] = { true, true, true };
	unsigned int got[PRISM_NR_TIERS];

	/* LOW: 10% of all; NORMAL: 25% of what HIGH and NORMAL get. */
	dispatch_backlogged(&t, busy, 4000, got);
	CHECK_EQ(got[PRISM_LOW], 400);
	CHECK_EQ(got[PRISM_NORMAL], 900);
	CHECK_EQ(got[PRISM_HIGH], 2700);

	/* Without HIGH, NORMAL leads and LOW keeps its tenth. */
	dispatch_backlogged(&t, (const bool[]){ false, true, true }, 1000, got);
	CHECK_EQ(got[PRISM_LOW], 100);
	CHECK_EQ(got[PRISM_NORMAL], 900);
}

TEST(share_is_not_banked_while_idle)
{
	CHOOSE_SETUP;
	int i;

	/* HIGH alone for a long time: LOW earns nothing while empty. */
	view_set(v, PRISM_HIGH, PRISM_READ, 100, 10);
	for (i = 0; i < 500; i++)
		CHECK(choose(v, &b, &t, 20, &c));
	CHECK_EQ(b.credit[PRISM_LOW], 0);

	/* LOW arrives: nine HIGH dispatches pass before it is owed one. */
	view_set(v, PRISM_LOW, PRISM_READ, 5, 20);
	for (i = 0; i < 9; i++) {
		CHECK(choose(v, &b, &t, 21, &c));
		CHECK_EQ(c.tier, PRISM_HIGH);
	}
	CHECK(choose(v, &b, &t, 21, &c));
	CHECK_EQ(c.tier, PRISM_LOW);
	CHECK(c.shared);
	CHECK(!c.aged);
	CHECK_EQ(b.tier, -1);	/* out of turn: the batch is closed */

	/* Served in its own right (HIGH empty), it starts from zero again. */
	for (i = 0; i < 5; i++)
		CHECK(choose(v, &b, &t, 21, &c));
	view_set(v, PRISM_HIGH, PRISM_READ, 0, 0);
	CHECK(choose(v, &b, &t, 21, &c));
	CHECK_EQ(c.tier, PRISM_LOW);
	CHECK(!c.shared);
	CHECK_EQ(b.credit[PRISM_LOW], 0);
}

TEST(share_takes_the_tier_in_its_own_order)
{
	CHOOSE_SETUP;
	int i;

	t.share[PRISM_LOW] = 50;	/* owed after every HIGH dispatch */
	view_set(v, PRISM_HIGH, PRISM_READ, 100, 10);
	view_set(v, PRISM_LOW, PRISM_READ, 4, 12);
	view_set(v, PRISM_LOW, PRISM_WRITE, 4, 11);
	CHECK(choose(v, &b, &t, 20, &c));
	CHECK_EQ(c.tier, PRISM_HIGH);
	/* The older FIFO (writes here), next in sort order: not expired. */
	CHECK(choose(v, &b, &t, 20, &c));
	CHECK(c.shared);
	CHECK_EQ(c.tier, PRISM_LOW);
	CHECK_EQ(c.dir, PRISM_WRITE);
	CHECK_EQ(c.take, PRISM_TAKE_NEXT);
	CHECK(!c.expired);
	/* Past the write deadline: from the FIFO head. */
	for (i = 0; i < 2; i++)
		CHECK(choose(v, &b, &t, 11 + t.fifo_expire[PRISM_WRITE], &c));
	CHECK(c.shared);
	CHECK_EQ(c.take, PRISM_TAKE_FIFO);
	CHECK(c.expired);
}

TEST(aging_comes_before_share)
{
	CHOOSE_SETUP;
	int i;

	view_set(v, PRISM_HIGH, PRISM_READ, 100, 5000);
	view_set(v, PRISM_NORMAL, PRISM_READ, 1, 100);
	view_set(v, PRISM_LOW, PRISM_READ, 100, 4000);
	/* LOW is owed its share at the tenth choice, but NORMAL has aged. */
	for (i = 0; i < 9; i++)
		CHECK(choose(v, &b, &t, 4001, &c));
	CHECK(choose(v, &b, &t, 100 + t.prio_aging_expire, &c));
	CHECK_EQ(c.tier, PRISM_NORMAL);
	CHECK(c.aged);
	CHECK(!c.shared);
	/* LOW keeps what it is owed and is served next. */
	view_set(v, PRISM_NORMAL, PRISM_READ, 0, 0);
	CHECK(choose(v, &b, &t, 4001, &c));
	CHECK_EQ(c.tier, PRISM_LOW);
	CHECK(c.shared);
}

/*
 * A small discrete simulation: each tick the device takes one request;
 * HIGH always has work (it saturates the device), a LOW request arrives
 * every 50 ticks. With aging every LOW request is served within
 * prio_aging_expire plus the queue it finds; without it none is. With a
 * share (@share percent) one is served within 100 / share ticks.
 */
static unsigned int simulate(unsigned long aging, u32 share,
			     unsigned long *max_wait)
{
	struct prism_tunables t = defaults();
	struct prism_tier_view v[PRISM_NR_TIERS];
	unsigned long low_arrivals[4096];
	unsigned int head = 0, tail = 0, served_low = 0;
	struct prism_batch b;
	struct prism_choice c;
	unsigned long now;

	t.prio_aging_expire = aging;
	t.share[PRISM_LOW] = share;
	prism_batch_reset(&b);
	*max_wait = 0;
	for (now = 1; now <= 20000; now++) {
		if (now % 50 == 0)
			low_arrivals[tail++] = now;
		view_clear(v);
		view_set(v, PRISM_HIGH, PRISM_READ, 4, now);
		if (tail > head)
			view_set(v, PRISM_LOW, PRISM_READ, tail - head,
				 low_arrivals[head]);
		if (!choose(v, &b, &t, now, &c))
			continue;
		if (c.tier == PRISM_LOW) {
			unsigned long wait = now - low_arrivals[head++];

			if (wait > *max_wait)
				*max_wait = wait;
			served_low++;
		}
	}
	return served_low;
}

TEST(simulated_saturation_aging_bounds_low_wait)
{
	unsigned long max_wait;
	unsigned int served;

	served = simulate(100, 0, &max_wait);
	/* 400 LOW arrivals; all but those still within their wait served. */
	CHECK(served >= 397);
	CHECK(max_wait <= 100 + 3);
	CHECK(max_wait >= 100);

	served = simulate(0, 0, &max_wait);
	CHECK_EQ(served, 0);
}

TEST(simulated_saturation_share_bounds_low_wait)
{
	unsigned long max_wait;
	unsigned int served;

	/*
	 * Aging off: the share alone serves each LOW request after nine HIGH
	 * dispatches; all but the last arrival, on the final tick, are served.
	 */
	served = simulate(0, 10, &max_wait);
	CHECK_EQ(served, 399);
	CHECK_EQ(max_wait, 9);
}

/* In-flight control: anticipation and depth (nanoseconds). */
#define MS 1000000ULL
#define US 1000ULL

TEST(sync_writes_go_before_background_writes)
{
	CHOOSE_SETUP;

	/* Writeback queued long before an fsync's write: the fsync first. */
	view_set(v, PRISM_NORMAL, PRISM_WRITE, 40, 100);
	view_set(v, PRISM_NORMAL, PRISM_SYNC_WRITE, 1, 150);
	CHECK(choose(v, &b, &t, 160, &c));
	CHECK_EQ(c.dir, PRISM_SYNC_WRITE);
	CHECK_EQ(c.take, PRISM_TAKE_FIFO);	/* arrival order, always */
	CHECK_EQ(b.starved, 1);
	/* Background writes still get their turn after writes_starved. */
	b.tier = -1;
	CHECK(choose(v, &b, &t, 160, &c));
	CHECK_EQ(c.dir, PRISM_SYNC_WRITE);
	b.tier = -1;
	CHECK(choose(v, &b, &t, 160, &c));
	CHECK_EQ(c.dir, PRISM_WRITE);
	CHECK_EQ(b.starved, 0);
}

TEST(reads_and_sync_writes_by_age)
{
	CHOOSE_SETUP;

	view_set(v, PRISM_NORMAL, PRISM_READ, 5, 120);
	view_set(v, PRISM_NORMAL, PRISM_SYNC_WRITE, 2, 110);
	CHECK(choose(v, &b, &t, 130, &c));
	CHECK_EQ(c.dir, PRISM_SYNC_WRITE);
	/* A sync batch goes on from its own FIFO. */
	CHECK(choose(v, &b, &t, 130, &c));
	CHECK_EQ(c.dir, PRISM_SYNC_WRITE);
	CHECK_EQ(c.take, PRISM_TAKE_FIFO);
	view_set(v, PRISM_NORMAL, PRISM_SYNC_WRITE, 0, 0);
	b.tier = -1;
	CHECK(choose(v, &b, &t, 130, &c));
	CHECK_EQ(c.dir, PRISM_READ);
}

TEST(sync_write_deadline_and_aging)
{
	CHOOSE_SETUP;

	CHECK_EQ(t.fifo_expire[PRISM_SYNC_WRITE], HZ / 2);
	view_set(v, PRISM_NORMAL, PRISM_SYNC_WRITE, 1, 100);
	CHECK(choose(v, &b, &t, 100 + HZ / 2 - 1, &c));
	CHECK(!c.expired);
	b.tier = -1;
	CHECK(choose(v, &b, &t, 100 + HZ / 2, &c));
	CHECK(c.expired);
	/* Aging looks at a lower tier's sync writes too. */
	view_clear(v);
	prism_batch_reset(&b);
	t.share[PRISM_LOW] = 0;
	view_set(v, PRISM_HIGH, PRISM_READ, 10, 5000);
	view_set(v, PRISM_LOW, PRISM_SYNC_WRITE, 1, 100);
	CHECK(choose(v, &b, &t, 100 + t.prio_aging_expire, &c));
	CHECK_EQ(c.tier, PRISM_LOW);
	CHECK_EQ(c.dir, PRISM_SYNC_WRITE);
	CHECK(c.aged);
	/* And a lower tier with only sync writes is queued, for shares. */
	t.share[PRISM_LOW] = 50;
	prism_batch_reset(&b);
	CHECK(choose(v, &b, &t, 200, &c));
	CHECK_EQ(c.tier, PRISM_HIGH);
	CHECK(choose(v, &b, &t, 200, &c));
	CHECK_EQ(c.tier, PRISM_LOW);
	CHECK(c.shared);
}

TEST(think_time_mean_and_cap)
{
	struct prism_think th = { 0 };
	int i;

	/* No completion yet: nothing to measure from. */
	prism_think_sample(&th, 5 * MS);
	CHECK_EQ(th.samples, 0);

	th.last_done = 10 * MS;
	prism_think_sample(&th, 12 * MS);
	CHECK_EQ(th.samples, 1);
	CHECK_EQ(th.mean, 2 * MS);	/* the first sample, unbiased */
	th.last_done = 20 * MS;
	prism_think_sample(&th, 24 * MS);
	CHECK_EQ(th.mean, 3 * MS);	/* mean of 2 and 4 */

	/* A long silence counts as the cap, not as its length. */
	th.last_done = 30 * MS;
	prism_think_sample(&th, 30 * MS + 10000 * MS);
	CHECK_EQ(th.mean, (2 * MS + 4 * MS + PRISM_THINK_CAP) / 3);

	/* Then short gaps bring it down again, 1/8 at a time. */
	for (i = 0; i < 40; i++) {
		th.last_done = 100000 * MS;
		prism_think_sample(&th, 100000 * MS + 500 * US);
	}
	CHECK_EQ(th.samples, PRISM_THINK_SAMPLES);
	CHECK(th.mean < 1 * MS);
}

TEST(anticipated_only_quick_tiers_within_the_window)
{
	struct prism_think th = { 0 };
	int i;

	th.last_done = 100 * MS;
	for (i = 0; i < PRISM_THINK_MIN; i++) {
		CHECK(!prism_anticipated(&th, 100 * MS + 1, 2 * MS));
		prism_think_sample(&th, 100 * MS + 300 * US);
	}
	th.last_done = 200 * MS;
	CHECK(prism_anticipated(&th, 200 * MS, 2 * MS));
	CHECK(prism_anticipated(&th, 200 * MS + 2 * MS - 1, 2 * MS));
	/* The window closes. */
	CHECK(!prism_anticipated(&th, 200 * MS + 2 * MS, 2 * MS));
	/* 0 disables. */
	CHECK(!prism_anticipated(&th, 200 * MS + 1, 0));
	/* A tier slower to come back than the window is never waited for. */
	th.mean = 3 * MS;
	CHECK(!prism_anticipated(&th, 200 * MS + 1, 2 * MS));
}

static const struct prism_flight depth1 = {
	.depth = 1, .lower_limit = 1, .lower_duty = PRISM_DUTY_FULL
};

TEST(lower_tier_held_while_higher_anticipated)
{
	CHOOSE_SETUP;
	enum prism_hold hold;

	view_set(v, PRISM_LOW, PRISM_READ, 50, 10);
	v[PRISM_HIGH].anticipated = true;
	CHECK(!mech_choose(v, &b, &t, &unlimited, 20, &c, &hold));
	CHECK_EQ(hold, PRISM_HOLD_WINDOW);
	/* NORMAL anticipated holds LOW too, and HIGH is never held. */
	v[PRISM_HIGH].anticipated = false;
	v[PRISM_NORMAL].anticipated = true;
	CHECK(!mech_choose(v, &b, &t, &unlimited, 20, &c, &hold));
	CHECK_EQ(hold, PRISM_HOLD_WINDOW);
	view_set(v, PRISM_HIGH, PRISM_READ, 1, 15);
	CHECK(mech_choose(v, &b, &t, &unlimited, 20, &c, &hold));
	CHECK_EQ(c.tier, PRISM_HIGH);
	/* The window over, LOW goes. */
	view_clear(v);
	view_set(v, PRISM_LOW, PRISM_READ, 50, 10);
	CHECK(mech_choose(v, &b, &t, &unlimited, 20, &c, &hold));
	CHECK_EQ(c.tier, PRISM_LOW);
	CHECK_EQ(hold, PRISM_HOLD_NONE);
}

TEST(no_hold_for_a_tier_that_cannot_get_a_tag)
{
	CHOOSE_SETUP;
	enum prism_hold hold;
	struct prism_flight tagless = depth1;

	/* HIGH anticipated, recent and in the controller's limit: held. */
	view_set(v, PRISM_LOW, PRISM_READ, 8, 10);
	v[PRISM_HIGH].anticipated = true;
	v[PRISM_HIGH].recent = true;
	tagless.depth = 64;
	tagless.lower_limit = 1;
	v[PRISM_LOW].inflight = 1;
	CHECK(!mech_choose(v, &b, &t, &tagless, 20, &c, &hold));
	CHECK_EQ(hold, PRISM_HOLD_WINDOW);
	/* LOW owns every tag HIGH could take: nothing held for HIGH. */
	tagless.tagless = 1U << PRISM_HIGH;
	CHECK(mech_choose(v, &b, &t, &tagless, 20, &c, &hold));
	CHECK_EQ(c.tier, PRISM_LOW);
	CHECK(c.unheld);
	CHECK_EQ(hold, PRISM_HOLD_NONE);
	/* Past the window LOW is still kept to the limit, then not. */
	v[PRISM_HIGH].anticipated = false;
	tagless.tagless = 0;
	CHECK(!mech_choose(v, &b, &t, &tagless, 20, &c, &hold));
	CHECK_EQ(hold, PRISM_HOLD_DEPTH);
	tagless.tagless = 1U << PRISM_HIGH;
	CHECK(mech_choose(v, &b, &t, &tagless, 20, &c, &hold));
	CHECK(c.unheld);
	/* A tagless tier below the guard does not lift the guard's hold. */
	tagless.tagless = 1U << PRISM_NORMAL;
	v[PRISM_HIGH].anticipated = true;
	CHECK(!mech_choose(v, &b, &t, &tagless, 20, &c, &hold));
	CHECK_EQ(hold, PRISM_HOLD_WINDOW);
	/* Nor does one for a tier that holds nothing back: plain dispatch. */
	view_clear(v);
	view_set(v, PRISM_HIGH, PRISM_READ, 1, 15);
	tagless.tagless = 1U << PRISM_HIGH;
	CHECK(mech_choose(v, &b, &t, &tagless, 20, &c, &hold));
	CHECK_EQ(c.tier, PRISM_HIGH);
	CHECK(!c.unheld);
}

TEST(a_sync_write_chain_holds_low_but_not_normal)
{
	CHOOSE_SETUP;
	enum prism_hold hold;

	/* HIGH's fsync data is written; its journal comes from jbd2, BE3. */
	view_set(v, PRISM_LOW, PRISM_WRITE, 50, 10);
	v[PRISM_HIGH].chained = true;
	CHECK(!mech_choose(v, &b, &t, &unlimited, 20, &c, &hold));
	CHECK_EQ(hold, PRISM_HOLD_WINDOW);
	/* The chain's next link, at NORMAL, is not held for it. */
	view_set(v, PRISM_NORMAL, PRISM_SYNC_WRITE, 1, 15);
	CHECK(mech_choose(v, &b, &t, &unlimited, 20, &c, &hold));
	CHECK_EQ(c.tier, PRISM_NORMAL);
	/* A NORMAL chain (the journal's own) holds LOW as well. */
	view_clear(v);
	view_set(v, PRISM_LOW, PRISM_READ, 50, 10);
	v[PRISM_NORMAL].chained = true;
	CHECK(!mech_choose(v, &b, &t, &unlimited, 20, &c, &hold));
	CHECK_EQ(hold, PRISM_HOLD_WINDOW);
	/* Aging passes the chain: LOW never starves. */
	CHECK(mech_choose(v, &b, &t, &unlimited, 10 + t.prio_aging_expire,
			  &c, &hold));
	CHECK_EQ(c.tier, PRISM_LOW);
	CHECK(c.aged);
	/* The chain over, LOW goes. */
	v[PRISM_NORMAL].chained = false;
	CHECK(mech_choose(v, &b, &t, &unlimited, 20, &c, &hold));
	CHECK_EQ(c.tier, PRISM_LOW);
}

TEST(a_flow_wait_gives_way_to_sync_writes_of_its_tier)
{
	struct prism_tier_view v[PRISM_NR_TIERS];

	view_clear(v);
	/* The committer waited for: reads of another flow do not matter. */
	view_set(v, PRISM_NORMAL, PRISM_READ, 3, 10);
	view_set(v, PRISM_NORMAL, PRISM_WRITE, 3, 10);
	CHECK(!prism_flow_wait_yields(&v[PRISM_NORMAL]));
	/* jbd2's journal blocks, the committer's next link, are queued. */
	view_set(v, PRISM_NORMAL, PRISM_SYNC_WRITE, 1, 12);
	CHECK(prism_flow_wait_yields(&v[PRISM_NORMAL]));
}

TEST(a_chain_is_waited_for_only_while_its_links_come_quickly)
{
	struct prism_think th = { 0 };
	int i;

	/* Journal blocks 0.4 ms after the data, the flush 0.3 ms after. */
	for (i = 0; i < PRISM_THINK_MIN; i++) {
		th.last_done = (100 + i) * MS;
		CHECK(!prism_chained(&th, th.last_done + 1, 8 * MS));
		prism_chain_sample(&th, th.last_done + 400 * US, 8 * MS);
	}
	th.last_done = 200 * MS;
	CHECK(prism_chained(&th, 200 * MS + 7 * MS, 8 * MS));
	CHECK(!prism_chained(&th, 200 * MS + 8 * MS, 8 * MS));
	/* An O_SYNC writer that thinks 20 ms between writes: never. */
	for (i = 0; i < PRISM_THINK_SAMPLES; i++) {
		th.last_done = (300 + 30 * i) * MS;
		prism_chain_sample(&th, th.last_done + 20 * MS, 8 * MS);
	}
	CHECK(!prism_chained(&th, th.last_done + 1, 8 * MS));
}

TEST(a_chain_with_some_long_gaps_is_still_waited_for)
{
	struct prism_think th = { 0 };
	int i;

	/*
	 * Two gaps in three of 1 ms, one of 60 ms (the committer preempted):
	 * a mean of 20 ms, above the 8 ms window, but most links come
	 * within it.
	 */
	for (i = 0; i < 30; i++) {
		th.last_done = (100 + 100 * i) * MS;
		prism_chain_sample(&th, th.last_done + (i % 3 == 2 ? 60 : 1) * MS,
				   8 * MS);
	}
	CHECK(th.mean > 8 * MS);
	CHECK(prism_chained(&th, th.last_done + 1, 8 * MS));
	/* Two in three long: no longer. */
	for (i = 0; i < 30; i++) {
		th.last_done = (4000 + 100 * i) * MS;
		prism_chain_sample(&th, th.last_done + (i % 3 == 2 ? 1 : 60) * MS,
				   8 * MS);
	}
	CHECK(!prism_chained(&th, th.last_done + 1, 8 * MS));
	/* A window not known yet leaves the part as it was. */
	i = th.quick;
	prism_chain_sample(&th, th.last_done + MS, 0);
	CHECK_EQ(th.quick, (u32)i);
}

TEST(lower_tier_held_while_the_device_is_full)
{
	CHOOSE_SETUP;
	struct prism_flight f = {
		.depth = 4, .lower_limit = 4, .lower_duty = PRISM_DUTY_FULL
	};
	enum prism_hold hold;

	view_set(v, PRISM_LOW, PRISM_READ, 50, 10);
	v[PRISM_HIGH].inflight = 1;
	v[PRISM_LOW].inflight = 2;
	CHECK(mech_choose(v, &b, &t, &f, 20, &c, &hold));
	CHECK_EQ(c.tier, PRISM_LOW);
	/* The device is full: a LOW request would wait for a driver tag. */
	v[PRISM_LOW].inflight = 3;
	CHECK(!mech_choose(v, &b, &t, &f, 20, &c, &hold));
	CHECK_EQ(hold, PRISM_HOLD_DEPTH);
	/* The lower limit, below the device depth. */
	f.lower_limit = 2;
	v[PRISM_LOW].inflight = 2;
	CHECK(!mech_choose(v, &b, &t, &f, 20, &c, &hold));
	CHECK_EQ(hold, PRISM_HOLD_DEPTH);
	/* A flush the scheduler never saw fills the device as well. */
	f.lower_limit = 4;
	v[PRISM_LOW].inflight = 1;
	CHECK(mech_choose(v, &b, &t, &f, 20, &c, &hold));
	f.foreign = 2;
	CHECK(!mech_choose(v, &b, &t, &f, 20, &c, &hold));
	CHECK_EQ(hold, PRISM_HOLD_DEPTH);
	/* With no higher tier active neither applies. */
	v[PRISM_HIGH].inflight = 0;
	v[PRISM_LOW].inflight = 3;
	CHECK(mech_choose(v, &b, &t, &f, 20, &c, &hold));
	CHECK_EQ(c.tier, PRISM_LOW);
}

/*
 * A tier with a request overdue in the device (nothing of it completed or
 * dispatched for PRISM_STALL_MS): the mechanism's lower limit of 0 holds
 * every tier below, shares too, so that a reordering device drains them;
 * aging still passes.
 */
TEST(an_overdue_request_holds_every_tier_below)
{
	CHOOSE_SETUP;
	struct prism_flight f = {
		.depth = 32, .lower_limit = 0, .lower_duty = PRISM_DUTY_FULL
	};
	unsigned long stall = 25, now = 10000;	/* 100 ms at HZ 250 */
	enum prism_hold hold;

	/* Overdue only once both its last completion and dispatch are old. */
	CHECK(!prism_tier_stalled(0, now - 100, now - 100, now, stall));
	CHECK(!prism_tier_stalled(1, now - 24, now - 100, now, stall));
	CHECK(!prism_tier_stalled(1, now - 100, now - 24, now, stall));
	CHECK(prism_tier_stalled(1, now - 25, now - 25, now, stall));
	/* jiffies wrap. */
	CHECK(prism_tier_stalled(1, (unsigned long)-10, (unsigned long)-10, 20, stall));

	view_set(v, PRISM_LOW, PRISM_READ, 50, now - 10);
	v[PRISM_NORMAL].inflight = 1;
	v[PRISM_LOW].inflight = 13;
	/* LOW is owed its share: held all the same. */
	b.credit[PRISM_LOW] = (s64)PRISM_SHARE_UNIT * 1000000000LL;
	CHECK(!mech_choose(v, &b, &t, &f, now, &c, &hold));
	CHECK_EQ(hold, PRISM_HOLD_DEPTH);
	/* Even with the device empty of LOW. */
	v[PRISM_LOW].inflight = 0;
	CHECK(!mech_choose(v, &b, &t, &f, now, &c, &hold));
	/* Aging passes. */
	v[PRISM_LOW].dir[PRISM_READ].oldest = now - t.prio_aging_expire - 1;
	CHECK(mech_choose(v, &b, &t, &f, now, &c, &hold));
	CHECK_EQ(c.tier, PRISM_LOW);
}

TEST(a_recent_tier_keeps_the_limit_between_its_links)
{
	CHOOSE_SETUP;
	struct prism_flight f = {
		.depth = 64, .lower_limit = 2, .lower_duty = PRISM_DUTY_FULL
	};
	enum prism_hold hold;

	/*
	 * HIGH's last link completed lately, its next is not due within the
	 * window: nothing of it is in flight or anticipated, yet LOW keeps
	 * to the controller's limit.
	 */
	view_set(v, PRISM_LOW, PRISM_SYNC_WRITE, 50, 10);
	v[PRISM_HIGH].recent = true;
	v[PRISM_LOW].inflight = 1;
	CHECK(mech_choose(v, &b, &t, &f, 20, &c, &hold));
	CHECK_EQ(c.tier, PRISM_LOW);
	v[PRISM_LOW].inflight = 2;
	CHECK(!mech_choose(v, &b, &t, &f, 20, &c, &hold));
	CHECK_EQ(hold, PRISM_HOLD_DEPTH);
	/* Paced: one at a time, after its gap. */
	f.lower_limit = 1;
	f.lower_duty = 50;
	f.lower_service = 2 * MS;
	f.quiet[PRISM_LOW] = 1 * MS;
	v[PRISM_LOW].inflight = 0;
	CHECK(!mech_choose(v, &b, &t, &f, 20, &c, &hold));
	CHECK_EQ(hold, PRISM_HOLD_DEPTH);
	f.quiet[PRISM_LOW] = 2 * MS;
	CHECK(mech_choose(v, &b, &t, &f, 20, &c, &hold));
	CHECK_EQ(c.tier, PRISM_LOW);
	/* The controller does not limit: a recent tier holds nothing. */
	f.lower_limit = 64;
	f.lower_duty = PRISM_DUTY_FULL;
	v[PRISM_LOW].inflight = 20;
	CHECK(mech_choose(v, &b, &t, &f, 20, &c, &hold));
	CHECK_EQ(c.tier, PRISM_LOW);
	/* Nor does a tier that is not recent. */
	f.lower_limit = 2;
	v[PRISM_HIGH].recent = false;
	CHECK(mech_choose(v, &b, &t, &f, 20, &c, &hold));
	CHECK_EQ(c.tier, PRISM_LOW);
	/* A recent tier is not served: only the tiers below it are limited. */
	v[PRISM_NORMAL].recent = true;
	view_set(v, PRISM_NORMAL, PRISM_READ, 5, 10);
	CHECK(mech_choose(v, &b, &t, &f, 20, &c, &hold));
	CHECK_EQ(c.tier, PRISM_NORMAL);
}

TEST(a_flush_keeps_its_tier_active)
{
	CHOOSE_SETUP;
	struct prism_flight f = {
		.depth = 2, .lower_limit = 2, .foreign = 1,
		.lower_duty = PRISM_DUTY_FULL
	};
	enum prism_hold hold;

	/* A flush of NORMAL's chain in the device: LOW within the depth. */
	view_set(v, PRISM_LOW, PRISM_READ, 50, 10);
	v[PRISM_NORMAL].flushing = true;
	CHECK(mech_choose(v, &b, &t, &f, 20, &c, &hold));
	CHECK_EQ(c.tier, PRISM_LOW);
	/* The flush and one LOW request fill a depth-2 device. */
	v[PRISM_LOW].inflight = 1;
	CHECK(!mech_choose(v, &b, &t, &f, 20, &c, &hold));
	CHECK_EQ(hold, PRISM_HOLD_DEPTH);
	/* Without the chain's tier active, the device is LOW's to fill. */
	v[PRISM_NORMAL].flushing = false;
	CHECK(mech_choose(v, &b, &t, &f, 20, &c, &hold));
	CHECK_EQ(c.tier, PRISM_LOW);
}

TEST(share_passes_the_window_but_not_a_full_device)
{
	CHOOSE_SETUP;
	enum prism_hold hold;
	int i;

	/* HIGH dispatches nine times while LOW waits: LOW is owed one. */
	view_set(v, PRISM_LOW, PRISM_READ, 50, 10);
	for (i = 0; i < 9; i++) {
		view_set(v, PRISM_HIGH, PRISM_READ, 1, 15);
		CHECK(mech_choose(v, &b, &t, &depth1, 20, &c, &hold));
		CHECK_EQ(c.tier, PRISM_HIGH);
	}
	/* HIGH's request in the device: nothing may join it. */
	view_set(v, PRISM_HIGH, PRISM_READ, 0, 0);
	v[PRISM_HIGH].inflight = 1;
	CHECK(!mech_choose(v, &b, &t, &depth1, 20, &c, &hold));
	CHECK_EQ(hold, PRISM_HOLD_DEPTH);
	/* Completed and anticipated: the share is paid in the window. */
	v[PRISM_HIGH].inflight = 0;
	v[PRISM_HIGH].anticipated = true;
	CHECK(mech_choose(v, &b, &t, &depth1, 20, &c, &hold));
	CHECK_EQ(c.tier, PRISM_LOW);
	CHECK(c.shared);
	/* Paid: held again. */
	CHECK(!mech_choose(v, &b, &t, &depth1, 20, &c, &hold));
	CHECK_EQ(hold, PRISM_HOLD_WINDOW);
}

/*
 * A depth-1 disk, HIGH with requests always queued (a database at
 * iodepth 4), LOW owed its share: every request handed out beyond the
 * device's one slot waits for a driver tag, so the device is full at
 * every dispatch. LOW still gets its tenth: when it is owed, HIGH is
 * held until the device has room, and the room is LOW's.
 */
TEST(share_is_paid_on_a_device_a_higher_tier_keeps_full)
{
	CHOOSE_SETUP;
	enum prism_hold hold;
	int flight[8], n = 0, i, low = 0, total = 0;

	view_set(v, PRISM_LOW, PRISM_READ, 50, 10);
	view_set(v, PRISM_HIGH, PRISM_READ, 4, 15);
	for (i = 0; i < 4000 && total < 1000; i++) {
		int tier;

		for (tier = 0; tier < PRISM_NR_TIERS; tier++)
			v[tier].inflight = 0;
		for (tier = 0; tier < n; tier++)
			v[flight[tier]].inflight++;
		if (n < 2 && mech_choose(v, &b, &t, &depth1, 20, &c, &hold)) {
			flight[n++] = c.tier;	/* in the device, or parked */
			low += c.tier == PRISM_LOW;
			total++;
			continue;
		}
		/* The device completes its oldest request. */
		CHECK(n > 0);
		memmove(flight, flight + 1, --n * sizeof(flight[0]));
	}
	CHECK_EQ(total, 1000);
	CHECK(low >= 95 && low <= 105);
}

TEST(aging_passes_window_and_depth)
{
	CHOOSE_SETUP;
	enum prism_hold hold;

	t.share[PRISM_LOW] = 0;
	view_set(v, PRISM_LOW, PRISM_READ, 50, 10);
	v[PRISM_HIGH].anticipated = true;
	v[PRISM_HIGH].inflight = 1;
	CHECK(!mech_choose(v, &b, &t, &depth1, 10 + t.prio_aging_expire - 1,
			    &c, &hold));
	CHECK(mech_choose(v, &b, &t, &depth1, 10 + t.prio_aging_expire, &c,
			   &hold));
	CHECK_EQ(c.tier, PRISM_LOW);
	CHECK(c.aged);
}

/*
 * A chain of dependent requests (a commit: each link issued 0.3 ms after
 * the previous one completes, 1 ms of device time each) against a LOW
 * reader that always has requests queued (8 ms each, a 1 MiB read on a
 * disk), on a depth-1 device, in 50 us steps for 4 s. Returns the links
 * completed; *low the LOW requests.
 */
static unsigned int simulate_chain(s64 anticipate, unsigned int *low)
{
	struct prism_tunables t = defaults();
	struct prism_tier_view v[PRISM_NR_TIERS];
	struct prism_depth_ctl d;
	struct prism_think th = { 0 };
	struct prism_flight f = {
		.depth = 1, .lower_limit = 1, .lower_duty = PRISM_DUTY_FULL
	};
	struct prism_batch b;
	struct prism_choice c;
	enum prism_hold hold;
	u64 now, busy_until = 0, next_link = 0, window;
	int in_dev = -1;
	bool high_queued = false;
	unsigned int links = 0;

	t.slice_idle = anticipate;
	prism_batch_reset(&b);
	prism_depth_init(&d, 1);
	*low = 0;
	for (now = 1; now < 4000 * MS; now += 50 * US) {
		if (in_dev >= 0 && now >= busy_until) {
			if (in_dev == PRISM_HIGH) {
				links++;
				th.last_done = now;
				next_link = now + 300 * US;
				prism_depth_sample(&d, &t, 1 * MS, true, now, 1);
			} else {
				(*low)++;
			}
			in_dev = -1;
		}
		if (!high_queued && in_dev != PRISM_HIGH && now >= next_link) {
			prism_think_sample(&th, now);
			high_queued = true;
			next_link = ~0ULL;
		}
		if (in_dev >= 0)
			continue;
		window = prism_window(&d, &t, true);
		view_clear(v);
		view_set(v, PRISM_HIGH, PRISM_READ, high_queued, now / 4000000);
		v[PRISM_HIGH].anticipated = !high_queued &&
					    prism_anticipated(&th, now, window);
		view_set(v, PRISM_LOW, PRISM_READ, 100, 0);
		if (!mech_choose(v, &b, &t, &f, now / 4000000, &c, &hold))
			continue;
		in_dev = c.tier;
		busy_until = now + (c.tier == PRISM_HIGH ? 1 : 8) * MS;
		if (c.tier == PRISM_HIGH)
			high_queued = false;
	}
	return links;
}

TEST(simulated_commit_chain_against_a_reader)
{
	unsigned int off, on, low_off, low_on;

	/*
	 * Without anticipation each link waits for a LOW read: 9.3 ms a
	 * link. With it LOW gets only its share, one read per nine links,
	 * about 2.2 ms a link; LOW keeps moving, a read every 20 ms.
	 */
	off = simulate_chain(0, &low_off);
	on = simulate_chain(PRISM_AUTO, &low_on);
	CHECK(off > 380 && off < 460);
	CHECK(on > 3 * off);
	CHECK(low_on > 180);
	CHECK(low_off > low_on);
}

TEST(window_from_the_device_or_the_tunable)
{
	struct prism_tunables t = defaults();
	struct prism_depth_ctl d;
	int i;

	prism_depth_init(&d, 32);
	/* Nothing measured: bfq's slice_idle on disks, 1 ms on flash. */
	CHECK_EQ(prism_window(&d, &t, true), 8 * MS);
	CHECK_EQ(prism_window(&d, &t, false), 1 * MS);
	/* The higher tier's own times do not set it... */
	for (i = 0; i < 10; i++)
		prism_depth_sample(&d, &t, 4 * MS, true, (u64)(i + 1) * MS, 32);
	CHECK_EQ(prism_window(&d, &t, true), 8 * MS);
	/* ...a LOW request's service time does. */
	for (i = 0; i < 10; i++)
		prism_bulk_sample(&d, 12 * MS);
	CHECK_EQ(prism_window(&d, &t, true), 12 * MS);
	/* Within bounds. */
	for (i = 0; i < 100; i++)
		prism_bulk_sample(&d, 100 * US);
	CHECK_EQ(prism_window(&d, &t, false), PRISM_WINDOW_MIN);
	for (i = 0; i < 100; i++)
		prism_bulk_sample(&d, 80 * MS);
	CHECK_EQ(prism_window(&d, &t, false), PRISM_WINDOW_MAX);
	/* The tunable wins; 0 is off. */
	t.slice_idle = 3 * MS;
	CHECK_EQ(prism_window(&d, &t, true), 3 * MS);
	t.slice_idle = 0;
	CHECK_EQ(prism_window(&d, &t, true), 0);
}

/*
 * A deep device where a higher-tier request's device time grows with the
 * lower-tier requests beside it: 1 ms + 0.5 ms for each. The limit
 * should settle where that time meets the target (4 ms: 6 beside it).
 */
TEST(depth_limit_converges_on_a_simulated_device)
{
	struct prism_tunables t = defaults();
	struct prism_depth_ctl d;
	u32 lo = ~0U, hi = 0;
	u64 now;

	t.target = 4 * MS;
	prism_depth_init(&d, 64);
	for (now = MS; now < 2000 * MS; now += 250 * US) {
		u64 lat = 1 * MS + d.limit * 500 * US;

		prism_depth_sample(&d, &t, lat, false, now, 64);
		if (now > 1000 * MS) {
			lo = d.limit < lo ? d.limit : lo;
			hi = d.limit > hi ? d.limit : hi;
		}
	}
	CHECK(lo >= 4 && hi <= 7);
	CHECK(d.cuts > 0);
}

TEST(device_floor_is_a_forgetting_minimum)
{
	struct prism_tunables t = defaults();
	struct prism_depth_ctl d;
	u64 now = MS;
	int i;

	prism_depth_init(&d, 64);
	/*
	 * A cloud volume whose meter is in debt: most solo samples wait
	 * 24 ms for tokens, a few find it refilled and take 1.5 ms.
	 */
	for (i = 0; i < 200; i++, now += MS)
		prism_depth_sample(&d, &t, i % 10 ? 24 * MS : 1500 * US, true,
				   now, 64);
	CHECK(d.solo < 3 * MS);
	CHECK(prism_depth_target(&d, &t) < 6 * MS);
	/* A device that really became slower is believed in the end. */
	for (i = 0; i < 1000; i++, now += MS)
		prism_depth_sample(&d, &t, 24 * MS, true, now, 64);
	CHECK(d.solo > 23 * MS);
}

TEST(depth_limit_floor_auto_target_and_release)
{
	struct prism_tunables t = defaults();
	struct prism_depth_ctl d;
	u64 now;

	prism_depth_init(&d, 64);
	/* No target yet: samples that are not solo change nothing. */
	prism_depth_sample(&d, &t, 50 * MS, false, 1 * MS, 64);
	CHECK_EQ(d.limit, 64);
	/* Three solo samples of 2 ms: the automatic target is 4 ms. */
	for (now = 2; now < 5; now++)
		prism_depth_sample(&d, &t, 2 * MS, true, now * MS, 64);
	CHECK_EQ(prism_depth_target(&d, &t), 4 * MS);
	/*
	 * Far over it for long: down to one, never zero; then paced, down to
	 * LOW's share of the time.
	 */
	for (now = 10 * MS; now < 3000 * MS; now += 1 * MS)
		prism_depth_sample(&d, &t, 50 * MS, false, now, 64);
	CHECK_EQ(d.limit, 1);
	CHECK_EQ(d.duty, t.share[PRISM_LOW]);
	/*
	 * A change at most once per target interval; far over the target
	 * (more than twice) a cut halves the limit, a little over it takes a
	 * quarter.
	 */
	prism_depth_init(&d, 64);
	t.target = 4 * MS;
	prism_depth_sample(&d, &t, 50 * MS, false, 100 * MS, 64);
	prism_depth_sample(&d, &t, 50 * MS, false, 101 * MS, 64);
	CHECK_EQ(d.limit, 32);
	prism_depth_sample(&d, &t, 50 * MS, false, 104 * MS, 64);
	CHECK_EQ(d.limit, 16);
	prism_depth_sample(&d, &t, 6 * MS, false, 108 * MS, 64);
	CHECK_EQ(d.limit, 12);
	/* Growth too: one step per interval, not one per fast reply. */
	prism_depth_sample(&d, &t, 1 * MS, false, 112 * MS, 64);
	prism_depth_sample(&d, &t, 1 * MS, false, 113 * MS, 64);
	prism_depth_sample(&d, &t, 1 * MS, false, 114 * MS, 64);
	CHECK_EQ(d.limit, 13);
	/* Quiet higher tiers lift it; not before, nor with one in flight. */
	prism_depth_idle(&d, 114 * MS + PRISM_ACTIVE_NS, 64, false, true);
	CHECK_EQ(d.limit, 13);
	prism_depth_idle(&d, 115 * MS + PRISM_ACTIVE_NS, 64, true, true);
	CHECK_EQ(d.limit, 13);
	prism_depth_idle(&d, 115 * MS + PRISM_ACTIVE_NS, 64, false, true);
	CHECK_EQ(d.limit, 64);
}

TEST(one_tier_alone_is_observed_not_limited)
{
	struct prism_depth_ctl d;

	/*
	 * A tier alone on the device, slow by its own queue: its samples
	 * still give the device's latency, but cut nothing, since nothing
	 * below it is there to limit.
	 */
	prism_depth_init(&d, 8);
	prism_depth_observe(&d, 1 * MS, true, 10 * MS);
	prism_depth_observe(&d, 50 * MS, false, 20 * MS);
	CHECK_EQ(d.limit, 8);
	CHECK_EQ(d.duty, PRISM_DUTY_FULL);
	CHECK_EQ(d.cuts, 0);
	CHECK_EQ(d.solo, 1 * MS);
	CHECK(d.floor > 1 * MS && d.floor < 2 * MS);
	CHECK_EQ(d.last_sample, 20 * MS);
	/*
	 * A limit left from when another tier was about is lifted at once,
	 * even with the tier in flight and sampled a moment ago.
	 */
	d.limit = 2;
	d.duty = 20;
	prism_depth_idle(&d, 21 * MS, 8, true, true);
	CHECK_EQ(d.limit, 2);
	prism_depth_idle(&d, 21 * MS, 8, true, false);
	CHECK_EQ(d.limit, 8);
	CHECK_EQ(d.duty, PRISM_DUTY_FULL);
}

TEST(pacing_below_one_request_halves_grows_and_lifts)
{
	struct prism_tunables t = defaults();
	struct prism_depth_ctl d;

	t.target = 4 * MS;
	prism_depth_init(&d, 8);
	CHECK_EQ(d.duty, PRISM_DUTY_FULL);
	d.limit = 1;
	/* Over the target at one request: the duty halves, once per interval. */
	prism_depth_sample(&d, &t, 50 * MS, false, 100 * MS, 8);
	CHECK_EQ(d.limit, 1);
	CHECK_EQ(d.duty, 50);
	prism_depth_sample(&d, &t, 50 * MS, false, 101 * MS, 8);
	CHECK_EQ(d.duty, 50);
	prism_depth_sample(&d, &t, 50 * MS, false, 105 * MS, 8);
	CHECK_EQ(d.duty, 25);
	/* Not below LOW's share; with no share, not below 1%. */
	prism_depth_sample(&d, &t, 50 * MS, false, 110 * MS, 8);
	prism_depth_sample(&d, &t, 50 * MS, false, 115 * MS, 8);
	CHECK_EQ(d.duty, 10);
	/*
	 * Under it: the duty grows back first, then the limit; only on
	 * samples taken with a lower request in the device.
	 */
	prism_depth_sample(&d, &t, 1 * MS, true, 120 * MS, 8);
	CHECK_EQ(d.duty, 10);
	prism_depth_sample(&d, &t, 1 * MS, false, 120 * MS, 8);
	CHECK_EQ(d.duty, 20);
	CHECK_EQ(d.limit, 1);
	for (int i = 0; i < 8; i++)
		prism_depth_sample(&d, &t, 1 * MS, false, (125 + 5 * i) * MS, 8);
	CHECK_EQ(d.duty, PRISM_DUTY_FULL);
	CHECK_EQ(d.limit, 1);
	prism_depth_sample(&d, &t, 1 * MS, false, 170 * MS, 8);
	CHECK_EQ(d.limit, 2);
	/* A quiet higher tier lifts both. */
	d.limit = 1;
	d.duty = 10;
	prism_depth_idle(&d, 170 * MS + PRISM_ACTIVE_NS + 1, 8, false, true);
	CHECK_EQ(d.limit, 8);
	CHECK_EQ(d.duty, PRISM_DUTY_FULL);
	/* A device that takes one request: nothing to pace against. */
	prism_depth_init(&d, 1);
	t.share[PRISM_LOW] = 0;
	prism_depth_sample(&d, &t, 50 * MS, false, 100 * MS, 1);
	CHECK_EQ(d.duty, PRISM_DUTY_FULL);
	prism_depth_init(&d, 8);
	d.limit = 1;
	d.duty = 2;
	prism_depth_sample(&d, &t, 50 * MS, false, 100 * MS, 8);
	CHECK_EQ(d.duty, 1);
}

TEST(a_hold_lasts_until_its_earliest_end)
{
	struct prism_tier_view v[PRISM_NR_TIERS];
	struct prism_flight f = {
		.depth = 8, .lower_limit = 8, .lower_duty = PRISM_DUTY_FULL,
	};
	struct prism_hold_ends e = {
		.now = 1000 * MS, .window = 1003 * MS, .flow = 1008 * MS,
	};

	view_clear(v);
	/* Each hold its own end; nothing held, no end. */
	CHECK_EQ(prism_hold_until(PRISM_HOLD_WINDOW, v, &f, PRISM_LOW, &e),
		 1003 * MS);
	CHECK_EQ(prism_hold_until(PRISM_HOLD_FLOW, v, &f, PRISM_LOW, &e),
		 1008 * MS);
	CHECK_EQ(prism_hold_until(PRISM_HOLD_NONE, v, &f, PRISM_LOW, &e), 0);
	/* A refill ends any hold it comes before, and stands alone. */
	e.refill = 1001 * MS;
	CHECK_EQ(prism_hold_until(PRISM_HOLD_WINDOW, v, &f, PRISM_LOW, &e),
		 1001 * MS);
	CHECK_EQ(prism_hold_until(PRISM_HOLD_NONE, v, &f, PRISM_LOW, &e),
		 1001 * MS);
	e.refill = 0;
	/*
	 * A depth hold: a completion ends it while HIGH or NORMAL is in the
	 * device; with neither there, their activity lapses with time.
	 */
	v[PRISM_NORMAL].inflight = 1;
	CHECK_EQ(prism_hold_until(PRISM_HOLD_DEPTH, v, &f, PRISM_LOW, &e), 0);
	v[PRISM_NORMAL].inflight = 0;
	CHECK_EQ(prism_hold_until(PRISM_HOLD_DEPTH, v, &f, PRISM_LOW, &e),
		 1000 * MS + PRISM_ACTIVE_NS);
	/* Paced: at the end of the lower tiers' gap, if that comes first. */
	v[PRISM_NORMAL].inflight = 1;
	f.lower_duty = 20;
	f.lower_service = 10 * MS;	/* a 40 ms gap */
	f.quiet[PRISM_LOW] = 30 * MS;
	CHECK_EQ(prism_hold_until(PRISM_HOLD_DEPTH, v, &f, PRISM_LOW, &e),
		 1010 * MS);
	CHECK(e.paced);
	v[PRISM_NORMAL].inflight = 0;
	CHECK_EQ(prism_hold_until(PRISM_HOLD_DEPTH, v, &f, PRISM_LOW, &e),
		 1010 * MS);
	CHECK(e.paced);
	f.quiet[PRISM_LOW] = 40 * MS;	/* the gap has passed */
	CHECK_EQ(prism_hold_until(PRISM_HOLD_DEPTH, v, &f, PRISM_LOW, &e),
		 1000 * MS + PRISM_ACTIVE_NS);
	CHECK(!e.paced);
	/* Only a depth hold is paced. */
	f.quiet[PRISM_LOW] = 0;
	prism_hold_until(PRISM_HOLD_WINDOW, v, &f, PRISM_LOW, &e);
	CHECK(!e.paced);
}

TEST(paced_lower_tier_waits_its_gap_alone)
{
	CHOOSE_SETUP;
	struct prism_flight f = {
		.depth = 8, .lower_limit = 8, .lower_duty = 20,
		.lower_service = 10 * MS
	};
	enum prism_hold hold;

	/* 20% of the time at 10 ms a request: a 40 ms gap after each. */
	CHECK_EQ(prism_paced_gap(10 * MS, 20), 40 * MS);
	CHECK_EQ(prism_paced_gap(10 * MS, PRISM_DUTY_FULL), 0);
	/* Never more than half a second. */
	CHECK_EQ(prism_paced_gap(178 * MS, 10), PRISM_PACED_GAP_MAX);
	view_set(v, PRISM_LOW, PRISM_READ, 50, 10);
	v[PRISM_NORMAL].inflight = 1;
	f.quiet[PRISM_LOW] = 30 * MS;
	CHECK_EQ(prism_paced_wait(&f, PRISM_LOW), 10 * MS);
	CHECK(!mech_choose(v, &b, &t, &f, 20, &c, &hold));
	CHECK_EQ(hold, PRISM_HOLD_DEPTH);
	f.quiet[PRISM_LOW] = 40 * MS;
	CHECK(mech_choose(v, &b, &t, &f, 20, &c, &hold));
	CHECK_EQ(c.tier, PRISM_LOW);
	/* One at a time, though the limit would allow more. */
	v[PRISM_LOW].inflight = 1;
	CHECK(!mech_choose(v, &b, &t, &f, 20, &c, &hold));
	CHECK_EQ(hold, PRISM_HOLD_DEPTH);
	/* Nothing above active: not held. */
	v[PRISM_NORMAL].inflight = 0;
	CHECK(mech_choose(v, &b, &t, &f, 20, &c, &hold));
	CHECK_EQ(c.tier, PRISM_LOW);
	/* Background writeback queued in the tier: its oldest goes instead. */
	v[PRISM_LOW].inflight = 0;
	v[PRISM_NORMAL].inflight = 1;
	f.quiet[PRISM_LOW] = 0;
	CHECK(!mech_choose(v, &b, &t, &f, 20, &c, &hold));
	view_set(v, PRISM_LOW, PRISM_WRITE, 5, 10);
	CHECK(mech_choose(v, &b, &t, &f, 20, &c, &hold));
	CHECK_EQ(c.tier, PRISM_LOW);
	CHECK_EQ(c.dir, PRISM_WRITE);
	CHECK_EQ(c.take, PRISM_TAKE_FIFO);
	/* ...one at a time. */
	v[PRISM_LOW].inflight = 1;
	CHECK(!mech_choose(v, &b, &t, &f, 20, &c, &hold));
	CHECK_EQ(hold, PRISM_HOLD_DEPTH);
	view_set(v, PRISM_LOW, PRISM_WRITE, 0, 0);
	/* Aging passes the pacing. */
	v[PRISM_NORMAL].inflight = 1;
	v[PRISM_LOW].inflight = 1;
	view_set(v, PRISM_LOW, PRISM_READ, 50, 0);
	CHECK(mech_choose(v, &b, &t, &f, 20 + t.prio_aging_expire + 1, &c,
			  &hold));
	CHECK_EQ(c.tier, PRISM_LOW);
	CHECK(c.aged);
}

/*
 * A metered volume: one FIFO meter serving a request at a time, 5 ms for
 * a database read, 60 ms for a 1 MiB backup read (16 MiB/s), up to 8 in
 * it. Two database clients at NORMAL, iodepth 1, 1 ms between reads; the
 * backup in LOW always has reads queued. Held to one in flight, the
 * backup still takes the meter: each database read waits behind a 1 MiB
 * read. Paced, the backup has its share of the time.
 */
static unsigned int simulate_meter(bool pace, unsigned int *low_min_per_s,
				   unsigned int *low_total)
{
	enum { THINKING, QUEUED, SENT };
	struct prism_tunables t = defaults();
	struct prism_tier_view v[PRISM_NR_TIERS];
	struct prism_depth_ctl d;
	struct prism_batch b;
	struct prism_choice c;
	enum prism_hold hold;
	int meter[8], owner[8], client[2] = { THINKING, THINKING }, n = 0, i;
	u64 sent[8], busy_until = 0, client_next[2] = { 200 * MS, 200 * MS };
	u64 low_done_at = 0, now;
	bool solo[8];
	unsigned int normal_done = 0, low_in_s[10] = { 0 };

	/*
	 * The backup, running alone first, gives its service time. It never
	 * leaves the meter once the database starts, so no database read is
	 * solo: the automatic target comes from the moments it does.
	 */
	t.target = 10 * MS;
	prism_depth_init(&d, 8);
	prism_batch_reset(&b);
	for (now = 1; now < 10000 * MS; now += 100 * US) {
		if (n && now >= busy_until) {
			u64 dev = now - sent[0];

			if (meter[0] == PRISM_NORMAL) {
				normal_done++;
				client[owner[0]] = THINKING;
				client_next[owner[0]] = now + 1 * MS;
				prism_depth_sample(&d, &t, dev, solo[0], now, 8);
			} else {
				low_in_s[now / (1000 * MS)]++;
				low_done_at = now;
				if (solo[0])
					prism_bulk_sample(&d, dev);
			}
			n--;
			memmove(meter, meter + 1, n * sizeof(meter[0]));
			memmove(owner, owner + 1, n * sizeof(owner[0]));
			memmove(sent, sent + 1, n * sizeof(sent[0]));
			memmove(solo, solo + 1, n * sizeof(solo[0]));
			if (n)
				busy_until = now + (meter[0] == PRISM_NORMAL ?
						    5 : 60) * MS;
		}
		for (i = 0; i < 2; i++)
			if (client[i] == THINKING && now >= client_next[i])
				client[i] = QUEUED;
		while (n < 8) {
			struct prism_flight f = {
				.depth = 8, .lower_limit = d.limit
			};
			u32 queued = 0;
			int tier;

			view_clear(v);
			view_set(v, PRISM_NORMAL, PRISM_READ,
				 (client[0] == QUEUED) + (client[1] == QUEUED),
				 0);
			view_set(v, PRISM_LOW, PRISM_READ, 100, 0);
			for (i = 0; i < n; i++)
				v[meter[i]].inflight++;
			for (tier = 0; tier < PRISM_NR_TIERS; tier++) {
				v[tier].dir[PRISM_READ].flow = tier;
				if (v[tier].dir[PRISM_READ].queued)
					queued |= 1U << tier;
				f.quiet[tier] = v[PRISM_LOW].inflight ? 0 :
						now - low_done_at;
			}
			f.lower_duty = pace ? d.duty : PRISM_DUTY_FULL;
			f.lower_service = d.bulk;
			if (b.tier >= 0)
				v[b.tier].batch_left =
					v[b.tier].dir[b.dir].queued;
			if (!prism_choose(v, &b, &t, &f, now / 4000000, &c,
					  &hold))
				break;
			if (c.flow < 0) {
				c.flow = c.tier;
				prism_choose_in_flow(&v[c.tier], &b, &t,
						     now / 4000000, &c);
			}
			/* The fixed flash model: 36 us and 2.1 ms. */
			prism_account(&b, &t, queued, &c,
				      c.tier == PRISM_LOW ? 2100 * US : 36 * US);
			solo[n] = c.tier == PRISM_LOW ? !n :
				  !v[PRISM_LOW].inflight;
			meter[n] = c.tier;
			owner[n] = -1;
			sent[n] = now;
			if (c.tier == PRISM_NORMAL) {
				i = client[0] == QUEUED ? 0 : 1;
				client[i] = SENT;
				owner[n] = i;
			}
			if (!n)
				busy_until = now + (c.tier == PRISM_NORMAL ?
						    5 : 60) * MS;
			n++;
		}
	}
	*low_min_per_s = ~0U;
	*low_total = 0;
	for (i = 1; i < 10; i++) {
		if (low_in_s[i] < *low_min_per_s)
			*low_min_per_s = low_in_s[i];
		*low_total += low_in_s[i];
	}
	return normal_done;
}

TEST(simulated_meter_pacing_protects_and_keeps_the_backup_moving)
{
	unsigned int held, paced, held_low_min, paced_low_min, held_low,
		     paced_low;

	held = simulate_meter(false, &held_low_min, &held_low);
	paced = simulate_meter(true, &paced_low_min, &paced_low);
	fprintf(stderr, "meter: normal %u -> %u, low %u (min %u/s) -> %u (min %u/s)\n",
		held, paced, held_low, held_low_min, paced_low,
		paced_low_min);
	CHECK(paced > 4 * held);
	CHECK(paced_low_min >= 1);
	CHECK(held_low > paced_low);
}

/*
 * A queueing disk (NCQ, 32 deep) under a sequential backup: no
 * higher-tier request is ever dispatched with the device free of bulk
 * work (never solo; this model has no pacing gaps to give one), and the
 * drive serves a random read either at once (3 ms) or, when it prefers
 * the bulk stream, after the bulk requests beside it (20 ms each).
 * Without solo samples the floor of every sample sets the target, and
 * the limit falls at least to where the read keeps to it.
 */
TEST(depth_limit_without_solo_samples_on_a_queueing_disk)
{
	struct prism_tunables t = defaults();
	struct prism_depth_ctl d;
	u64 now;
	int i = 0;

	prism_depth_init(&d, 32);
	for (now = MS; now < 3000 * MS; now += 2 * MS, i++) {
		u64 lat = i % 3 ? 3 * MS : d.limit * 20 * MS;

		prism_depth_sample(&d, &t, lat, false, now, 32);
	}
	CHECK_EQ(d.solo_samples, 0);
	CHECK_EQ(prism_depth_target(&d, &t), 6 * MS);
	CHECK(d.limit <= 2);
	CHECK(d.cuts > 0);
}

/*
 * A metered volume (the cloud volume: 125 MiB/s, a 1 MiB read 8 ms of
 * it) whose queue a backup of 16 requests keeps full from before the
 * database's first read: every read beside it waits for the meter alike,
 * 16 x 8 ms, and none is solo until the backup is paced. Twice the floor
 * of such samples is never exceeded; the controller must still cut, down
 * to pacing, and the gaps' solo reads (1.8 ms) then set the target. With
 * the floor alone for a target (before 2026-12) nothing was ever cut: a
 * database that started after the backup stayed at 120 ms (the pacing
 * check on the cloud volume, one rep in CI).
 */
TEST(depth_limit_probes_for_solo_samples_on_a_full_meter)
{
	struct prism_tunables t = defaults();
	struct prism_depth_ctl d;
	u64 now;
	int i = 0;

	prism_depth_init(&d, 64);
	for (now = MS; now < 5000 * MS; i++) {
		u32 ahead = d.limit < 16 ? d.limit : 16;
		bool solo = d.duty < PRISM_DUTY_FULL && i % 2;
		u64 lat = solo ? 1800 * US : 1800 * US + ahead * 8 * MS;

		prism_depth_sample(&d, &t, lat, solo, now, 64);
		now += lat;
	}
	CHECK(d.cuts > 0);
	CHECK_EQ(d.solo_samples, PRISM_THINK_SAMPLES);
	CHECK_EQ(prism_depth_target(&d, &t), 3600 * US);
	CHECK_EQ(d.limit, 1);
	CHECK(d.duty < PRISM_DUTY_FULL);
	/* An operator's target needs no probe: within it, nothing is cut. */
	t.target = 200 * MS;
	prism_depth_init(&d, 64);
	for (now = MS; now < 5000 * MS; now += 130 * MS)
		prism_depth_sample(&d, &t, 130 * MS, false, now, 64);
	CHECK_EQ(d.cuts, 0);
	CHECK_EQ(d.limit, 64);
}

int main(int argc, char **argv)
{
	int i, ran = 0;

	if (argc > 1 && !strcmp(argv[1], "--list")) {
		for (i = 0; i < ntests; i++)
			printf("%s\n", tests[i].name);
		return 0;
	}
	for (i = 0; i < ntests; i++) {
		int before = failures;

		if (argc > 1 && strcmp(argv[1], tests[i].name))
			continue;
		tests[i].fn();
		ran++;
		printf("%s %s\n", failures == before ? "ok" : "FAIL", tests[i].name);
	}
	if (!ran) {
		fprintf(stderr, "no test named %s\n", argc > 1 ? argv[1] : "?");
		return 2;
	}
	return failures ? 1 : 0;
}
