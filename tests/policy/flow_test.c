// SPDX-License-Identifier: GPL-2.0
/*
 * Userspace tests of prism's flows: weights, the cost model and its
 * learner, WF2Q+ fair queuing inside a tier (shares, the delay bound,
 * light flows), shares between tiers counted in cost, and the per-flow
 * tag limit.
 */
#include "check.h"

/* The default quantum (a turn's device time, ns). */
#define QUANTUM	16000000ULL

/* The buckets' default burst (the rate_burst tunable). */
#define BURST	(PRISM_BUCKET_BURST_MS * 1000000ULL)

static struct prism_tunables flow_defaults(void)
{
	struct prism_tunables t;

	prism_tunables_init(&t, HZ);
	return t;
}

/* A small deterministic generator, so simulations repeat exactly. */
static u32 rng_state = 12345;

static u32 rng(void)
{
	rng_state = rng_state * 1103515245U + 12345U;
	return rng_state >> 8;
}

TEST(weights_follow_bfq_curve)
{
	int level;

	for (level = 0; level < 8; level++)
		CHECK_EQ(prism_weight(PRISM_CLASS_BE, level), (8 - level) * 25);
	CHECK_EQ(prism_weight(PRISM_CLASS_RT, 0), 400);
	CHECK_EQ(prism_weight(PRISM_CLASS_RT, 7), 50);
	CHECK_EQ(prism_weight(PRISM_CLASS_IDLE, 0), 25);
	/* The default priority weighs a cgroup's default io.prism.weight. */
	CHECK_EQ(prism_weight(PRISM_CLASS_NONE, 0), 100);
	CHECK_EQ(prism_weight(PRISM_CLASS_BE, 4), 100);
	/* A level out of range is clamped, never a zero or huge weight. */
	CHECK_EQ(prism_weight(PRISM_CLASS_BE, 9), 25);
	CHECK(prism_weight(PRISM_CLASS_RT, 0) <= PRISM_WEIGHT_MAX);
	CHECK(PRISM_WEIGHT_MAX <= PRISM_FQ_WEIGHT_MAX);
}

TEST(cost_model_arithmetic)
{
	struct prism_cost_params p;
	struct prism_cost_model m;
	u64 c;

	prism_cost_defaults(&p, true);
	prism_cost_digest(&m, &p);
	/* A random 4 KiB read costs 1 / randiops. */
	c = prism_cost(&m, PRISM_READ, 4096, false);
	CHECK(c > 6600000 && c < 6700000);	/* 1/150 s = 6.67 ms */
	/* A sequential 4 KiB read 1 / seqiops: 0.2 ms. */
	c = prism_cost(&m, PRISM_READ, 4096, true);
	CHECK(c > 199000 && c < 201000);
	/* 1 MiB streaming: the base plus 1 MiB at 150 MB/s (6.99 ms). */
	c = prism_cost(&m, PRISM_READ, 1 << 20, true);
	CHECK(c > 7100000 && c < 7200000);
	/* So on a disk a 1 MiB sequential read is no 256 x a 4 KiB one. */
	CHECK(c < 2 * prism_cost(&m, PRISM_READ, 4096, false));

	prism_cost_defaults(&p, false);
	prism_cost_digest(&m, &p);
	/* Flash: random as sequential; a 1 MiB read is its transfer. */
	CHECK_EQ(prism_cost(&m, PRISM_READ, 4096, false),
		 prism_cost(&m, PRISM_READ, 4096, true));
	c = prism_cost(&m, PRISM_READ, 1 << 20, false);
	CHECK(c > 2090000 && c < 2110000);	/* 1 MiB / 500 MB/s + base */
	CHECK(prism_cost(&m, PRISM_WRITE, 4096, false) >
	      prism_cost(&m, PRISM_READ, 4096, false));

	/*
	 * The slowest rate the tunables accept (cost_rkbps=1): a large
	 * request costs more than a small one, never a wrapped product.
	 */
	p.bps[PRISM_READ] = 1024;
	prism_cost_digest(&m, &p);
	CHECK(prism_cost(&m, PRISM_READ, 32 << 20, true) >
	      prism_cost(&m, PRISM_READ, 16 << 20, true));
	CHECK(prism_cost(&m, PRISM_READ, U32_MAX, true) >=
	      prism_cost(&m, PRISM_READ, 32 << 20, true));
	/* Down to about 239 KiB/s a rate is taken as set. */
	p.bps[PRISM_READ] = 256 << 10;
	prism_cost_digest(&m, &p);
	c = prism_cost(&m, PRISM_READ, 1 << 20, true) -
	    prism_cost(&m, PRISM_READ, 0, true);
	CHECK(c > 3990000000ULL && c < 4010000000ULL);	/* 1 MiB in 4 s */
}

TEST(cost_seq_detection)
{
	CHECK(!prism_cost_seq(0, 0, 64));	/* nothing before it */
	CHECK(prism_cost_seq(1000, 1000, 64));
	CHECK(prism_cost_seq(1000, 1064, 64));
	CHECK(!prism_cost_seq(1000, 1065, 64));
	CHECK(prism_cost_seq(1000, 990, 64));	/* a short step back */
}

TEST(cost_effective_set_learned_default)
{
	struct prism_cost_params set = { }, learned = { }, out, dfl;

	prism_cost_defaults(&dfl, true);
	set.randiops[PRISM_READ] = 300;
	learned.randiops[PRISM_READ] = 999;
	learned.bps[PRISM_WRITE] = 77000000;
	prism_cost_effective(&out, &set, &learned, false, true);
	CHECK_EQ(out.randiops[PRISM_READ], 300);	/* set wins */
	CHECK_EQ(out.bps[PRISM_WRITE], dfl.bps[PRISM_WRITE]);	/* not learning */
	prism_cost_effective(&out, &set, &learned, true, true);
	CHECK_EQ(out.randiops[PRISM_READ], 300);	/* set still wins */
	CHECK_EQ(out.bps[PRISM_WRITE], 77000000);	/* learned */
	CHECK_EQ(out.seqiops[PRISM_READ], dfl.seqiops[PRISM_READ]);
}

/*
 * The learner recovers a device's coefficients within 10% from the times
 * the mechanism attributes (prism_learn_busy()) on a simulated device
 * that serves one request at a time: requests of mixed sizes and kinds,
 * sometimes queued behind others (dispatched before the device is free),
 * sometimes after an idle gap, with +-5% noise.
 */
TEST(learner_recovers_known_coefficients)
{
	struct prism_cost_params truth = {
		.bps = { 120000000ULL, 90000000ULL },
		.seqiops = { 4000, 3000 },
		.randiops = { 180, 140 },
	};
	struct prism_cost_params prior, out;
	struct prism_cost_model m;
	struct prism_cost_learner l = { };
	static const u32 sizes[] = { 4096, 8192, 16384, 65536, 131072, 524288 };
	u64 now = 1000000, free_at = 0;
	int i, d;

	prism_cost_digest(&m, &truth);
	prism_cost_defaults(&prior, true);
	CHECK(!prism_learn_params(&l, &prior, &out));
	for (i = 0; i < 20000; i++) {
		int dir = rng() % 2;
		bool seq = rng() % 2;
		u32 bytes = sizes[rng() % 6];
		u64 own = prism_cost(&m, dir, bytes, seq);
		u64 noisy = own * (95 + rng() % 11) / 100;
		u64 prev = free_at, done;

		/* Dispatched while the device is busy, or after a gap. */
		now += rng() % 3 ? 0 : own * (rng() % 3);
		done = (now > free_at ? now : free_at) + noisy;
		free_at = done;
		prism_learn_sample(&l, dir, seq, bytes,
				   prism_learn_busy(now, prev, done));
	}
	CHECK(prism_learn_params(&l, &prior, &out));
	for (d = 0; d < PRISM_NR_DIRS; d++) {
		CHECK(out.bps[d] > truth.bps[d] * 9 / 10 &&
		      out.bps[d] < truth.bps[d] * 11 / 10);
		CHECK(out.seqiops[d] > truth.seqiops[d] * 9 / 10 &&
		      out.seqiops[d] < truth.seqiops[d] * 11 / 10);
		CHECK(out.randiops[d] > truth.randiops[d] * 9 / 10 &&
		      out.randiops[d] < truth.randiops[d] * 11 / 10);
	}
}

/*
 * The attributed time: a request's own service when it finds the device
 * idle or queues behind another; on a device serving two at once, each
 * request is attributed the time since the completion before it, which
 * sums to the device's busy time: half of each request's latency.
 */
TEST(learner_attributes_busy_time)
{
	u64 sum = 0;
	int i;

	CHECK_EQ(prism_learn_busy(100, 50, 300), 200);	/* device was idle */
	CHECK_EQ(prism_learn_busy(100, 180, 300), 120);	/* queued behind */
	CHECK_EQ(prism_learn_busy(100, 400, 300), 0);	/* out of order */
	/* Two channels, each taking 1000 per request, always both busy. */
	for (i = 2; i < 1002; i++) {
		u64 done = (u64)(i / 2) * 1000 + (i % 2);
		u64 prev = (u64)((i - 1) / 2) * 1000 + ((i - 1) % 2);

		sum += prism_learn_busy(done - 1000, prev, done);
	}
	CHECK(sum > 1000 * 500 * 99 / 100 && sum < 1000 * 500 * 101 / 100);
}

/* With one size only, the slope cannot be told: it stays the prior's. */
TEST(learner_keeps_prior_slope_for_one_size)
{
	struct prism_cost_params prior, out;
	struct prism_cost_learner l = { };
	int i;

	prism_cost_defaults(&prior, false);
	for (i = 0; i < 100; i++)
		prism_learn_sample(&l, PRISM_READ, false, 4096, 333000);
	CHECK(prism_learn_params(&l, &prior, &out));
	CHECK_EQ(out.bps[PRISM_READ], prior.bps[PRISM_READ]);
	/* 4 KiB in 333 us: about 3,000 I/Os per second. */
	CHECK(out.randiops[PRISM_READ] > 2900 &&
	      out.randiops[PRISM_READ] < 3100);
	/* The kinds without samples keep the prior. */
	CHECK_EQ(out.seqiops[PRISM_READ], prior.seqiops[PRISM_READ]);
	CHECK_EQ(out.randiops[PRISM_WRITE], prior.randiops[PRISM_WRITE]);
}

/*
 * As the mechanism feeds it: points summed where requests complete and
 * folded in batches. The window forgets: after the device slows to a
 * third (another tenant, a worn disk), the learned random rate follows it
 * within 10% once a few windows of the new device have been seen.
 */
TEST(learner_batches_and_forgets)
{
	struct prism_cost_params prior, out;
	struct prism_cost_learner l = { };
	struct prism_learn_sums b = { };
	int i;

	prism_cost_defaults(&prior, true);
	for (i = 0; i < 8000; i++) {
		/* 4 KiB random reads: 5 ms each, then 15 ms from i = 2000. */
		u64 own = i < 2000 ? 5000000 : 15000000;
		u64 x, y;

		prism_learn_point(4096, own, &x, &y);
		b.n++;
		b.x += x;
		b.y += y;
		b.xx += x * x;
		b.xy += x * y;
		if (b.n == 50) {
			prism_learn_add(&l, PRISM_READ, false, &b);
			memset(&b, 0, sizeof(b));
		}
		if (i == 1999) {
			CHECK(prism_learn_params(&l, &prior, &out));
			CHECK(out.randiops[PRISM_READ] > 180 &&
			      out.randiops[PRISM_READ] < 220);
		}
	}
	CHECK(l.s[PRISM_READ][0].n <= PRISM_LEARN_DECAY);
	CHECK_EQ(l.samples, 8000);
	CHECK(prism_learn_params(&l, &prior, &out));
	/* 15 ms: 67 I/Os per second. */
	CHECK(out.randiops[PRISM_READ] > 60 && out.randiops[PRISM_READ] < 74);
}

