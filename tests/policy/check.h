/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The userspace policy tests' harness: CHECK macros, a test registry
 * shared by every file of tests/policy/, and a stand-in for the
 * mechanism's dispatch steps around prism_choose().
 */
#ifndef _PRISM_POLICY_CHECK_H
#define _PRISM_POLICY_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prism_policy.h"

#define HZ 250

extern int failures;

#define CHECK(cond) do {						\
	if (!(cond)) {							\
		fprintf(stderr, "%s:%d: CHECK failed: %s\n",		\
			__FILE__, __LINE__, #cond);			\
		failures++;						\
	}								\
} while (0)

#define CHECK_EQ(a, b) do {						\
	long long _a = (long long)(a), _b = (long long)(b);		\
	if (_a != _b) {							\
		fprintf(stderr, "%s:%d: %s == %lld, expected %s == %lld\n", \
			__FILE__, __LINE__, #a, _a, #b, _b);		\
		failures++;						\
	}								\
} while (0)

struct test {
	const char *name;
	void (*fn)(void);
};

void register_test(const char *name, void (*fn)(void));

#define TEST(tname)							\
	static void test_##tname(void);					\
	__attribute__((constructor)) static void reg_##tname(void)	\
	{								\
		register_test(#tname, test_##tname);			\
	}								\
	static void test_##tname(void)

/* A device with room for everything: no in-flight limit ever applies. */
static const struct prism_flight unlimited = {
	.depth = 1U << 30, .lower_limit = 1U << 30, .lower_duty = PRISM_DUTY_FULL
};

/*
 * The mechanism's dispatch decision with one flow per tier (flow id =
 * tier, its lists the tier's): tell prism_choose() what the batch's flow
 * has left, let it choose, pick the flow and its list where it asks, and
 * book the dispatch at @cost. What prism_sched.c does around it, minus
 * the lists.
 */
static inline bool mech_choose_cost(struct prism_tier_view v[PRISM_NR_TIERS],
				    struct prism_batch *b,
				    const struct prism_tunables *t,
				    const struct prism_flight *f,
				    unsigned long now, struct prism_choice *c,
				    enum prism_hold *hold, u64 cost)
{
	u32 queued = 0;
	int tier, d;

	for (tier = 0; tier < PRISM_NR_TIERS; tier++) {
		v[tier].batch_left = 0;
		for (d = 0; d < PRISM_NR_FIFOS; d++) {
			v[tier].dir[d].flow = tier;
			if (v[tier].dir[d].queued)
				queued |= 1U << tier;
		}
	}
	if (b->tier >= 0)
		v[b->tier].batch_left = v[b->tier].dir[b->dir].queued;
	if (!prism_choose(v, b, t, f, now, c, hold))
		return false;
	if (c->flow < 0) {
		c->flow = c->tier;
		prism_choose_in_flow(&v[c->tier], b, t, now, c);
	}
	prism_account(b, t, queued, c, cost);
	return true;
}

static inline bool mech_choose(struct prism_tier_view v[PRISM_NR_TIERS],
			       struct prism_batch *b,
			       const struct prism_tunables *t,
			       const struct prism_flight *f, unsigned long now,
			       struct prism_choice *c, enum prism_hold *hold)
{
	return mech_choose_cost(v, b, t, f, now, c, hold, 1);
}

#endif /* _PRISM_POLICY_CHECK_H */
