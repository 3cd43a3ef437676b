/* SPDX-License-Identifier: GPL-2.0 */
/*
 * prism's fair queuing inside a tier (WF2Q+ in estimated device time) and
 * weight raising: which flow of a tier goes next, and how much each
 * weighs. Pure policy like the rest of prism_policy.h, which includes
 * this file after the types and time helpers it uses; the mechanism
 * (prism_flow.c) keeps the flows on their lists.
 */
#ifndef _PRISM_WF2Q_H
#define _PRISM_WF2Q_H

/*
 * Fair queuing inside a tier. Virtual times are service divided by
 * weight, in ns x PRISM_VT_SCALE / weight units; they wrap, and are
 * compared with prism_vt_before().
 */
#define PRISM_VT_SCALE		PRISM_FQ_WEIGHT_MAX

struct prism_fq {
	u64 vtime;		/* the tier's virtual time V */
	/*
	 * The earliest start the last pick saw (prism_fq_pick_done()), never
	 * moving back: what a start kept or inherited is bounded against
	 * (prism_fq_floor()).
	 */
	u64 vmin;
	u32 wsum;		/* weights of its backlogged flows */
	u32 nr;			/* backlogged flows */
	u64 w2sum;		/* their weights' squares (prism_fq_asymmetric()) */
};

struct prism_fq_flow {
	u64 start;		/* virtual time its next turn starts at (S) */
	u64 est;		/* cost estimate of its next turn, ns */
	u32 weight;
	bool backlogged;
};

static inline bool prism_vt_before(u64 a, u64 b)
{
	return (s64)(a - b) < 0;
}

static inline u64 prism_vt_delta(u64 cost, u32 weight)
{
	return cost * PRISM_VT_SCALE / (weight ? weight : 1);
}

/* Its virtual finish time: when its next turn would end. */
static inline u64 prism_fq_finish(const struct prism_fq_flow *f)
{
	return f->start + prism_vt_delta(f->est, f->weight);
}

/*
 * One turn of a flow at @weight in virtual time: the cost estimate of
 * its next turn or the quantum, whichever is larger: the credit a flow
 * keeps when it returns, or a newcomer inherits (prism_fq_floor()).
 */
static inline u64 prism_fq_turn(const struct prism_fq_flow *f, u32 weight,
				u64 quantum)
{
	return prism_vt_delta(f->est > quantum ? f->est : quantum, weight);
}

/*
 * The earliest start a flow at @weight may keep or inherit: one turn
 * behind the earliest start of the last pick (fq->vmin), or behind V if
 * that is earlier. Not V itself: V moves by the weights of the flows
 * backlogged, without those of flows that come and go, so flows that
 * return to their places all fall behind it together, while keeping
 * their order; held to a turn behind V they are served in turn, whatever
 * their weights (three streams at 80, 40 and 10 were served 57%, 34% and
 * 9%, against 62%, 31% and 8%).
 */
static inline u64 prism_fq_floor(const struct prism_fq *fq,
				 const struct prism_fq_flow *f, u32 weight,
				 u64 quantum)
{
	u64 ref = prism_vt_before(fq->vmin, fq->vtime) ? fq->vmin : fq->vtime;

	return ref - prism_fq_turn(f, weight, quantum);
}

static inline void __prism_fq_enqueue(struct prism_fq *fq,
				      struct prism_fq_flow *f, u32 weight)
{
	f->weight = weight;
	f->backlogged = true;
	fq->wsum += f->weight;
	fq->w2sum += (u64)f->weight * f->weight;
	fq->nr++;
}

/*
 * A flow comes back while it was expected (prism_flow_expected(): a
 * request of it still in the device, or within the window after its
 * last completion): it keeps its start, any debt and at most one turn of
 * credit (prism_fq_floor()). A stream issuing one request at a time is
 * never backlogged when the device frees, and were it restarted at the
 * tier's virtual time at each return, it would forfeit its weight: flows
 * of every weight would be served alike. Were its start kept whole,
 * every gap in which the others were served more than it would add to
 * its credit: a reader with 20 ms of think time beside a sequential
 * reader banked credit for two minutes, then, turned greedy, kept the
 * other out of the device for 4 s.
 * @quantum: the tunable, ns.
 */
static inline void prism_fq_return(struct prism_fq *fq,
				   struct prism_fq_flow *f, u32 weight,
				   u64 quantum)
{
	u64 floor;

	if (f->backlogged)
		return;
	weight = weight ? weight : 1;
	floor = prism_fq_floor(fq, f, weight, quantum);
	if (prism_vt_before(f->start, floor))
		f->start = floor;
	__prism_fq_enqueue(fq, f, weight);
}