/*
 * A simulated tier: n flows, always backlogged, served a request at a
 * time by prism_fq_pick_*() and charged its cost.
 */
#define SIM_FLOWS 8

struct sim {
	struct prism_fq fq;
	struct prism_fq_flow f[SIM_FLOWS];
	u64 served[SIM_FLOWS];
	int n;
};

static int sim_pick(struct sim *s)
{
	struct prism_fq_pick p;
	int i;

	prism_fq_pick_init(&p);
	for (i = 0; i < s->n; i++)
		if (s->f[i].backlogged)
			prism_fq_pick_consider(&p, &s->fq, &s->f[i], i);
	return prism_fq_pick_done(&p, &s->fq);
}

static void sim_init(struct sim *s, int n, const u32 *weights)
{
	int i;

	memset(s, 0, sizeof(*s));
	s->n = n;
	for (i = 0; i < n; i++)
		prism_fq_activate(&s->fq, &s->f[i], weights[i]);
}

/* Eight flows at BE 0..7 get their weights' parts of the service. */
TEST(fq_shares_follow_weights)
{
	u32 w[SIM_FLOWS];
	struct sim s;
	u64 total = 0, wsum = 0;
	int i, step;

	for (i = 0; i < SIM_FLOWS; i++) {
		w[i] = prism_weight(PRISM_CLASS_BE, i);
		wsum += w[i];
	}
	sim_init(&s, SIM_FLOWS, w);
	for (step = 0; step < 20000; step++) {
		int id = sim_pick(&s);
		/* Requests of 0.1-2 ms, different per flow. */
		u64 cost = 100000 + (rng() % 20) * 100000;

		CHECK(id >= 0);
		prism_fq_charge(&s.fq, &s.f[id], cost);
		s.served[id] += cost;
		total += cost;
	}
	for (i = 0; i < SIM_FLOWS; i++) {
		double ideal = (double)w[i] / (double)wsum * (double)total;

		CHECK((double)s.served[i] > ideal * 0.98 &&
		      (double)s.served[i] < ideal * 1.02);
	}
}

/*
 * Two levels, as the mechanism serves a tier with cgroups
 * (prism_fq_select()): the tier's fair queue holds a root-cgroup process
 * (BE4, 100) and two groups, A of weight 100 with three processes (BE0,
 * BE4, BE4: 200, 100, 100) and B of 300 with one; a group chosen
 * chooses among its flows in its own queue, and each dispatch is charged
 * at both levels (prism_flow_charge()). The tier divides 100 : 100 : 300
 * whatever the groups hold, and A divides its part 2 : 1 : 1: a process
 * that raised its level took from its own cgroup only.
 */
TEST(fq_groups_share_in_two_levels)
{
	struct prism_fq tier = { 0 }, fa = { 0 };
	struct prism_fq_flow root = { 0 }, ga = { 0 }, gb = { 0 }, a[3];
	const u32 aw[3] = { 200, 100, 100 };
	u64 got_root = 0, got_a[3] = { 0 }, got_b = 0, total = 0;
	int step, i;

	memset(a, 0, sizeof(a));
	prism_fq_activate(&tier, &root, prism_weight(PRISM_CLASS_BE, 4));
	prism_fq_activate(&tier, &ga, 100);
	prism_fq_activate(&tier, &gb, 300);
	for (i = 0; i < 3; i++)
		prism_fq_activate(&fa, &a[i], aw[i]);
	for (step = 0; step < 30000; step++) {
		u64 cost = 100000 + (rng() % 20) * 100000;
		struct prism_fq_pick p;
		int id;

		prism_fq_pick_init(&p);
		prism_fq_pick_consider(&p, &tier, &root, 0);
		prism_fq_pick_consider(&p, &tier, &ga, 1);
		prism_fq_pick_consider(&p, &tier, &gb, 2);
		id = prism_fq_pick_done(&p, &tier);
		CHECK(id >= 0);
		total += cost;
		if (id == 0) {
			prism_fq_charge(&tier, &root, cost);
			got_root += cost;
		} else if (id == 2) {
			prism_fq_charge(&tier, &gb, cost);
			got_b += cost;
		} else {
			prism_fq_pick_init(&p);
			for (i = 0; i < 3; i++)
				prism_fq_pick_consider(&p, &fa, &a[i], i);
			i = prism_fq_pick_done(&p, &fa);
			CHECK(i >= 0 && i < 3);
			prism_fq_charge(&fa, &a[i], cost);
			prism_fq_charge(&tier, &ga, cost);
			got_a[i] += cost;
		}
	}
	CHECK((double)got_root > 0.2 * 0.98 * (double)total &&
	      (double)got_root < 0.2 * 1.02 * (double)total);
	CHECK((double)got_b > 0.6 * 0.98 * (double)total &&
	      (double)got_b < 0.6 * 1.02 * (double)total);
	CHECK((double)got_a[0] > 0.1 * 0.97 * (double)total &&
	      (double)got_a[0] < 0.1 * 1.03 * (double)total);
	CHECK((double)got_a[1] > 0.05 * 0.97 * (double)total &&
	      (double)got_a[1] < 0.05 * 1.03 * (double)total);
}

/* A weight written while backlogged moves the sums at once. */
TEST(fq_reweight_keeps_the_sums)
{
	struct prism_fq fq = { 0 };
	struct prism_fq_flow f = { 0 }, g = { 0 };

	prism_fq_activate(&fq, &f, 100);
	prism_fq_activate(&fq, &g, 100);
	CHECK(!prism_fq_asymmetric(&fq));
	prism_fq_reweight(&fq, &f, 300);
	CHECK_EQ(fq.wsum, 400);
	CHECK_EQ(fq.w2sum, 300 * 300 + 100 * 100);
	CHECK(prism_fq_asymmetric(&fq));
	prism_fq_deactivate(&fq, &f);
	CHECK_EQ(fq.wsum, 100);
	CHECK_EQ(fq.w2sum, 100 * 100);
	/* Not backlogged: only the weight, for its next activation. */
	prism_fq_reweight(&fq, &f, 0);
	CHECK_EQ(f.weight, 1);
	CHECK_EQ(fq.wsum, 100);
}

/*
 * In a cgroup a BE level does not lift a request above NORMAL, where
 * cgroups share by weight; RT (privileged) and the lower tiers keep
 * theirs.
 */
TEST(tier_in_cgroup_keeps_be_levels_in_normal)
{
	struct prism_tunables t;

	prism_tunables_init(&t, 250);
	CHECK_EQ(prism_classify(PRISM_CLASS_BE, 0, &t), PRISM_HIGH);
	CHECK_EQ(prism_tier_in_cgroup(prism_classify(PRISM_CLASS_BE, 0, &t),
				      PRISM_CLASS_BE), PRISM_NORMAL);
	CHECK_EQ(prism_tier_in_cgroup(PRISM_HIGH, PRISM_CLASS_RT), PRISM_HIGH);
	CHECK_EQ(prism_tier_in_cgroup(PRISM_NORMAL, PRISM_CLASS_BE),
		 PRISM_NORMAL);
	CHECK_EQ(prism_tier_in_cgroup(prism_classify(PRISM_CLASS_BE, 7, &t),
				      PRISM_CLASS_BE), PRISM_LOW);
	CHECK_EQ(prism_tier_in_cgroup(PRISM_LOW, PRISM_CLASS_IDLE), PRISM_LOW);
}

/*
 * WF2Q+'s bound: at every step, each backlogged flow's service is within
 * one maximum request of its own plus one of anyone's of its weighted
 * part of the service so far (the fluid ideal).
 */
TEST(fq_lag_within_the_bound)
{
	static const u32 w[4] = { 80, 40, 20, 10 };
	const u64 lmax = 4000000;
	struct sim s;
	u64 total = 0;
	double worst = 0;
	int i, step;

	sim_init(&s, 4, w);
	for (step = 0; step < 20000; step++) {
		int id = sim_pick(&s);
		u64 cost = 1 + rng() % lmax;

		prism_fq_charge(&s.fq, &s.f[id], cost);
		s.served[id] += cost;
		total += cost;
		for (i = 0; i < 4; i++) {
			double ideal = (double)w[i] / 150.0 * (double)total;
			double lag = ideal - (double)s.served[i];

			if (lag < 0)
				lag = -lag;
			if (lag > worst)
				worst = lag;
		}
	}
	CHECK(worst <= 2.0 * (double)lmax);
	/* And the bound is not vacuous: the lag does reach a request. */
	CHECK(worst > 0.3 * (double)lmax);
}

/*
 * A flow that was idle starts at the tier's virtual time: it goes at the
 * next turn even though a heavier flow has been busy all along, and a
 * flow that used more than its share keeps its debt across a pause.
 */
TEST(fq_idle_flow_served_at_next_turn)
{
	static const u32 w[2] = { 40, 40 };
	struct sim s;
	int step;

	sim_init(&s, 2, w);
	prism_fq_deactivate(&s.fq, &s.f[1]);
	for (step = 0; step < 1000; step++) {
		int id = sim_pick(&s);

		CHECK_EQ(id, 0);
		prism_fq_charge(&s.fq, &s.f[id], 1000000);
	}
	/* Flow 1 wakes with a small request: it goes next. */
	prism_fq_activate(&s.fq, &s.f[1], 40);
	s.f[1].est = 10000;
	CHECK_EQ(sim_pick(&s), 1);
	prism_fq_charge(&s.fq, &s.f[1], 10000);
	/* No credit banked while idle: then they alternate by cost. */
	CHECK_EQ(sim_pick(&s), 0);
}

TEST(fq_debt_survives_a_pause)
{
	static const u32 w[2] = { 40, 40 };
	struct sim s;
	u64 start;

	sim_init(&s, 2, w);
	/* Flow 0 takes a long turn while flow 1 waits. */
	prism_fq_charge(&s.fq, &s.f[0], 50000000);
	start = s.f[0].start;
	prism_fq_deactivate(&s.fq, &s.f[0]);
	CHECK(!prism_fq_reclaimable(&s.fq, &s.f[0]));	/* it owes */
	prism_fq_activate(&s.fq, &s.f[0], 40);
	CHECK_EQ(s.f[0].start, start);
	/* Flow 1 is served until it has caught up. */
	CHECK_EQ(sim_pick(&s), 1);
	prism_fq_charge(&s.fq, &s.f[1], 20000000);
	CHECK_EQ(sim_pick(&s), 1);
	prism_fq_charge(&s.fq, &s.f[1], 40000000);
	CHECK_EQ(sim_pick(&s), 0);
	/* Once the tier's time has passed its start, its slot is free. */
	prism_fq_deactivate(&s.fq, &s.f[0]);
	prism_fq_charge(&s.fq, &s.f[1], 80000000);
	CHECK(prism_fq_reclaimable(&s.fq, &s.f[0]));
}

/* No flow eligible: the virtual time moves up to the earliest start. */
TEST(fq_virtual_time_jumps_to_earliest_start)
{
	static const u32 w[2] = { 10, 80 };
	struct sim s;

	sim_init(&s, 2, w);
	s.f[0].start = s.fq.vtime + 5000;
	s.f[1].start = s.fq.vtime + 7000;
	CHECK_EQ(sim_pick(&s), 0);
	CHECK_EQ(s.fq.vtime, s.f[0].start);
	/* Deactivating the last flow leaves the tier empty and consistent. */
	prism_fq_deactivate(&s.fq, &s.f[0]);
	prism_fq_deactivate(&s.fq, &s.f[1]);
	CHECK_EQ(s.fq.nr, 0);
	CHECK_EQ(s.fq.wsum, 0);
	/* Activating twice counts once. */
	prism_fq_activate(&s.fq, &s.f[0], 10);
	prism_fq_activate(&s.fq, &s.f[0], 10);
	CHECK_EQ(s.fq.nr, 1);
	CHECK_EQ(s.fq.wsum, 10);
}

