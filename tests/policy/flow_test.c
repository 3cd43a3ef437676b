// SPDX-License-Identifier: GPL-2.0
/*
 * Userspace tests of prism's flows: weights, the cost model and its
 * learner, WF2Q+ fair queuing inside a tier (shares, the delay bound,
 * light flows), shares between tiers counted in cost, and the per-flow
 * tag limit.
 */
#include "check.h"

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
		CHECK_EQ(prism_weight(PRISM_CLASS_BE, level), (8 - level) * 10);
	CHECK_EQ(prism_weight(PRISM_CLASS_RT, 0), 160);
	CHECK_EQ(prism_weight(PRISM_CLASS_RT, 7), 20);
	CHECK_EQ(prism_weight(PRISM_CLASS_IDLE, 0), 10);
	CHECK_EQ(prism_weight(PRISM_CLASS_NONE, 0), 40);
	/* A level out of range is clamped, never a zero or huge weight. */
	CHECK_EQ(prism_weight(PRISM_CLASS_BE, 9), 10);
	CHECK(prism_weight(PRISM_CLASS_RT, 0) <= PRISM_WEIGHT_MAX);
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
	u64 total = 0;
	int i, step;

	for (i = 0; i < SIM_FLOWS; i++)
		w[i] = prism_weight(PRISM_CLASS_BE, i);
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
		double ideal = (double)w[i] / 360.0 * (double)total;

		CHECK((double)s.served[i] > ideal * 0.98 &&
		      (double)s.served[i] < ideal * 1.02);
	}
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
 * Idle time held for a tier's next link counts as that tier's: the
 * waiting tiers below earn their share of it, so a bulk tier beside a
 * chain of small dependent requests still earns dispatches.
 */
TEST(idle_hold_time_earns_lower_shares)
{
	struct prism_tunables t = flow_defaults();
	struct prism_batch b;
	u32 queued = (1U << PRISM_NORMAL) | (1U << PRISM_LOW);

	prism_batch_reset(&b);
	prism_account_idle(&b, &t, queued, PRISM_NORMAL, 5000000);
	CHECK_EQ(b.credit[PRISM_LOW], 10LL * 5000000);
	CHECK_EQ(b.credit[PRISM_NORMAL], 0);	/* not below itself */
	/* Held for HIGH: NORMAL, queued, earns; LOW, not queued, does not. */
	prism_account_idle(&b, &t, 1U << PRISM_NORMAL, PRISM_HIGH, 5000000);
	CHECK_EQ(b.credit[PRISM_LOW], 10LL * 5000000);
	CHECK_EQ(b.credit[PRISM_NORMAL], 25LL * 5000000);
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

		prism_bucket_fill(&bk, rate, now);
		CHECK_EQ(bk.tokens, (s64)(rate / 10));
		while (now < end) {
			prism_bucket_fill(&bk, rate, now);
			if (!prism_bucket_ready(&bk)) {
				u64 wait = prism_bucket_wait(&bk, rate, now);

				CHECK(wait > 0);
				now += wait;
				prism_bucket_fill(&bk, rate, now);
				if (!prism_bucket_ready(&bk)) {
					CHECK(prism_bucket_ready(&bk));
					break;
				}
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

/* Idle for a minute, the bucket holds its burst and no more. */
TEST(bucket_banks_only_its_burst)
{
	struct prism_bucket bk = { };
	u64 rate = prism_bucket_rate(1024, 100000000ULL);

	prism_bucket_fill(&bk, rate, 1000);
	prism_bucket_charge(&bk, (u64)bk.tokens + 5000000);
	CHECK(!prism_bucket_ready(&bk));
	prism_bucket_fill(&bk, rate, 1000 + 60000000000ULL);
	CHECK_EQ(bk.tokens, (s64)(rate / 10));
	CHECK_EQ(prism_bucket_wait(&bk, rate, 2000), 0);
	/* The cap is bounded: a huge rate on a slow device does not wrap. */
	CHECK_EQ(prism_bucket_rate(0x7fffffff, 1), PRISM_BUCKET_RATE_MAX);
}