/*
 * A flow becomes backlogged: it starts where it left off, or at the
 * tier's virtual time if that is later, so an idle flow banks nothing
 * and a flow that used more than its share keeps its debt. A flow that
 * starts (new, or back after PRISM_RAISE_IDLE_MS) starts no later than
 * the flows already backlogged (@earliest, the earliest start among
 * them; fq->vtime or later if none is earlier), but no further behind
 * than a returning flow may be (prism_fq_floor()): a newcomer beside
 * flows that return to their places competes with them from the start,
 * and inherits no more credit than they may keep. Three buffered readers
 * on the emulated HDD, each backlogged a third of the time, were 17
 * requests each behind V after a few seconds, and an application
 * starting beside them at V, at 30 times their weight, waited 0.5-0.9 s
 * for its first read while they spent that credit. Only
 * a start: a flow that comes and goes would take the laggard's place at
 * each activation (on flash, where none returns; with the rule at every
 * activation, groups included, two cgroups of equal weight were once
 * served 1.22 to 1 there). A flow idle longer than the return window
 * has its debt forgotten first (prism_fq_rest()).
 */
static inline void prism_fq_activate_at(struct prism_fq *fq,
					struct prism_fq_flow *f, u32 weight,
					u64 earliest, u64 quantum)
{
	u64 v = fq->vtime, floor;

	if (f->backlogged)
		return;
	weight = weight ? weight : 1;
	if (prism_vt_before(earliest, v)) {
		floor = prism_fq_floor(fq, f, weight, quantum);
		v = prism_vt_before(earliest, floor) ? floor : earliest;
	}
	if (!fq->nr || !prism_vt_before(fq->vtime, f->start))
		f->start = v;
	__prism_fq_enqueue(fq, f, weight);
}

/* prism_fq_activate_at() with no flow backlogged before the virtual time. */
static inline void prism_fq_activate(struct prism_fq *fq,
				     struct prism_fq_flow *f, u32 weight)
{
	prism_fq_activate_at(fq, f, weight, fq->vtime, 0);
}

/*
 * A flow (or group) not backlogged has been idle longer than the return
 * window (prism_flow_rested()): whatever it owed is forgotten, and it
 * becomes backlogged at the virtual time like any flow that owes
 * nothing. A slot idle long enough for V to move 2^63 past its start
 * (hours to weeks on a quiet machine, for a long-lived daemon's flow)
 * would otherwise compare as 2^63 ahead: a debt that keeps it from ever
 * being eligible while another flow is backlogged.
 */
static inline void prism_fq_rest(struct prism_fq *fq, struct prism_fq_flow *f)
{
	if (!f->backlogged)
		f->start = fq->vtime;
}

static inline void prism_fq_deactivate(struct prism_fq *fq,
				       struct prism_fq_flow *f)
{
	if (!f->backlogged)
		return;
	f->backlogged = false;
	fq->wsum -= f->weight;
	fq->w2sum -= (u64)f->weight * f->weight;
	fq->nr--;
}

/*
 * A backlogged flow's weight changes (a cgroup's io.prism.weight was
 * written): the sums follow at once; its place in the queue stays.
 */
static inline void prism_fq_reweight(struct prism_fq *fq,
				     struct prism_fq_flow *f, u32 weight)
{
	weight = weight ? weight : 1;
	if (f->backlogged) {
		fq->wsum += weight - f->weight;
		fq->w2sum += (u64)weight * weight;
		fq->w2sum -= (u64)f->weight * f->weight;
	}
	f->weight = weight;
}

/*
 * Whether the backlogged flows weigh unequally. Exact, from two running
 * sums: n x sum(w^2) = (sum w)^2 only when every w is the same
 * (Cauchy-Schwarz), so three flows at 80, 60 and 40 are told apart from
 * three at 60, which a test against the mean would not.
 */
static inline bool prism_fq_asymmetric(const struct prism_fq *fq)
{
	return (u64)fq->nr * fq->w2sum != (u64)fq->wsum * fq->wsum;
}

/*
 * Charge @cost of device time to a flow: its start moves by cost over its
 * weight, the tier's virtual time by cost over the weights of all
 * backlogged flows (the fluid system's progress); its next turn is
 * expected to cost as much as this request.
 */
static inline void prism_fq_charge(struct prism_fq *fq,
				   struct prism_fq_flow *f, u64 cost)
{
	u64 delta = prism_vt_delta(cost, f->weight);

	f->start += delta;
	f->est = cost;
	/* Alone (or all its weight): the same delta, without a division. */
	fq->vtime += !fq->wsum || fq->wsum == f->weight ?
		     delta : prism_vt_delta(cost, fq->wsum);
}