/* Virtual times wrap: comparisons stay right across the wrap. */
TEST(fq_virtual_time_wraps)
{
	static const u32 w[2] = { 40, 40 };
	struct sim s;
	int step, n0 = 0;

	sim_init(&s, 2, w);
	s.fq.vtime = ~0ULL - 1000000;
	s.f[0].start = s.fq.vtime;
	s.f[1].start = s.fq.vtime;
	for (step = 0; step < 1000; step++) {
		int id = sim_pick(&s);

		n0 += id == 0;
		prism_fq_charge(&s.fq, &s.f[id], 100000);
	}
	CHECK_EQ(n0, 500);
}

/*
 * A greedy flow (always backlogged, large requests) against four light
 * ones that come and go: each light flow is served within two turns of
 * waking, and all-backlogged shares are even.
 */
TEST(fq_light_flows_beside_a_greedy_one)
{
	static const u32 w[5] = { 40, 40, 40, 40, 40 };
	struct sim s;
	int waited[5] = { 0 }, worst = 0, step, i;

	sim_init(&s, 5, w);
	for (i = 1; i < 5; i++)
		prism_fq_deactivate(&s.fq, &s.f[i]);
	for (step = 0; step < 5000; step++) {
		int id;

		/* Light flows wake now and then, with one small request. */
		for (i = 1; i < 5; i++) {
			if (!s.f[i].backlogged && rng() % 8 == 0) {
				prism_fq_activate(&s.fq, &s.f[i], 40);
				waited[i] = 0;
			}
		}
		id = sim_pick(&s);
		prism_fq_charge(&s.fq, &s.f[id], id ? 100000 : 2000000);
		for (i = 1; i < 5; i++) {
			if (!s.f[i].backlogged)
				continue;
			if (i == id) {
				prism_fq_deactivate(&s.fq, &s.f[i]);
			} else if (++waited[i] > worst) {
				worst = waited[i];
			}
		}
	}
	/* At most the others' turns: three light ones and the greedy one. */
	CHECK(worst <= 4);
}

/* Inside a tier, a flow's batch ends at its quantum of device time. */
TEST(batch_ends_at_the_quantum)
{
	struct prism_tunables t = flow_defaults();
	struct prism_tier_view v[PRISM_NR_TIERS];
	struct prism_batch b;
	struct prism_choice c;
	enum prism_hold hold;
	int n = 0;

	memset(v, 0, sizeof(v));
	prism_batch_reset(&b);
	v[PRISM_NORMAL].dir[PRISM_READ].queued = 100;
	t.fifo_batch = 100;
	t.quantum = 10000000;	/* 10 ms */
	/* 3 ms requests: the fourth passes the quantum and ends the batch. */
	do {
		CHECK(mech_choose_cost(v, &b, &t, &unlimited, 0, &c, &hold, 3000000));
		n++;
	} while (c.batch || n == 1);
	CHECK_EQ(n, 5);	/* four in the batch, then a new one */
}

/*
 * Shares between tiers count cost: LOW's 1 MiB reads against HIGH's
 * 4 KiB ones get low_share of the device's time, not of its dispatches.
 */
TEST(tier_share_counts_cost)
{
	struct prism_tunables t = flow_defaults();
	struct prism_tier_view v[PRISM_NR_TIERS];
	struct prism_batch b;
	struct prism_choice c;
	enum prism_hold hold;
	u64 cost[PRISM_NR_TIERS] = { 0 };
	int i, n_low = 0;

	memset(v, 0, sizeof(v));
	prism_batch_reset(&b);
	v[PRISM_HIGH].dir[PRISM_READ].queued = 1000;
	v[PRISM_LOW].dir[PRISM_READ].queued = 1000;
	for (i = 0; i < 10000; i++) {
		/* What prism_choose() will pick decides the cost: peek. */
		struct prism_batch peek = b;
		struct prism_tier_view pv[PRISM_NR_TIERS];
		u64 cst;

		memcpy(pv, v, sizeof(pv));
		CHECK(mech_choose_cost(pv, &peek, &t, &unlimited, 0, &c, &hold, 1));
		cst = c.tier == PRISM_LOW ? 10000000 : 100000;
		CHECK(mech_choose_cost(v, &b, &t, &unlimited, 0, &c, &hold, cst));
		cost[c.tier] += cst;
		n_low += c.tier == PRISM_LOW;
	}
	/* 10% of the time (within a point), far less than 10% of requests. */
	CHECK(cost[PRISM_LOW] * 100 > (cost[PRISM_LOW] + cost[PRISM_HIGH]) * 9);
	CHECK(cost[PRISM_LOW] * 100 < (cost[PRISM_LOW] + cost[PRISM_HIGH]) * 11);
	CHECK(n_low < 10000 / 50);
}

TEST(flow_tag_limit_progressive_never_zero)
{
	struct prism_tunables t = flow_defaults();

	/* Alone: never limited, whatever it holds. */
	CHECK_EQ(prism_flow_alloc_depth(64, false, 64, &t), 0);
	/* With others: free below its half, then 2 x 32 - held, then 1. */
	CHECK_EQ(prism_flow_alloc_depth(31, true, 64, &t), 0);
	CHECK_EQ(prism_flow_alloc_depth(32, true, 64, &t), 32);
	CHECK_EQ(prism_flow_alloc_depth(40, true, 64, &t), 24);
	CHECK_EQ(prism_flow_alloc_depth(63, true, 64, &t), 1);
	CHECK_EQ(prism_flow_alloc_depth(64, true, 64, &t), 1);
	CHECK_EQ(prism_flow_alloc_depth(1000, true, 64, &t), 1);
	/* At the smallest depths the part is one tag, the limit never 0. */
	CHECK_EQ(prism_flow_alloc_depth(1, true, 1, &t), 1);
	CHECK_EQ(prism_flow_alloc_depth(0, true, 1, &t), 0);
	t.flow_depth = 100;	/* off */
	CHECK_EQ(prism_flow_alloc_depth(64, true, 64, &t), 0);
}

TEST(flow_tag_limit_needed_only_when_a_flow_can_hold_its_part)
{
	/* 64 tags at 50 %: a part of 32, and two flows owning requests. */
	CHECK(!prism_flow_limit_may(31, 64, 50));
	CHECK(prism_flow_limit_may(32, 64, 50));
	CHECK(!prism_flow_limit_may(1, 1, 50));	/* one request: one flow */
	CHECK(prism_flow_limit_may(2, 1, 50));	/* part of one tag */
	CHECK(!prism_flow_limit_may(1000, 64, 100));	/* off */
}

TEST(flow_tag_limit_fast_test_never_misses_the_exact_one)
{
	u32 nr, pct;
	u64 total;
	int near_only = 0;

	/* limit_depth()'s fast path may err only towards the slow path. */
	for (nr = 1; nr <= 256; nr++)
		for (pct = 1; pct <= 100; pct++)
			for (total = 0; total <= 2 * nr + 2; total++) {
				bool may = prism_flow_limit_may(total, nr, pct);
				bool near = prism_flow_limit_near(total, nr,
							prism_flow_frac(pct));

				CHECK(!may || near);
				near_only += near && !may;
			}
	/* Off stays off, and the test is not simply always true. */
	CHECK(!prism_flow_limit_near(100000, 64, prism_flow_frac(100)));
	CHECK(!prism_flow_limit_near(31, 64, prism_flow_frac(50)));
	CHECK(near_only < 256 * 100);
}

TEST(flow_tunables_validated)
{
	struct prism_tunables t = flow_defaults();

	CHECK(prism_tunables_valid(&t));
	t.quantum = 0;
	CHECK(!prism_tunables_valid(&t));
	t = flow_defaults();
	t.flow_depth = 0;
	CHECK(!prism_tunables_valid(&t));
	t.flow_depth = 101;
	CHECK(!prism_tunables_valid(&t));
}

/*
 * A lone flow's charge moves the tier's virtual time by its own delta (the
 * mechanism skips the second division then); with others backlogged, by
 * cost over the sum of the weights.
 */
TEST(fq_charge_alone_and_shared)
{
	static const u32 w[2] = { 70, 10 };
	struct sim s;
	u64 v, start;

	sim_init(&s, 2, w);
	prism_fq_deactivate(&s.fq, &s.f[1]);
	v = s.fq.vtime;
	start = s.f[0].start;
	prism_fq_charge(&s.fq, &s.f[0], 3000000);
	CHECK_EQ(s.f[0].start - start, prism_vt_delta(3000000, 70));
	CHECK_EQ(s.fq.vtime - v, prism_vt_delta(3000000, 70));
	prism_fq_activate(&s.fq, &s.f[1], 10);
	v = s.fq.vtime;
	start = s.f[0].start;
	prism_fq_charge(&s.fq, &s.f[0], 3000000);
	CHECK_EQ(s.f[0].start - start, prism_vt_delta(3000000, 70));
	CHECK_EQ(s.fq.vtime - v, prism_vt_delta(3000000, 80));
}

/*
 * One tier queued and served in its own right: every credit starts again
 * from zero (the mechanism's common case, done without the loop), as it
 * does in the loop for a tier with nothing queued or served plainly.
 */
TEST(account_one_tier_clears_credits)
{
	struct prism_tunables t = flow_defaults();
	struct prism_choice c = { .tier = PRISM_NORMAL };
	struct prism_batch b;
	int tier;

	prism_batch_reset(&b);
	prism_account(&b, &t, (1U << PRISM_NORMAL) | (1U << PRISM_LOW), &c,
		      1000);
	CHECK(b.credit[PRISM_LOW] > 0);
	b.credit[PRISM_HIGH] = 5;
	b.credit[PRISM_NORMAL] = 7;
	prism_account(&b, &t, 1U << PRISM_NORMAL, &c, 1000);
	for (tier = 0; tier < PRISM_NR_TIERS; tier++)
		CHECK_EQ(b.credit[tier], 0);
	CHECK_EQ(b.last_cost[PRISM_NORMAL], 1000);
}

/*
 * Idle time held for a tier's next link counts as that tier's: the
 * waiting tiers below earn their share of it, so a bulk tier beside a
 * chain of small dependent requests still earns dispatches; but no more
 * than its next dispatch, however long the device idled.
 */
TEST(idle_hold_time_earns_lower_shares)
{
	struct prism_tunables t = flow_defaults();
	struct prism_batch b;
	u32 queued = (1U << PRISM_NORMAL) | (1U << PRISM_LOW);
	s64 low_owed = (s64)(PRISM_SHARE_UNIT - t.share[PRISM_LOW]) * 2000000;
	s64 normal_owed =
		(s64)(PRISM_SHARE_UNIT - t.share[PRISM_NORMAL]) * 2000000;

	prism_batch_reset(&b);
	b.last_cost[PRISM_LOW] = 2000000;
	b.last_cost[PRISM_NORMAL] = 2000000;
	prism_account_idle(&b, &t, queued, PRISM_NORMAL, 5000000);
	CHECK_EQ(b.credit[PRISM_LOW], 10LL * 5000000);
	CHECK_EQ(b.credit[PRISM_NORMAL], 0);	/* not below itself */
	/* Held for HIGH: NORMAL, queued, earns; LOW, not queued, does not. */
	prism_account_idle(&b, &t, 1U << PRISM_NORMAL, PRISM_HIGH, 5000000);
	CHECK_EQ(b.credit[PRISM_LOW], 10LL * 5000000);
	CHECK_EQ(b.credit[PRISM_NORMAL], 25LL * 5000000);

	/* A long hold makes each tier owed one dispatch, not a burst. */
	prism_account_idle(&b, &t, queued, PRISM_HIGH, 1000000000);
	CHECK_EQ(b.credit[PRISM_LOW], low_owed);
	CHECK_EQ(b.credit[PRISM_NORMAL], normal_owed);
	/* Credit above that, earned by dispatches, is kept, not cut. */
	b.credit[PRISM_LOW] = 3 * low_owed;
	prism_account_idle(&b, &t, queued, PRISM_NORMAL, 1000000000);
	CHECK_EQ(b.credit[PRISM_LOW], 3 * low_owed);
}

/*
 * An empty bucket: wait as long as prism_bucket_wait() says and refill;
 * it must then hold tokens. The wait, or 0 if it did not (a failure).
 */
static u64 bucket_wait_out(struct prism_bucket *bk, u64 rate, u64 *now)
{
	u64 wait = prism_bucket_wait(bk, rate, *now);

	CHECK(wait > 0);
	*now += wait;
	prism_bucket_fill(bk, rate, BURST, *now);
	CHECK(prism_bucket_ready(bk));
	return prism_bucket_ready(bk) ? wait : 0;
}

/*
 * Token buckets: a cap of 20 MiB/s on a 200 MB/s device is a tenth of
 * its time (about); a new bucket starts full (100 ms of it); a tier that
 * dispatches back to back gets the rate over a simulated 10 s, within
 * 1%, whatever its request size; the wait covers the debt exactly.
 */
TEST(bucket_caps_at_its_rate)
{
	static const u64 sizes[] = { 4096, 65536, 1 << 20, 4 << 20 };
	u64 rate = prism_bucket_rate(20 * 1024, 200000000ULL);
	int i;

	CHECK_EQ(prism_bucket_rate(0, 200000000ULL), 0);
	CHECK(rate > 104000000ULL && rate < 106000000ULL);	/* 104.9 ms/s */
	for (i = 0; i < 4; i++) {
		struct prism_bucket bk = { };
		u64 now = 5000000000ULL, end = now + 10000000000ULL, spent = 0;
		/* Each request costs its transfer at the device's rate. */
		u64 cost = sizes[i] * 1000000000ULL / 200000000ULL;

		prism_bucket_fill(&bk, rate, BURST, now);
		CHECK_EQ(bk.tokens, (s64)(rate / 10));
		while (now < end) {
			prism_bucket_fill(&bk, rate, BURST, now);
			if (!prism_bucket_ready(&bk)) {
				if (!bucket_wait_out(&bk, rate, &now))
					break;
				continue;
			}
			prism_bucket_charge(&bk, cost);
			spent += cost;
			now += 1000 + rng() % 5000;	/* the next one comes soon */
		}
		/* The burst on top of 10 s at the rate, within 1%. */
		CHECK(spent > (rate * 10 + rate / 10) * 99 / 100 &&
		      spent < (rate * 10 + rate / 10) * 101 / 100 + cost);
	}
}

/*
 * A request may cost many seconds of a low cap: 10 ms random reads under
 * a cap of 100 KiB/s on a 200 MB/s device (0.51 ms of device time per
 * second) cost 19.5 s each; a 1 GiB write at 20 MiB/s costs about 50 s.
 * The tier still gets its rate, within 1% over a simulated stretch of
 * many requests, and no wait is longer than its debt at the rate: a
 * bucket credited less than its time would hold the tier for the square
 * of the debt (what a fill capped at a second's worth did).
 */
TEST(bucket_pays_a_debt_of_many_seconds_on_time)
{
	static const struct { u32 kbps; u64 cost; int reqs; } cases[] = {
		{ 100, 10000000ULL, 50 },
		{ 20 * 1024, 5368709120ULL, 20 },
		{ 1, 10000000ULL, 3 },
	};
	int i;

	for (i = 0; i < 3; i++) {
		u64 rate = prism_bucket_rate(cases[i].kbps, 200000000ULL);
		u64 start = 1000000000ULL, now = start, spent = 0;
		struct prism_bucket bk = { };
		int n = 0;

		prism_bucket_fill(&bk, rate, BURST, now);
		while (n < cases[i].reqs) {
			prism_bucket_fill(&bk, rate, BURST, now);
			if (!prism_bucket_ready(&bk)) {
				u64 debt = (u64)(-bk.tokens) + 1;
				u64 wait = bucket_wait_out(&bk, rate, &now);

				if (!wait)
					break;
				/* At most the debt at the rate, plus a us. */
				CHECK(wait <= debt * 1000000000ULL / rate + 1000);
				continue;
			}
			prism_bucket_charge(&bk, cases[i].cost);
			spent += cases[i].cost;
			n++;
			now += 1000;
		}
		/* All but the last request's debt was paid at the rate. */
		{
			u64 paid = spent - cases[i].cost + rate / 10;
			u64 took = now - start;
			u64 fair = paid * 1000000ULL / rate * 1000;

			CHECK(took >= fair * 99 / 100 && took <= fair * 101 / 100);
		}
	}
}

/*
 * The cap's rate never wraps: kbps x 1024 x 1e9 overflows 64 bits above
 * 18,014,398 KiB/s (the tunable's range allows more), which once gave a
 * few microseconds a second instead of a huge cap. Each rate within
 * 0.01% of the exact quotient, or at the ceiling.
 */
TEST(bucket_rate_does_not_wrap)
{
	static const u32 kbps[] = { 1, 1024, 18014398, 18014399, 20000000,
				    0x7fffffff };
	static const u64 bps[] = { 1000000ULL, 200000000ULL, 20000000000ULL };
	int i, j;

	for (j = 0; j < 3; j++) {
		for (i = 0; i < 6; i++) {
			unsigned __int128 exact = (unsigned __int128)kbps[i] *
						  1024 * 1000000000ULL / bps[j];
			u64 rate = prism_bucket_rate(kbps[i], bps[j]);

			if (exact >= PRISM_BUCKET_RATE_MAX) {
				CHECK_EQ(rate, PRISM_BUCKET_RATE_MAX);
			} else {
				CHECK(rate <= exact + 1 &&
				      rate >= exact - exact / 10000);
			}
		}
	}
}

/* Idle for a minute, the bucket holds its burst and no more. */
TEST(bucket_banks_only_its_burst)
{
	struct prism_bucket bk = { };
	u64 rate = prism_bucket_rate(1024, 100000000ULL);

	prism_bucket_fill(&bk, rate, BURST, 1000);
	prism_bucket_charge(&bk, (u64)bk.tokens + 5000000);
	CHECK(!prism_bucket_ready(&bk));
	prism_bucket_fill(&bk, rate, BURST, 1000 + 60000000000ULL);
	CHECK_EQ(bk.tokens, (s64)(rate / 10));
	CHECK_EQ(prism_bucket_wait(&bk, rate, 2000), 0);
	/* The cap is bounded: a huge rate on a slow device does not wrap. */
	CHECK_EQ(prism_bucket_rate(0x7fffffff, 1), PRISM_BUCKET_RATE_MAX);
}

/*
 * rate_burst sets what the bucket banks: at 2 ms it holds 2 ms of refill
 * after a minute idle, so a capped tier back from a hold sends one
 * request's worth, not 100 ms of them at once; and its rate over time
 * is the cap's, whatever the burst (the debt of each request is paid).
 */
TEST(bucket_burst_is_the_tunable)
{
	u64 rate = prism_bucket_rate(61440, 125ULL << 20);
	u64 burst = 2000000, now = 1000, sent = 0, cost = 8000000;
	struct prism_bucket bk = { };
	int i;

	prism_bucket_fill(&bk, rate, burst, now);
	prism_bucket_charge(&bk, (u64)bk.tokens + 1);
	now += 60000000000ULL;
	prism_bucket_fill(&bk, rate, burst, now);
	CHECK_EQ(bk.tokens, (s64)(rate / 500));
	/* Backlogged for ten seconds: requests of 8 ms of cost each. */
	for (i = 0; i < 10000; i++) {
		now += 1000000;
		prism_bucket_fill(&bk, rate, burst, now);
		while (prism_bucket_ready(&bk)) {
			prism_bucket_charge(&bk, cost);
			sent += cost;
		}
	}
	/* 10 s at the rate, within one request and the burst. */
	CHECK(sent <= rate * 10 + cost + burst * rate / 1000000000ULL);
	CHECK(sent + cost >= rate * 10);
}

/*
 * A burst that rounds to no tokens (100 KiB/s on a 500 MB/s model, 4 us
 * of burst: under a thousandth of a token) still holds one, so the tier
 * is sent a request whenever its debt is paid, at the cap's rate; before
 * the fix the bucket never became ready and the tier was held for good.
 */
TEST(bucket_with_a_tiny_burst_still_sends)
{
	u64 rate = prism_bucket_rate(100, 500000000ULL);
	u64 burst = 4000, now = 1000, cost = 8192 * 2, sent = 0;
	struct prism_bucket bk = { };
	int i;

	CHECK(rate * (burst / 1000) < 1000000);
	prism_bucket_fill(&bk, rate, burst, now);
	CHECK(prism_bucket_ready(&bk));
	for (i = 0; i < 50; i++) {
		if (!prism_bucket_ready(&bk) && !bucket_wait_out(&bk, rate, &now))
			break;
		prism_bucket_charge(&bk, cost);
		sent++;
	}
	CHECK_EQ(sent, 50);
	/* 49 debts paid at the rate: the time they took is the cap's. */
	CHECK(now >= 1000 + 49 * cost * 1000000000ULL / rate);
}

/* A burst lowered while the bucket holds more applies at the next fill. */
TEST(bucket_lowered_burst_trims_what_is_banked)
{
	u64 rate = prism_bucket_rate(61440, 125ULL << 20);
	struct prism_bucket bk = { };

	prism_bucket_fill(&bk, rate, BURST, 1000);
	CHECK_EQ(bk.tokens, (s64)(rate / 10));
	prism_bucket_fill(&bk, rate, 2000000, 2000);
	CHECK_EQ(bk.tokens, (s64)(rate / 500));
}

/*
 * An empty view, and a batch open in @tier on @flow, @count requests in,
 * whose flow has nothing queued and is expected back.
 */
static void flow_wait_setup(struct prism_tier_view v[PRISM_NR_TIERS],
			    struct prism_batch *b, int tier, int flow, u32 count)
{
	memset(v, 0, sizeof(*v) * PRISM_NR_TIERS);
	prism_batch_reset(b);
	b->tier = tier;
	b->flow = flow;
	b->count = count;
	v[tier].flow_waits = true;
}

/*
 * Idling for a flow: an open batch whose flow has nothing queued but is
 * expected back holds its tier's other flows and the tiers below, within
 * the turn's bounds; shares still pass.
 */
TEST(flow_turn_waits_for_its_flow)
{
	struct prism_tunables t = flow_defaults();
	struct prism_tier_view v[PRISM_NR_TIERS];
	struct prism_batch b;
	struct prism_choice c;
	enum prism_hold hold;

	flow_wait_setup(v, &b, PRISM_NORMAL, 3, 2);
	b.dir = PRISM_READ;
	b.cost = 1000000;
	/* Other flows of NORMAL are queued; the batch's flow has none. */
	v[PRISM_NORMAL].dir[PRISM_READ].queued = 5;
	CHECK(!prism_choose(v, &b, &t, &unlimited, 0, &c, &hold));
	CHECK_EQ(hold, PRISM_HOLD_FLOW);
	/* Not expected back: a new turn, the fair queue chooses. */
	v[PRISM_NORMAL].flow_waits = false;
	CHECK(prism_choose(v, &b, &t, &unlimited, 0, &c, &hold));
	CHECK_EQ(c.flow, -1);
	/* Its turn used up, by count or by cost: no waiting either. */
	v[PRISM_NORMAL].flow_waits = true;
	b.count = t.fifo_batch;
	CHECK(prism_choose(v, &b, &t, &unlimited, 0, &c, &hold));
	CHECK_EQ(c.flow, -1);
	b.count = 2;
	b.cost = t.quantum;
	CHECK(prism_choose(v, &b, &t, &unlimited, 0, &c, &hold));
	CHECK_EQ(c.flow, -1);
}