/*
 * Weight raising (bfq's low_latency): a flow that starts, or comes back
 * after PRISM_RAISE_IDLE_MS without a request, weighs PRISM_RAISE_COEFF
 * times its weight until it has been served PRISM_RAISE_SECTORS or
 * PRISM_RAISE_MS has passed. An application starting beside greedy
 * flows of its tier (a chain of small dependent reads) then gets each
 * read through at once rather than after a 1/N share of the disk; a
 * flow that turns out greedy loses the raise after a few seconds. Flows
 * that start in a burst (PRISM_BURST_MIN or more, each within
 * PRISM_BURST_MS of the one before: a make -j, a fio with many jobs) are
 * throughput work and are not raised, as in bfq's large-burst rule.
 * bfq's constants: coefficient 30, 2 s of idleness, 180 ms and 8 for a
 * burst; the duration is bfq's order of magnitude (it scales it by the
 * device's rate).
 */
#define PRISM_RAISE_COEFF	30
#define PRISM_RAISE_MS		4000
#define PRISM_RAISE_IDLE_MS	2000
#define PRISM_RAISE_SECTORS	120000
#define PRISM_BURST_MS		180
#define PRISM_BURST_MIN		8

struct prism_raise {
	unsigned long until;	/* jiffies at which the raise ends */
	u32 left;		/* sectors it may still be served; 0: not raised */
};

struct prism_burst {
	unsigned long last;	/* jiffies of the last flow start */
	u32 n;			/* starts in the burst so far, saturating */
	u16 member[PRISM_BURST_MIN - 1];	/* the first starts' flows */
};

/*
 * Flow @id starts at @now (@hz a second): 1 if it may be raised, 0 if
 * not, -1 if not and the burst it is in just grew large, so the flows
 * that started it (member[], raised as they came) lose their raise too,
 * as bfq ends the raising of a large burst's queues.
 */
static inline int prism_burst_start(struct prism_burst *b, unsigned long now,
				    unsigned int hz, u16 id)
{
	unsigned long gap = (unsigned long)PRISM_BURST_MS * hz / 1000;
	u32 was = b->n;

	if (b->n && !prism_time_after_eq(now, b->last + gap + 1))
		b->n += b->n < PRISM_BURST_MIN;
	else
		b->n = 1;
	b->last = now;
	if (b->n < PRISM_BURST_MIN) {
		b->member[b->n - 1] = id;
		return 1;
	}
	return b->n > was ? -1 : 0;
}

static inline void prism_raise_begin(struct prism_raise *r, unsigned long now,
				     unsigned int hz)
{
	r->until = now + (unsigned long)PRISM_RAISE_MS * hz / 1000;
	r->left = PRISM_RAISE_SECTORS;
}

/* Whether the flow is raised at @now; a raise that ran out ends. */
static inline bool prism_raise_on(struct prism_raise *r, unsigned long now)
{
	if (r->left && prism_time_after_eq(now, r->until))
		r->left = 0;
	return r->left;
}

/*
 * What a request of a flow, @raised or not, adds to its virtual time:
 * its @cost, but for a raised flow no more than the same bytes in
 * sequence (@seq_cost). bfq charges a raised queue in sectors, not time,
 * for the same reason: an application starting beside sequential
 * readers, its random reads charged their whole positioning time, left
 * them owed a tenth of the device even at 30x, which they took as whole
 * turns (2-3 MiB on the emulated HDD), each delaying its next read by
 * 35-90 ms. The tiers' shares, the turn and the rate caps still take the
 * full cost.
 */
static inline u64 prism_raise_charge(u64 cost, u64 seq_cost, bool raised)
{
	return raised && seq_cost < cost ? seq_cost : cost;
}

/*
 * @sectors were served to a raised flow at @now: whether its raise ended
 * with them.
 */
static inline bool prism_raise_served(struct prism_raise *r, u32 sectors,
				      unsigned long now)
{
	if (!r->left)
		return false;
	r->left = sectors < r->left ? r->left - sectors : 0;
	return !prism_raise_on(r, now);
}

void prism_fq_charge_idle(struct prism_fq *fq, struct prism_fq_flow *f,
			  u64 ns);
bool prism_fq_reclaimable(const struct prism_fq *fq,
			  const struct prism_fq_flow *f);

/*
 * Choosing a flow: the mechanism walks the tier's backlogged flows
 * through prism_fq_pick_consider() and calls prism_fq_pick_done(), which
 * returns the chosen one's id. One pass; when no flow is eligible the
 * tier's virtual time moves up to the earliest start (WF2Q+'s
 * V = max(V, min S)), and of the flows starting there the one finishing
 * first goes.
 */
struct prism_fq_pick {
	int best;		/* eligible flow finishing first, -1: none */
	u64 best_finish;
	u64 best_start;
	int low;		/* flow with the earliest start */
	u64 low_start;
	u64 low_finish;
};

void prism_fq_pick_init(struct prism_fq_pick *p);
void prism_fq_pick_consider(struct prism_fq_pick *p, const struct prism_fq *fq,
			    const struct prism_fq_flow *f, int id);
int prism_fq_pick_done(struct prism_fq_pick *p, struct prism_fq *fq);

#endif /* _PRISM_WF2Q_H */