TEST(flow_wait_holds_lower_tiers_not_shares)
{
	struct prism_tunables t = flow_defaults();
	struct prism_tier_view v[PRISM_NR_TIERS];
	struct prism_batch b;
	struct prism_choice c;
	enum prism_hold hold;

	flow_wait_setup(v, &b, PRISM_HIGH, 0, 1);
	v[PRISM_LOW].dir[PRISM_READ].queued = 4;
	v[PRISM_LOW].dir[PRISM_READ].flow = PRISM_NR_TIERS - 1;
	CHECK(!prism_choose(v, &b, &t, &unlimited, 0, &c, &hold));
	CHECK_EQ(hold, PRISM_HOLD_FLOW);
	/* LOW owed its share: it passes the wait, as it passes a window. */
	b.last_cost[PRISM_LOW] = 1000;
	b.credit[PRISM_LOW] = (PRISM_SHARE_UNIT - t.share[PRISM_LOW]) * 1000;
	CHECK(prism_choose(v, &b, &t, &unlimited, 0, &c, &hold));
	CHECK_EQ(c.tier, PRISM_LOW);
	CHECK(c.shared);
	/* The share closed the batch: nothing waits any more. */
	CHECK_EQ(b.tier, -1);
}

TEST(flow_expected_rules)
{
	struct prism_think th = { 0 };
	const u64 w = 8000000;	/* 8 ms */
	const u64 now = 1000000000;

	/* In the device: expected, unless dispatched too long ago. */
	CHECK(prism_flow_expected(&th, 1, now - 50000000, now, w));
	CHECK(!prism_flow_expected(&th, 1, now - PRISM_FLOW_WAIT_MAX, now, w));
	/* Never with a window of 0. */
	CHECK(!prism_flow_expected(&th, 1, now, now, 0));
	/* Done, no think samples yet: within the window, given the doubt. */
	th.last_done = now - 2000000;
	CHECK(prism_flow_expected(&th, 0, 0, now, w));
	th.last_done = now - w;
	CHECK(!prism_flow_expected(&th, 0, 0, now, w));
	/* A quick thinker is waited for; a slow one is not. */
	th.last_done = now - 1000000;
	th.samples = PRISM_THINK_SAMPLES;
	th.mean = 1500000;
	CHECK(prism_flow_expected(&th, 0, 0, now, w));
	th.mean = 2 * w;
	CHECK(!prism_flow_expected(&th, 0, 0, now, w));
	/* Never done yet: nothing to wait from. */
	th.last_done = 0;
	th.mean = 0;
	CHECK(!prism_flow_expected(&th, 0, 0, now, w));
}

TEST(flow_idle_window_by_device)
{
	struct prism_stream random = { 0 }, stream = { 0 };
	struct prism_fq fq = { 0 };
	struct prism_fq_flow f = { .weight = 40 };
	const u64 w = 8000000;	/* 8 ms */
	int i;

	for (i = 0; i < PRISM_SEQ_SCORE_MAX; i++)
		prism_stream_update(&stream, 8 * i, 8, 64);
	for (i = 0; i < PRISM_SEQ_SCORE_MAX; i++)
		prism_stream_update(&random, 1000000 * (i % 3), 8, 64);
	CHECK(stream.score >= PRISM_SEQ_THRESHOLD);
	CHECK(random.score < PRISM_SEQ_THRESHOLD);

	/* Two backlogged flows of f's weight: a tier of equals. */
	fq.nr = 2;
	fq.wsum = 80;
	/*
	 * One command at a time: a stream gets the whole window; a random
	 * flow among equals saves no seek, so only a short wait, and never
	 * longer than the window itself.
	 */
	CHECK_EQ(prism_flow_idle_window(1, true, &stream, &fq, &f, w), w);
	CHECK_EQ(prism_flow_idle_window(1, true, &random, &fq, &f, w),
		 PRISM_SEEKY_WINDOW);
	CHECK(PRISM_SEEKY_WINDOW < w);
	CHECK_EQ(prism_flow_idle_window(1, true, &random, &fq, &f, 1000000),
		 1000000);
	CHECK_EQ(prism_flow_idle_window(1, true, &random, &fq, &f, 0), 0);
	/* A queueing device: a stream yes, a random flow among equals no. */
	CHECK_EQ(prism_flow_idle_window(32, true, &stream, &fq, &f, w), w);
	CHECK_EQ(prism_flow_idle_window(32, true, &random, &fq, &f, w), 0);
	/* Flash: among equals no wait pays, stream or not, deep or not. */
	CHECK_EQ(prism_flow_idle_window(32, false, &stream, &fq, &f, w), 0);
	CHECK_EQ(prism_flow_idle_window(1, false, &stream, &fq, &f, w), 0);
	CHECK_EQ(prism_flow_idle_window(32, false, &random, &fq, &f, w), 0);
	/* Nobody else backlogged: nothing to keep a ratio against. */
	fq.nr = 0;
	fq.wsum = 0;
	CHECK_EQ(prism_flow_idle_window(32, true, &random, &fq, &f, w), 0);
	CHECK_EQ(prism_flow_idle_window(1, true, &random, &fq, &f, w),
		 PRISM_SEEKY_WINDOW);
	/* Another weight backlogged: only the wait keeps the ratio, whole. */
	fq.nr = 2;
	fq.wsum = 40 + 10;
	CHECK_EQ(prism_flow_idle_window(32, true, &random, &fq, &f, w), w);
	CHECK_EQ(prism_flow_idle_window(1, true, &random, &fq, &f, w), w);
	CHECK_EQ(prism_flow_idle_window(32, false, &random, &fq, &f, w), w);
	CHECK_EQ(prism_flow_idle_window(32, false, &stream, &fq, &f, w), w);
}

TEST(seeky_flow_thinking_longer_than_the_short_window_is_not_waited_for)
{
	struct prism_think th = { 0 };
	const u64 now = 1000000000;

	/*
	 * A pgbench backend: milliseconds of work between its random reads.
	 * Within the flow window it would be waited for; within the short
	 * window for a random flow among equals it is not.
	 */
	th.last_done = now - 500000;
	th.samples = PRISM_THINK_SAMPLES;
	th.mean = 4000000;
	CHECK(prism_flow_expected(&th, 0, 0, now, 8000000));
	CHECK(!prism_flow_expected(&th, 0, 0, now, PRISM_SEEKY_WINDOW));
	/* A reader that asks again at once still is. */
	th.mean = 300000;
	CHECK(prism_flow_expected(&th, 0, 0, now, PRISM_SEEKY_WINDOW));
}

TEST(flow_window_auto_by_media)
{
	struct prism_tunables t = flow_defaults();
	struct prism_depth_ctl d;

	prism_depth_init(&d, 1);
	CHECK_EQ(prism_flow_window(&d, &t, true, false),
		 prism_window(&d, &t, true));
	CHECK_EQ(prism_flow_window(&d, &t, false, false), 0);
	/* Flash idles only while weights differ, then bfq's slice_idle. */
	CHECK(prism_window(&d, &t, false) < PRISM_WEIGHTS_WINDOW);
	CHECK_EQ(prism_flow_window(&d, &t, false, true), PRISM_WEIGHTS_WINDOW);
	/* A window set is both windows, exactly, on any medium. */
	t.slice_idle = 12000000;
	CHECK_EQ(prism_flow_window(&d, &t, true, true), 12000000);
	CHECK_EQ(prism_window(&d, &t, true), 12000000);
	t.slice_idle = 2000000;
	CHECK_EQ(prism_flow_window(&d, &t, false, false), 2000000);
	CHECK_EQ(prism_flow_window(&d, &t, true, true), 2000000);
	CHECK_EQ(prism_window(&d, &t, false), 2000000);
	t.slice_idle = 0;
	CHECK_EQ(prism_flow_window(&d, &t, true, true), 0);
	CHECK_EQ(prism_window(&d, &t, true), 0);
	/* At most the activity clock, at least automatic. */
	t.slice_idle = PRISM_ACTIVE_NS;
	CHECK(prism_tunables_valid(&t));
	t.slice_idle = PRISM_ACTIVE_NS + 1;
	CHECK(!prism_tunables_valid(&t));
	t.slice_idle = -2;
	CHECK(!prism_tunables_valid(&t));
}

TEST(weights_differed_within_a_second)
{
	CHECK(!prism_weights_differed(1000, 0, 250));	/* never */
	CHECK(prism_weights_differed(1000, 1000, 250));
	CHECK(prism_weights_differed(1249, 1000, 250));
	CHECK(!prism_weights_differed(1250, 1000, 250));
	CHECK(prism_weights_differed(100, (unsigned long)-100, 250));
}


TEST(fq_idle_time_is_the_flows)
{
	struct prism_fq fq = { 0 };
	struct prism_fq_flow a = { 0 }, b = { 0 };
	u64 start, vt;

	prism_fq_activate(&fq, &a, 40);
	prism_fq_activate(&fq, &b, 40);
	prism_fq_deactivate(&fq, &a);	/* a between two requests */
	start = a.start;
	vt = fq.vtime;
	prism_fq_charge_idle(&fq, &a, 4000000);
	CHECK_EQ(a.start - start, prism_vt_delta(4000000, 40));
	/* The tier's time moves over both weights, a's included. */
	CHECK_EQ(fq.vtime - vt, prism_vt_delta(4000000, 80));
	CHECK_EQ(fq.wsum, 40);
	/*
	 * Once served, a wait costs it at most one request of its last cost:
	 * 4 ms of think time against a 20 us request is 20 us, not 200 of them.
	 */
	prism_fq_activate(&fq, &a, 40);
	prism_fq_charge(&fq, &a, 20000);
	prism_fq_deactivate(&fq, &a);
	start = a.start;
	vt = fq.vtime;
	prism_fq_charge_idle(&fq, &a, 4000000);
	CHECK_EQ(a.start - start, prism_vt_delta(20000, 40));
	CHECK_EQ(fq.vtime - vt, prism_vt_delta(20000, 80));
	/* A wait shorter than a request is charged as it was. */
	start = a.start;
	prism_fq_charge_idle(&fq, &a, 5000);
	CHECK_EQ(a.start - start, prism_vt_delta(5000, 40));
}

/* A flow back while expected keeps its place; one back later does not. */
TEST(fq_return_keeps_the_start)
{
	struct prism_fq fq = { 0 };
	struct prism_fq_flow a = { 0 }, b = { 0 };

	prism_fq_activate(&fq, &a, 40);
	prism_fq_activate(&fq, &b, 40);
	prism_fq_deactivate(&fq, &a);
	prism_fq_charge(&fq, &b, 4000000);	/* b served in a's gap */
	CHECK(prism_vt_before(a.start, fq.vtime));
	prism_fq_return(&fq, &a, 40, QUANTUM);
	CHECK_EQ(a.start, 0);
	CHECK(a.backlogged);
	CHECK_EQ(fq.wsum, 80);
	CHECK_EQ(fq.nr, 2);
	prism_fq_deactivate(&fq, &a);
	prism_fq_activate(&fq, &a, 40);
	CHECK_EQ(a.start, fq.vtime);
}

/* How far @f's start trails @ref, 0 if it does not. */
static u64 vt_behind(const struct prism_fq_flow *f, u64 ref)
{
	return prism_vt_before(f->start, ref) ? ref - f->start : 0;
}

/* The fair queue's pick among @n flows (backlogged, or all if @all). */
static int fq_pick_n(struct prism_fq *fq, struct prism_fq_flow *f, int n,
		     bool all)
{
	struct prism_fq_pick p;
	int i;

	prism_fq_pick_init(&p);
	for (i = 0; i < n; i++)
		if (all || f[i].backlogged)
			prism_fq_pick_consider(&p, fq, &f[i], i);
	return prism_fq_pick_done(&p, fq);
}

/*
 * Flows that come and go return to their starts (prism_fq_return()),
 * behind a virtual time that moved with whoever was backlogged: three
 * readers, each away two turns in three, 300 rounds. Each keeps no more
 * than a turn of credit however often it returns: its start is never
 * more than a turn behind the earliest start of the last pick (kept
 * whole, each was more than 100 ms of service behind V after the 300
 * rounds, and an application starting beside them at V, at 30 times
 * their weight, waited 20 of their requests and more: 0.5-0.9 s on the
 * emulated HDD), and a newcomer started with the earliest of them
 * inherits no more.
 */
static int newcomer_waits(bool at_earliest)
{
	struct prism_fq fq = { 0 };
	struct prism_fq_flow f[4] = { 0 };
	u64 earliest;
	int i, j, round, picks;

	for (i = 0; i < 3; i++)
		prism_fq_activate(&fq, &f[i], 100);
	for (round = 0; round < 300; round++) {
		i = round % 3;
		/* Only reader i is backlogged for its turn. */
		prism_fq_deactivate(&fq, &f[(i + 1) % 3]);
		prism_fq_deactivate(&fq, &f[(i + 2) % 3]);
		CHECK_EQ(fq_pick_n(&fq, f, 3, false), i);
		prism_fq_charge(&fq, &f[i], 7000000);
		prism_fq_charge(&fq, &f[i], 7000000);
		prism_fq_return(&fq, &f[(i + 1) % 3], 100, QUANTUM);
		prism_fq_return(&fq, &f[(i + 2) % 3], 100, QUANTUM);
		for (j = 0; j < 3; j++)
			CHECK(vt_behind(&f[j], fq.vmin) <=
			      prism_fq_turn(&f[j], 100, QUANTUM));
	}
	earliest = fq.vtime;
	for (i = 0; i < 3; i++)
		if (prism_vt_before(f[i].start, earliest))
			earliest = f[i].start;
	/* Made now, as the mechanism makes a flow: at the virtual time. */
	f[3].start = fq.vtime;
	f[3].est = 6666666;
	prism_fq_activate_at(&fq, &f[3], 3000,
			     at_earliest ? earliest : fq.vtime, QUANTUM);
	CHECK(vt_behind(&f[3], fq.vmin) <= prism_fq_turn(&f[3], 3000, QUANTUM));
	/* Picks (each a reader's 7 ms) until the newcomer is chosen. */
	for (picks = 0; picks < 1000; picks++) {
		int id = fq_pick_n(&fq, f, 4, true);

		if (id == 3)
			break;
		prism_fq_charge(&fq, &f[id], 7000000);
	}
	return picks;
}

TEST(returning_flows_keep_a_turn_and_newcomers_wait_little)
{
	/*
	 * V moved with one reader at a time, three times as fast as the
	 * readers' starts: a flow made at V waits while they catch up (the
	 * earliest rule is there for it); started with the earliest of
	 * them, a newcomer at 30 times their weight goes at the next pick.
	 */
	CHECK(newcomer_waits(false) >= 20);
	CHECK_EQ(newcomer_waits(true), 0);
}

/*
 * A newcomer starts with the earliest backlogged flow, but no more than a
 * turn of its own behind the earliest start of the last pick: beside a
 * flow that trails it by many turns, it does not take that credit over.
 */
TEST(newcomer_inherits_at_most_a_turn)
{
	struct prism_fq fq = { .vtime = 1ULL << 40, .vmin = 1ULL << 40 };
	struct prism_fq_flow old = { 0 }, f = { 0 };
	u64 turn;

	prism_fq_activate(&fq, &old, 100);
	old.start = fq.vtime - 1000 * prism_vt_delta(QUANTUM, 100);
	f.start = fq.vtime;
	prism_fq_activate_at(&fq, &f, 100, old.start, QUANTUM);
	turn = prism_fq_turn(&f, 100, QUANTUM);
	CHECK_EQ(f.start, fq.vtime - turn);
	/* One behind by less than a turn is followed exactly. */
	prism_fq_deactivate(&fq, &f);
	f.start = fq.vtime;
	prism_fq_activate_at(&fq, &f, 100, fq.vtime - turn / 3, QUANTUM);
	CHECK_EQ(f.start, fq.vtime - turn / 3);
	/* Behind V, the earliest start of the last pick is the reference. */
	prism_fq_deactivate(&fq, &f);
	fq.vmin = fq.vtime - 5 * turn;
	prism_fq_activate_at(&fq, &f, 100, old.start, QUANTUM);
	CHECK_EQ(f.start, fq.vtime - 6 * turn);
	fq.vmin = fq.vtime;
	/* A turn is the quantum, or the next turn's estimate if longer. */
	f.est = 3 * QUANTUM;
	CHECK_EQ(prism_fq_turn(&f, 100, QUANTUM), prism_vt_delta(3 * QUANTUM, 100));
	/* A debt is kept. */
	prism_fq_deactivate(&fq, &f);
	f.start = fq.vtime + turn;
	prism_fq_activate_at(&fq, &f, 100, old.start, QUANTUM);
	CHECK_EQ(f.start, fq.vtime + turn);
}

/*
 * The banking reader of issue 57: a flow (A) that reads one 8 ms request
 * at a time with 20 ms of think time beside a sequential reader (B, of
 * the same weight, always backlogged, turns of 16 ms), returning to its
 * place after each gap, 10,000 times. Its start never trails the
 * earliest start of the last pick by more than a turn. (Not V: V counts
 * A's 8 ms at half the rate of B's turns, so B, backlogged throughout,
 * trails V more every cycle, 2,500 turns after the 10,000.) Then A turns
 * greedy (always backlogged, turns of 16 ms): its credit is a turn
 * behind the earliest start of the last pick, which was B's before its
 * last turn, so B's next turn comes after at most three of A's (the
 * third on a tie of finishes). With A's start kept whole, it fell 2 ms
 * of service further behind B each cycle and, turned greedy, kept B out
 * of the device for thousands of turns.
 */
TEST(returning_flow_lag_is_bounded)
{
	struct prism_fq fq = { 0 };
	struct prism_fq_flow f[2] = { 0 };	/* A, B */
	u64 worst = 0, worst_v = 0, turn;
	int cycle, run, most = 0, picks, id;

	prism_fq_activate(&fq, &f[1], 100);
	prism_fq_activate(&fq, &f[0], 100);
	for (cycle = 0; cycle < 10000; cycle++) {
		u64 think = 0;

		/* A's request goes when A is picked; B's turns meanwhile. */
		for (picks = 0; picks < 100; picks++) {
			id = fq_pick_n(&fq, f, 2, false);
			if (id == 0)
				break;
			prism_fq_charge(&fq, &f[1], QUANTUM);
		}
		CHECK(picks < 100);
		prism_fq_charge(&fq, &f[0], 8000000);
		prism_fq_deactivate(&fq, &f[0]);
		/* A thinks 20 ms: B is served alone. */
		while (think < 20000000) {
			CHECK_EQ(fq_pick_n(&fq, f, 2, false), 1);
			prism_fq_charge(&fq, &f[1], QUANTUM);
			think += QUANTUM;
		}
		prism_fq_return(&fq, &f[0], 100, QUANTUM);
		if (vt_behind(&f[0], fq.vmin) > worst)
			worst = vt_behind(&f[0], fq.vmin);
		if (vt_behind(&f[0], fq.vtime) > worst_v)
			worst_v = vt_behind(&f[0], fq.vtime);
	}
	turn = prism_fq_turn(&f[0], 100, QUANTUM);
	CHECK(worst <= turn);
	/* B, backlogged throughout, trails V further and further. */
	CHECK(vt_behind(&f[1], fq.vtime) > 1000 * turn);
	/* Greedy: A's runs of turns between B's. */
	for (picks = 0, run = 0; picks < 2000; picks++) {
		id = fq_pick_n(&fq, f, 2, false);
		prism_fq_charge(&fq, &f[id], QUANTUM);
		if (id == 0 && ++run > most)
			most = run;
		if (id == 1)
			run = 0;
	}
	CHECK(most <= 3);
}

/*
 * A flow idle long enough for V to move 2^63 past its start: its start
 * compares as 2^63 ahead of V, a debt that would keep it from ever being
 * eligible while another flow is backlogged. Idle longer than the return
 * window (prism_flow_rested()), it restarts at V (prism_fq_rest()) and
 * is served at the next pick or the one after.
 */
TEST(idle_flow_restarts_at_v_past_the_wrap)
{
	struct prism_fq fq = { 0 };
	struct prism_fq_flow f[2] = { 0 };	/* A, B */
	unsigned long last = 1000;
	int picks;

	prism_fq_activate(&fq, &f[0], 100);
	prism_fq_activate(&fq, &f[1], 100);
	prism_fq_charge(&fq, &f[0], 4000000);
	prism_fq_deactivate(&fq, &f[0]);
	/* B served alone for ages: V moves 2^63 and a turn past A. */
	fq.vtime = f[0].start + (1ULL << 63) + prism_vt_delta(QUANTUM, 100);
	fq.vmin = fq.vtime;
	f[1].start = fq.vtime;
	CHECK(prism_vt_before(fq.vtime, f[0].start));	/* looks like a debt */

	/* The return window is 100 ms: 25 jiffies at HZ 250. */
	CHECK(!prism_flow_rested(false, 0, last, last + 24, HZ));
	CHECK(prism_flow_rested(false, 0, last, last + 25, HZ));
	CHECK(!prism_flow_rested(true, 0, last, last + 25, HZ));
	CHECK(!prism_flow_rested(false, 1, last, last + 25, HZ));
	CHECK(prism_flow_rested(false, 0, last, last + 1000 * HZ, HZ));
	prism_fq_rest(&fq, &f[0]);
	prism_fq_activate(&fq, &f[0], 100);
	CHECK_EQ(f[0].start, fq.vtime);
	for (picks = 0; picks < 1000; picks++) {
		if (fq_pick_n(&fq, f, 2, false) == 0)
			break;
		prism_fq_charge(&fq, &f[1], QUANTUM);
	}
	CHECK(picks <= 1);
	/* A backlogged flow's start is not touched. */
	f[1].start = fq.vtime + 5;
	prism_fq_rest(&fq, &f[1]);
	CHECK_EQ(f[1].start, fq.vtime + 5);
}

/*
 * The reason for idling, simulated: three streams on a disk at weights
 * 80, 40 and 10, each keeping @depth requests out (3 ms of service; each
 * issued @think after a completion, as fio's readers do). Without idling
 * a stream that has nothing queued when the disk frees falls out of the
 * fair queue and comes back at its virtual time: flows are served nearly
 * alike. With it, each turn waits out gaps within the window, a stream
 * that returns keeps its place in the fair queue (prism_flow_returning(),
 * prism_fq_return()), and shares follow the weights.
 */
#define STREAMS 3
#define SIM_DEPTH 4

struct stream {
	u32 queued, inflight;
	u64 arrive[SIM_DEPTH];		/* pending arrivals, 0: none */
	u64 dispatched, served;
	struct prism_think th;
};

static void sim_streams(u64 window, u64 think, u32 depth,
			double share[STREAMS])
{
	static const u32 w[STREAMS] = { 80, 40, 10 };
	const u64 service = 3000000;
	struct prism_tunables t = flow_defaults();
	struct prism_fq fq = { 0 };
	struct prism_fq_flow f[STREAMS] = { 0 };
	struct stream st[STREAMS];
	u64 now = 1, busy_until = 0, idle_since = 0, total = 0;
	int busy = -1, idle_for = -1, i, k;
	struct prism_batch b;

	memset(st, 0, sizeof(st));
	prism_batch_reset(&b);
	for (i = 0; i < STREAMS; i++) {
		st[i].queued = depth;
		prism_fq_activate(&fq, &f[i], w[i]);
	}
	while (now < 20000000000ULL) {
		struct prism_tier_view v[PRISM_NR_TIERS];
		struct prism_choice c;
		enum prism_hold hold;
		u64 next = ~0ULL;
		bool go;

		/* Completion, then arrivals due by now. */
		if (busy >= 0 && busy_until <= now) {
			struct stream *s = &st[busy];

			s->inflight--;
			s->th.last_done = busy_until;
			for (k = 0; k < SIM_DEPTH && s->arrive[k]; k++)
				;
			s->arrive[k] = busy_until + think;
			busy = -1;
		}
		for (i = 0; i < STREAMS; i++) {
			struct stream *s = &st[i];

			for (k = 0; k < SIM_DEPTH; k++) {
				if (!s->arrive[k] || s->arrive[k] > now)
					continue;
				s->arrive[k] = 0;
				if (!f[i].backlogged) {
					if (window &&
					    prism_flow_returning(&s->th, s->inflight, now))
						prism_fq_return(&fq, &f[i], w[i], QUANTUM);
					else
						prism_fq_activate(&fq, &f[i], w[i]);
				}
				if (!s->queued && !s->inflight)
					prism_think_sample(&s->th, now);
				s->queued++;
			}
		}
		if (busy < 0) {
			memset(v, 0, sizeof(v));
			for (i = 0; i < STREAMS; i++)
				v[PRISM_NORMAL].dir[PRISM_READ].queued += st[i].queued;
			if (b.tier == PRISM_NORMAL) {
				struct stream *s = &st[b.flow];

				v[PRISM_NORMAL].batch_left = s->queued;
				v[PRISM_NORMAL].flow_waits = !s->queued &&
					prism_flow_expected(&s->th, s->inflight,
							    s->dispatched, now,
							    window);
			}
			go = prism_choose(v, &b, &t, &unlimited, 0, &c, &hold);
			if (go && c.flow < 0) {
				/*
				 * A new turn: the fair queue chooses among the
				 * backlogged flows and the batch's, if expected.
				 */
				struct prism_fq_pick p;

				prism_fq_pick_init(&p);
				for (i = 0; i < STREAMS; i++)
					if (f[i].backlogged ||
					    (i == b.flow && v[PRISM_NORMAL].flow_waits))
						prism_fq_pick_consider(&p, &fq, &f[i], i);
				c.flow = prism_fq_pick_done(&p, &fq);
				if (!st[c.flow].queued) {
					/* Its new turn starts by waiting. */
					prism_batch_wait_turn(&b, PRISM_NORMAL, c.flow);
					hold = PRISM_HOLD_FLOW;
					go = false;
				} else {
					prism_choose_in_flow(&v[PRISM_NORMAL], &b, &t, 0, &c);
				}
			}
			if (go) {
				struct stream *s = &st[c.flow];

				if (idle_for >= 0) {
					prism_fq_charge_idle(&fq, &f[idle_for],
							     now - idle_since);
					idle_for = -1;
				}
				prism_fq_charge(&fq, &f[c.flow], service);
				prism_account(&b, &t, 1U << PRISM_NORMAL, &c, service);
				prism_note_dispatch(&b, &t, true, true, fq.nr > 1);
				if (!--s->queued)
					prism_fq_deactivate(&fq, &f[c.flow]);
				s->inflight++;
				s->dispatched = now;
				s->served += service;
				total += service;
				busy = c.flow;
				busy_until = now + service;
				continue;
			}
			if (hold == PRISM_HOLD_FLOW) {
				struct stream *s = &st[b.flow];

				if (!s->inflight && idle_for < 0) {
					idle_for = b.flow;
					idle_since = now;
				}
				if (!s->inflight)
					next = s->th.last_done + window;
			}
		}
		if (busy >= 0 && busy_until < next)
			next = busy_until;
		for (i = 0; i < STREAMS; i++)
			for (k = 0; k < SIM_DEPTH; k++)
				if (st[i].arrive[k] > now && st[i].arrive[k] < next)
					next = st[i].arrive[k];
		now = next;
	}
	for (i = 0; i < STREAMS; i++)
		share[i] = (double)st[i].served / (double)total;
}

static bool near_weights(const double share[STREAMS], double tolerance)
{
	static const double ideal[STREAMS] = { 80.0 / 130, 40.0 / 130, 10.0 / 130 };
	int i;

	for (i = 0; i < STREAMS; i++)
		if (share[i] < ideal[i] * (1 - tolerance) ||
		    share[i] > ideal[i] * (1 + tolerance))
			return false;
	return true;
}

TEST(idling_keeps_weights_for_streams)
{
	double with[STREAMS], without[STREAMS];

	/* One request at a time, a 1 ms think: the turn waits it out. */
	sim_streams(8000000, 1000000, 1, with);
	sim_streams(0, 1000000, 1, without);
	CHECK(near_weights(with, 0.05));
	/* Without: the heavy flow far below its part, the light one above. */
	CHECK(without[0] < 0.75 * 80.0 / 130.0);
	CHECK(without[2] > 1.3 * 10.0 / 130.0);
	/*
	 * Two requests out and a think time past the window (10 ms, as fio's
	 * under TCG): gaps are not waited out, but each stream returns to its
	 * place in the fair queue, so weights still hold.
	 */
	sim_streams(8000000, 10000000, 2, with);
	sim_streams(0, 10000000, 2, without);
	CHECK(near_weights(with, 0.1));
	CHECK(!near_weights(without, 0.3));
}

/*
 * The mechanism's shortcut: with requests queued in one tier alone and no
 * tier above it active, prism_choose_alone() gives prism_choose()'s answer,
 * in the choice and in the batch state it leaves, over random states of
 * that tier, of the tiers below (in flight) and of the device: the open
 * batch going on, or a new turn; and it declines whenever the batch's
 * flow may be waited for and the batch cannot go on.
 */
TEST(choose_alone_matches_choose)
{
	unsigned int seed = 12345, batches = 0, turns = 0, i;

	for (i = 0; i < 40000; i++) {
		struct prism_tunables t = flow_defaults();
		struct prism_tier_view v[PRISM_NR_TIERS];
		struct prism_flight f;
		struct prism_batch b1, b2;
		struct prism_choice c1, c2;
		enum prism_hold hold;
		int tier, d, lower;
		bool full, fast, may_wait;

		memset(v, 0, sizeof(v));
		prism_batch_reset(&b1);
		t.fifo_batch = 1 + rand_r(&seed) % 8;
		t.quantum = 1000 + rand_r(&seed) % 4000;
		tier = rand_r(&seed) % PRISM_NR_TIERS;
		b1.tier = rand_r(&seed) % 4 ? tier :
			  (int)(rand_r(&seed) % (PRISM_NR_TIERS + 1)) - 1;
		b1.flow = rand_r(&seed) % 5 ? (int)(rand_r(&seed) % 4) : -1;
		b1.dir = rand_r(&seed) % PRISM_NR_FIFOS;
		b1.count = rand_r(&seed) % (t.fifo_batch + 2);
		b1.cost = rand_r(&seed) % 6000;
		b1.starved = rand_r(&seed) % 3;
		for (d = 0; d < PRISM_NR_FIFOS; d++) {
			v[tier].dir[d].queued = rand_r(&seed) % 3;
			v[tier].dir[d].oldest = rand_r(&seed) % 1000;
			v[tier].dir[d].flow = rand_r(&seed) % 4;
		}
		if (!v[tier].dir[PRISM_READ].queued &&
		    !v[tier].dir[PRISM_WRITE].queued &&
		    !v[tier].dir[PRISM_SYNC_WRITE].queued)
			v[tier].dir[rand_r(&seed) % PRISM_NR_FIFOS].queued = 1;
		v[tier].inflight = rand_r(&seed) % 3;
		v[tier].anticipated = rand_r(&seed) % 2;
		v[tier].flushing = rand_r(&seed) % 2;
		v[tier].flow_waits = rand_r(&seed) % 2;
		if (b1.tier == tier && v[tier].dir[b1.dir].queued)
			v[tier].batch_left = rand_r(&seed) %
					     (v[tier].dir[b1.dir].queued + 1);
		for (lower = tier + 1; lower < PRISM_NR_TIERS; lower++)
			v[lower].inflight = rand_r(&seed) % 3;
		full = rand_r(&seed) % 2;
		f.depth = 4;
		f.lower_limit = 1 + rand_r(&seed) % 4;
		f.foreign = full ? 4 : 0;
		f.lower_duty = PRISM_DUTY_FULL;
		/* The mechanism says "may wait" whenever flows are idled for. */
		may_wait = v[tier].flow_waits || rand_r(&seed) % 2;
		b2 = b1;

		fast = prism_choose_alone(&b2, &t, tier, v[tier].batch_left,
					  may_wait, &c2);
		full = prism_choose(v, &b1, &t, &f, rand_r(&seed) % 5000, &c1,
				    &hold);
		if (!fast) {
			CHECK(may_wait);
			continue;
		}
		if (c2.batch)
			batches++;
		else
			turns++;
		CHECK(full);
		CHECK_EQ(c1.batch, c2.batch);
		CHECK_EQ(c1.tier, c2.tier);
		CHECK_EQ(c1.flow, c2.flow);
		CHECK_EQ(c1.aged, c2.aged);
		CHECK_EQ(c1.shared, c2.shared);
		CHECK_EQ(c1.expired, c2.expired);
		if (c2.batch) {
			CHECK_EQ(c1.dir, c2.dir);
			CHECK_EQ(c1.take, c2.take);
		}
		CHECK(!memcmp(&b1, &b2, sizeof(b1)));
	}
	/* Both answers were given often enough for this to mean something. */
	CHECK(batches > 1000);
	CHECK(turns > 1000);
}

/*
 * The direct lane changes what is booked, not what is dispatched: over
 * random states of the device, the tiers and the in-flight control,
 * whenever prism_lane_allows() lets a request of a tier through, the full
 * choice over the same state (that tier alone queued, the others as they
 * are) dispatches from that tier at once, holds nothing. And every
 * condition closes the lane on its own.
 */
TEST(direct_lane_only_where_the_choice_would_dispatch)
{
	unsigned int seed = 777, allowed = 0, refused = 0, i;

	for (i = 0; i < 40000; i++) {
		struct prism_tunables t = flow_defaults();
		struct prism_tier_view v[PRISM_NR_TIERS];
		struct prism_flight f;
		struct prism_batch b;
		struct prism_choice c;
		enum prism_hold hold;
		int tier = rand_r(&seed) % PRISM_NR_TIERS, other, d;
		u32 depth = 1 + rand_r(&seed) % 64;
		u32 limit = rand_r(&seed) % 2 ? depth : 1 + rand_r(&seed) % depth;
		u32 duty = rand_r(&seed) % 4 ? PRISM_DUTY_FULL :
			   1 + rand_r(&seed) % PRISM_DUTY_FULL;
		bool sorted = !(rand_r(&seed) % 4);
		bool differ = !(rand_r(&seed) % 4);
		u64 window = rand_r(&seed) % 4 ? 0 : 8000000;
		u32 queued = 1 + rand_r(&seed) % 8;
		u32 inflight = rand_r(&seed) % 70;
		bool capped = !(rand_r(&seed) % 4);
		bool quiet = true, lane_off;

		memset(v, 0, sizeof(v));
		memset(&f, 0, sizeof(f));
		prism_batch_reset(&b);
		d = rand_r(&seed) % PRISM_NR_FIFOS;
		v[tier].dir[d].queued = queued;
		v[tier].dir[d].oldest = rand_r(&seed) % 1000;
		v[tier].inflight = inflight;
		for (other = 0; other < PRISM_NR_TIERS; other++) {
			if (other == tier || rand_r(&seed) % 2)
				continue;
			v[other].inflight = rand_r(&seed) % 3;
			v[other].anticipated = rand_r(&seed) % 2;
			v[other].flushing = rand_r(&seed) % 2;
			v[other].chained = rand_r(&seed) % 2;
			if (other < tier &&
			    (v[other].inflight || v[other].anticipated ||
			     v[other].flushing || v[other].chained))
				quiet = false;
		}
		f.depth = depth;
		f.lower_limit = limit;
		f.lower_duty = duty;
		lane_off = prism_lane_off(sorted, window, differ, limit, duty,
					  depth, capped);
		if (!prism_lane_allows(lane_off, queued - 1, queued - 1,
				       tier, tier, quiet, queued + inflight,
				       depth)) {
			refused++;
			continue;
		}
		allowed++;
		CHECK(prism_choose(v, &b, &t, &f, rand_r(&seed) % 5000, &c,
				   &hold));
		CHECK_EQ(c.tier, tier);
	}
	CHECK(allowed > 1000);
	CHECK(refused > 1000);

	/* Each condition on its own. */
	CHECK(!prism_lane_off(false, 0, false, 8, PRISM_DUTY_FULL, 8, false));
	CHECK(prism_lane_off(true, 0, false, 8, PRISM_DUTY_FULL, 8, false));
	CHECK(prism_lane_off(false, 1, false, 8, PRISM_DUTY_FULL, 8, false));
	CHECK(prism_lane_off(false, 0, true, 8, PRISM_DUTY_FULL, 8, false));
	CHECK(prism_lane_off(false, 0, false, 7, PRISM_DUTY_FULL, 8, false));
	CHECK(prism_lane_off(false, 0, false, 8, PRISM_DUTY_FULL - 1, 8,
			     false));
	CHECK(prism_lane_off(false, 0, false, 8, PRISM_DUTY_FULL, 8, true));
	CHECK(prism_lane_allows(false, 2, 2, 1, 1, true, 3, 8));
	CHECK(prism_lane_allows(false, 0, 0, 0, 1, true, 1, 8));
	CHECK(!prism_lane_allows(true, 2, 2, 1, 1, true, 3, 8));
	CHECK(!prism_lane_allows(false, 3, 2, 1, 1, true, 3, 8));
	CHECK(!prism_lane_allows(false, 2, 2, 0, 1, true, 3, 8));
	CHECK(!prism_lane_allows(false, 2, 2, 1, 1, false, 3, 8));
	CHECK(!prism_lane_allows(false, 2, 2, 1, 1, true, 9, 8));
}

TEST(latency_buckets_are_log_scaled_and_cover_every_time)
{
	u32 b;
	u64 ns;

	CHECK_EQ(prism_hist_bucket(0), 0);
	CHECK_EQ(prism_hist_bucket(1023), 0);
	CHECK_EQ(prism_hist_bucket(1024), 1);
	CHECK_EQ(prism_hist_bucket(1535), 1);
	CHECK_EQ(prism_hist_bucket(1536), 2);
	CHECK_EQ(prism_hist_bucket(2048), 3);
	CHECK_EQ(prism_hist_bucket(3072), 4);
	CHECK_EQ(prism_hist_bucket(~0ULL), PRISM_HIST_BUCKETS - 1);
	/* Every bound falls in its own bucket, the ns before it in the last. */
	for (b = 1; b < PRISM_HIST_BUCKETS; b++) {
		CHECK_EQ(prism_hist_bucket(prism_hist_lower(b)), b);
		CHECK_EQ(prism_hist_bucket(prism_hist_lower(b) - 1), b - 1);
		CHECK(prism_hist_lower(b) > prism_hist_lower(b - 1));
		/* No bucket spans more than 1.5x its lower bound. */
		if (b > 1 && b < PRISM_HIST_BUCKETS - 1)
			CHECK(2 * prism_hist_lower(b + 1) <=
			      3 * prism_hist_lower(b));
	}
	/* 1 ms and 1 s land where their bounds say. */
	for (ns = 1000; ns < 10000000000ULL; ns *= 10) {
		b = prism_hist_bucket(ns);
		CHECK(prism_hist_lower(b) <= ns);
		CHECK(b == PRISM_HIST_BUCKETS - 1 ||
		      ns < prism_hist_lower(b + 1));
	}
	CHECK(prism_hist_lower(PRISM_HIST_BUCKETS - 1) > 8000000000ULL);
}

TEST(fq_asymmetry_is_exact)
{
	static const u32 mean_like[] = { 80, 60, 40 };
	struct prism_fq fq = { 0 };
	struct prism_fq_flow f[4] = { 0 };
	int i;

	CHECK(!prism_fq_asymmetric(&fq));
	for (i = 0; i < 3; i++)
		prism_fq_activate(&fq, &f[i], 60);
	CHECK(!prism_fq_asymmetric(&fq));
	prism_fq_deactivate(&fq, &f[0]);
	prism_fq_deactivate(&fq, &f[1]);
	prism_fq_deactivate(&fq, &f[2]);
	/* 80, 60, 40: their mean is one of them, still told apart. */
	for (i = 0; i < 3; i++)
		prism_fq_activate(&fq, &f[i], mean_like[i]);
	CHECK(prism_fq_asymmetric(&fq));
	/* The odd ones leave: equal again, and the sums come back whole. */
	prism_fq_deactivate(&fq, &f[0]);
	prism_fq_deactivate(&fq, &f[2]);
	CHECK(!prism_fq_asymmetric(&fq));
	prism_fq_deactivate(&fq, &f[1]);
	CHECK_EQ(fq.nr, 0);
	CHECK_EQ(fq.wsum, 0);
	CHECK_EQ(fq.w2sum, 0);
}

/* A raise ends once the flow has been served its sectors, or with time. */
TEST(raise_ends_after_its_sectors_or_its_time)
{
	struct prism_raise r = { 0 };
	unsigned long now = 1000;
	unsigned long end = now + PRISM_RAISE_MS * HZ / 1000;

	CHECK(!prism_raise_on(&r, now));
	CHECK(!prism_raise_served(&r, 8, now));
	prism_raise_begin(&r, now, HZ);
	CHECK(prism_raise_on(&r, now));
	CHECK(!prism_raise_served(&r, PRISM_RAISE_SECTORS - 1, now));
	CHECK(prism_raise_on(&r, now));
	CHECK(prism_raise_served(&r, 1, now));
	CHECK(!prism_raise_on(&r, now));

	prism_raise_begin(&r, now, HZ);
	CHECK(!prism_raise_served(&r, 8, end - 1));
	CHECK(prism_raise_served(&r, 8, end));
	CHECK(!prism_raise_on(&r, end));

	/* Time ends it at the next look too, across jiffies' wrap. */
	now = (unsigned long)-5;
	prism_raise_begin(&r, now, HZ);
	CHECK(prism_raise_on(&r, now + 10));
	CHECK(!prism_raise_on(&r, now + PRISM_RAISE_MS * HZ / 1000));
}

/*
 * Flow starts each within PRISM_BURST_MS of the one before make a burst:
 * the first PRISM_BURST_MIN - 1 are raised and remembered; the start that
 * makes the burst large is not, and says so once (-1), so that the
 * mechanism ends the others' raises; later ones are not raised, until a
 * start comes after a longer gap.
 */
TEST(burst_of_flow_starts_is_not_raised)
{
	unsigned long gap = PRISM_BURST_MS * HZ / 1000, now = 5000;
	struct prism_burst b = { 0 };
	int i;

	for (i = 1; i < PRISM_BURST_MIN; i++, now += gap)
		CHECK_EQ(prism_burst_start(&b, now, HZ, 100 + i), 1);
	for (i = 0; i < PRISM_BURST_MIN - 1; i++)
		CHECK_EQ(b.member[i], 101 + i);
	CHECK_EQ(prism_burst_start(&b, now, HZ, 7), -1);
	for (i = 0; i < 100; i++) {
		now += gap;
		CHECK_EQ(prism_burst_start(&b, now, HZ, 7), 0);
	}
	CHECK(b.n == PRISM_BURST_MIN);
	CHECK_EQ(prism_burst_start(&b, now + gap + 1, HZ, 9), 1);
	CHECK(b.n == 1);
	CHECK_EQ(b.member[0], 9);
	/* Starts spread wider than the gap never make one. */
	now += gap + 1;
	for (i = 0; i < 100; i++) {
		now += gap + 1;
		CHECK_EQ(prism_burst_start(&b, now, HZ, i), 1);
	}
}

/*
 * bfq's comm_startup_lat in the fair queue: a flow issuing 256 dependent
 * small reads, one at a time and back at once (idling covers the gap),
 * beside three greedy flows of the same weight. Unraised it gets its
 * quarter of the device time, so it takes about four times its own;
 * raised, about its own.
 */
static u64 startup_time_charged(bool raised, bool seq_charge)
{
	static const u32 w[4] = { 100, 100, 100, 100 };
	const u64 small = 8000000, large = 10000000;
	u32 weight = raised ? 100 * PRISM_RAISE_COEFF : 100;
	struct sim s;
	u64 time = 0;
	int done = 0;

	sim_init(&s, 4, w);
	prism_fq_deactivate(&s.fq, &s.f[3]);
	prism_fq_activate(&s.fq, &s.f[3], weight);
	while (done < 256) {
		int id = sim_pick(&s);

		prism_fq_charge(&s.fq, &s.f[id], id != 3 ? large :
				seq_charge ? prism_raise_charge(small, 250000,
								raised) :
				small);
		time += id == 3 ? small : large;
		if (id == 3) {
			done++;
			prism_fq_deactivate(&s.fq, &s.f[3]);
			prism_fq_return(&s.fq, &s.f[3], weight, QUANTUM);
		}
	}
	return time;
}

static u64 startup_time(bool raised)
{
	return startup_time_charged(raised, false);
}

TEST(raised_flow_starts_up_beside_greedy_ones)
{
	u64 alone = 256 * 8000000ULL;

	CHECK(startup_time(false) >= 3 * alone);
	CHECK(startup_time(true) <= alone + alone / 4);
}

/*
 * Raised, charged no more than its bytes in sequence (0.25 ms for the
 * 8 ms random read), as bfq charges a raised queue in sectors: the
 * greedy flows beside it are owed next to nothing of its start-up, where
 * the full charge left them a tenth of it. Not raised, the full cost.
 */
TEST(raised_flow_is_charged_as_in_sequence)
{
	u64 alone = 256 * 8000000ULL;

	CHECK_EQ(prism_raise_charge(6670000, 230000, true), 230000);
	CHECK_EQ(prism_raise_charge(6670000, 230000, false), 6670000);
	CHECK_EQ(prism_raise_charge(200000, 230000, true), 200000);
	CHECK(startup_time_charged(true, false) > alone + alone / 16);
	CHECK(startup_time_charged(true, true) <= alone + alone / 50);
	CHECK(startup_time_charged(false, true) >= 3 * alone);
}
