// SPDX-License-Identifier: GPL-2.0
/*
 * prism's flows and the dispatch choice among them.
 *
 * A tier's requests are queued per flow (struct prism_flow in prism.h:
 * one process's requests at one tier). The flow table's lookups, which
 * the insert path runs for every request, are inline in prism.h; here a
 * slot is reset for a new flow, a request is queued on its flow's FIFO
 * and sort tree, and the flow becomes backlogged in its tier's fair
 * queue (WF2Q+, see prism_policy.h). The direct lane, which serves in
 * arrival order what was queued while nothing else was, spills its
 * requests onto their flows here when it closes, and the dispatch order
 * (sector order on rotational media, arrival order on flash) follows the
 * media here.
 *
 * prism_dispatch_choose() is what dispatch does when it has neither an
 * at-head request nor the lane to serve: it brings what moves with time
 * up to date, then names a tier (the one-tier shortcut, or prism_choose()
 * on the full view that prism_hold.c builds, which may hold instead), a
 * flow of it (the fair queue) and a request of that flow (FIFO or C-LOOK),
 * and charges its cost. Taking the request out of its lists and into the
 * books is prism_sched.c's (prism_dispatch_out()). Everything here runs
 * under prism_data.lock (see the top of prism_sched.c).
 */
#include "prism.h"

/*
 * Slot @fl of the flow table given to flow @key (process @id at @tier, in
 * group @g or the tier's own), or emptied (@key 0): lists, books and
 * fair-queue state start afresh.
 */
void prism_flow_reset(struct prism_data *pd, struct prism_flow *fl,
		      u32 key, u32 id, enum prism_tier tier,
		      struct prism_group *g)
{
	int d;

	if (fl->group)
		fl->group->nr_flows--;
	WRITE_ONCE(fl->group, g);
	if (g)
		g->nr_flows++;

	for (d = 0; d < PRISM_NR_FIFOS; d++) {
		INIT_LIST_HEAD(&fl->fifo[d]);
		WRITE_ONCE(fl->queued[d], 0);
	}
	for (d = 0; d < PRISM_NR_DIRS; d++) {
		fl->sort[d] = RB_ROOT;
		fl->sweep_pos[d] = 0;
	}
	INIT_LIST_HEAD(&fl->active);
	fl->slot = fl - pd->flows;
	fl->fq = (struct prism_fq_flow){ .start = prism_flow_fq(pd, fl)->vtime };
	fl->stream = (struct prism_stream){ };
	fl->id = id;
	fl->tier = tier;
	WRITE_ONCE(fl->rt, false);
	WRITE_ONCE(fl->inserted, 0);
	atomic64_set(&fl->finished, 0);
	atomic64_set(&fl->throttled, 0);
	fl->dispatched = 0;
	fl->cost = 0;
	fl->bytes = 0;
	fl->last_used = jiffies;
	WRITE_ONCE(fl->done_ns, 0);
	fl->dispatch_ns = 0;
	fl->think = (struct prism_think){ };
	fl->returning = false;
	fl->starting = false;
	fl->raise = (struct prism_raise){ };
	if (id && current->tgid == id)
		strscpy(fl->comm, current->comm, sizeof(fl->comm));
	else
		strscpy(fl->comm, id ? "?" : "(shared)", sizeof(fl->comm));
	/*
	 * Published last, with release: a lockless reader that matches the
	 * key (prism_flow_find()) sees the slot reset, on every architecture.
	 */
	smp_store_release(&fl->key, key);
}

/* First request at or after @pos in sector order, NULL if none. */
static struct request *prism_sorted_from(struct rb_root *root, sector_t pos)
{
	struct rb_node *node = root->rb_node;
	struct request *res = NULL;

	while (node) {
		struct request *rq = rb_entry_rq(node);

		if (blk_rq_pos(rq) >= pos) {
			res = rq;
			node = node->rb_left;
		} else {
			node = node->rb_right;
		}
	}
	return res;
}

/*
 * Whether group slot @g may be given to another group: no flow is keyed
 * to it, and it owes its tier nothing or has been idle a second.
 */
static bool prism_group_reclaimable(struct prism_data *pd,
				    struct prism_group *g, unsigned long now)
{
	if (!g->id)
		return true;
	if (g->nr_flows || g->ent.backlogged)
		return false;
	return prism_fq_reclaimable(&pd->tier[g->tier].fq, &g->ent) ||
	       time_after_eq(now, g->last_used + HZ);
}

static inline u32 prism_group_hash(u64 id, enum prism_tier tier)
{
	return hash_64(id * PRISM_NR_TIERS + tier, PRISM_GROUP_BITS);
}

/* The group of cgroup @id at @tier, NULL if it has none. Under the lock. */
struct prism_group *prism_group_find(struct prism_data *pd, u64 id,
				     enum prism_tier tier)
{
	u32 h = prism_group_hash(id, tier), i;

	for (i = 0; i < PRISM_GROUP_PROBE; i++) {
		struct prism_group *g =
			&pd->groups[(h + i) & (PRISM_NR_GROUPS - 1)];

		if (g->id == id && g->tier == tier)
			return g;
	}
	return NULL;
}

/*
 * The group of cgroup @id at @tier, of @weight (its io.prism.weight),
 * made if it has no slot yet; NULL when none is free, and its flows are
 * then the tier's own. Under the lock.
 */
struct prism_group *prism_group_get(struct prism_data *pd, u64 id,
				    enum prism_tier tier, u32 weight)
{
	u32 h = prism_group_hash(id, tier), i;
	unsigned long now = jiffies;
	struct prism_group *g, *spare = NULL;

	lockdep_assert_held(&pd->lock);

	for (i = 0; i < PRISM_GROUP_PROBE; i++) {
		g = &pd->groups[(h + i) & (PRISM_NR_GROUPS - 1)];
		if (g->id == id && g->tier == tier)
			goto found;
		if (!spare && prism_group_reclaimable(pd, g, now))
			spare = g;
	}
	if (!spare) {
		pd->group_overflows++;
		return NULL;
	}
	g = spare;
	WRITE_ONCE(g->id, id);
	g->tier = tier;
	g->slot = g - pd->groups;
	g->nr_flows = 0;
	INIT_LIST_HEAD(&g->active);
	g->fq = (struct prism_fq){ };
	g->ent = (struct prism_fq_flow){ .start = pd->tier[tier].fq.vtime,
					 .weight = weight };
	g->note = (struct prism_weight_note){ .last = -1 };
	WRITE_ONCE(g->dispatched, 0);
	WRITE_ONCE(g->cost, 0);
	WRITE_ONCE(g->bytes, 0);
found:
	/*
	 * Idle a second, as a group whose slot may be given away: it starts
	 * afresh (prism_fq_rest()). A group returns only with a flow of it
	 * (prism_flow_activate()), which may have had no request for longer
	 * than the return window with one still in the device.
	 */
	if (!g->ent.backlogged && time_after_eq(now, g->last_used + HZ))
		prism_fq_rest(&pd->tier[tier].fq, &g->ent);
	/* A new io.prism.weight applies from the cgroup's next request. */
	if (g->ent.weight != weight)
		prism_fq_reweight(&pd->tier[tier].fq, &g->ent, weight);
	g->last_used = now;
	return g;
}

/*
 * The earliest start among what is backlogged in fair queue @fq of tier
 * queue @tq: the flows of group @g (NULL: the tier's own flows, and the
 * groups), or @fq's virtual time if none is earlier (see
 * prism_fq_activate_at()). A walk of the tier's active flows, only when
 * a flow starts (prism_flow_start()): one that comes and goes keeps the
 * plain rule, or on flash, where nothing returns, each activation would
 * take the laggard's place again.
 */
static u64 prism_fq_earliest(struct prism_tier_queue *tq,
			     struct prism_group *g, struct prism_fq *fq)
{
	struct prism_flow *f;
	struct prism_group *h;
	u64 v = fq->vtime;

	if (!fq->nr)
		return v;
	list_for_each_entry(f, &tq->active, active)
		if (f->group == g && prism_vt_before(f->fq.start, v))
			v = f->fq.start;
	if (!g)
		list_for_each_entry(h, &tq->groups, active)
			if (prism_vt_before(h->ent.start, v))
				v = h->ent.start;
	return v;
}

/*
 * A flow with requests on its lists is on its tier's backlogged list and
 * in its fair queue, its group's (the group then in its tier's) or its
 * tier's; one that was expected back keeps its place in the fair queue,
 * and so does its group.
 */
static void prism_flow_activate(struct prism_data *pd, struct prism_flow *fl,
				struct request *rq)
{
	struct prism_tier_queue *tq = &pd->tier[fl->tier];
	struct prism_group *g = fl->group;
	struct prism_fq *fq = prism_flow_fq(pd, fl);
	u64 quantum = prism_tun(pd)->quantum;
	u32 weight;

	if (fl->fq.backlogged)
		goto out;
	weight = prism_rq_weight(rq);
	if (prism_raise_on(&fl->raise, jiffies))
		weight *= PRISM_RAISE_COEFF;
	prism_note_flow_weight(pd, fl, weight);
	if (g && !g->ent.backlogged) {
		if (fl->returning)
			prism_fq_return(&tq->fq, &g->ent, g->ent.weight,
					quantum);
		else
			prism_fq_activate(&tq->fq, &g->ent, g->ent.weight);
		list_add_tail(&g->active, &tq->groups);
	}
	if (fl->returning)
		prism_fq_return(fq, &fl->fq, weight, quantum);
	else if (fl->starting)
		prism_fq_activate_at(fq, &fl->fq, weight,
				     prism_fq_earliest(tq, g, fq), quantum);
	else
		prism_fq_activate(fq, &fl->fq, weight);
	list_add_tail(&fl->active, &tq->active);
out:
	/* Decided for this activation only (see prism_first_insert()). */
	fl->starting = false;
	fl->returning = false;
}

/*
 * @fl's raise just ended (raise.left is 0 now): while backlogged it
 * weighs its own weight again at once; otherwise prism_flow_activate()
 * gives it its own weight when it comes back.
 */
static void prism_flow_raise_ended(struct prism_data *pd,
				   struct prism_flow *fl)
{
	if (fl->fq.backlogged)
		prism_fq_reweight(prism_flow_fq(pd, fl), &fl->fq,
				  fl->fq.weight / PRISM_RAISE_COEFF);
}

/* The raise of @fl ends before its time (its burst grew large). */
void prism_flow_unraise(struct prism_data *pd, struct prism_flow *fl)
{
	if (!fl->raise.left)
		return;
	fl->raise.left = 0;
	prism_flow_raise_ended(pd, fl);
}

/* A flow with nothing queued leaves its fair queue, and so may its group. */
void prism_flow_deactivate(struct prism_data *pd, struct prism_flow *fl)
{
	struct prism_group *g = fl->group;

	if (!fl->fq.backlogged)
		return;
	prism_fq_deactivate(prism_flow_fq(pd, fl), &fl->fq);
	list_del_init(&fl->active);
	if (g && !g->fq.nr) {
		prism_fq_deactivate(&pd->tier[fl->tier].fq, &g->ent);
		list_del_init(&g->active);
	}
}

/*
 * @cost of device time served to @fl: charged in its fair queue, and to
 * its group in its tier's. Under the lock, while the flow is backlogged.
 */
void prism_flow_charge(struct prism_data *pd, struct prism_flow *fl,
		       u64 cost)
{
	struct prism_group *g = fl->group;

	prism_fq_charge(prism_flow_fq(pd, fl), &fl->fq, cost);
	if (g)
		prism_fq_charge(&pd->tier[fl->tier].fq, &g->ent, cost);
}

static void prism_sort_add(struct prism_flow *fl, struct request *rq)
{
	elv_rb_add(&fl->sort[prism_rq_dir(rq)], rq);
	prism_rq_set_state(rq, prism_rq_state(rq) | PRISM_RQ_SORTED);
}

/*
 * Queue @rq, counted in nr_queued and with its state (QUEUED, SYNC_FIFO)
 * set, on its flow's FIFO, and in the sort tree if sorting: its flow is
 * backlogged in the tier's fair queue.
 */
void prism_flow_queue(struct prism_data *pd, struct request *rq)
{
	unsigned long st = prism_rq_state(rq);
	struct prism_tier_queue *tq = &pd->tier[prism_rq_tier_of_state(st)];
	struct prism_flow *fl = prism_rq_flow(pd, st);
	int fifo = prism_rq_fifo(rq);

	list_add_tail(&rq->queuelist, &fl->fifo[fifo]);
	tq->queued[fifo]++;
	WRITE_ONCE(fl->queued[fifo], fl->queued[fifo] + 1);
	prism_flow_activate(pd, fl, rq);
	if (pd->sorted)
		prism_sort_add(fl, rq);
}

/*
 * Something is to be queued that may not take the direct lane, or the
 * order changed: the lane's requests join their flows' FIFOs first, in
 * their order, so that dispatch chooses among all of them.
 */
noinline void prism_lane_spill(struct prism_data *pd)
{
	struct request *rq, *next;

	list_for_each_entry_safe(rq, next, &pd->direct, queuelist) {
		list_del_init(&rq->queuelist);
		prism_rq_set_state(rq, prism_rq_state(rq) & ~PRISM_RQ_DIRECT);
		prism_flow_queue(pd, rq);
	}
	pd->nr_direct = 0;
	pd->lane_spills++;
}

/*
 * Closed at once, not at the next dispatch's look (prism_dispatch_choose()):
 * a closed lane holds nothing, since dispatch serves the lane without
 * asking what closed it (a rate cap, sector order).
 */
void prism_lane_close(struct prism_data *pd)
{
	pd->lane_off = true;
	if (pd->nr_direct)
		prism_lane_spill(pd);
}

/*
 * prism_update_order() found the media changed: the cost model and the
 * dispatch order follow (sector order on rotational media, arrival order
 * on flash).
 */
static noinline void prism_order_changed(struct prism_data *pd,
					 bool rotational)
{
	bool sorted = rotational;
	struct request *rq;
	int f, d;

	pd->rotational = rotational;
	prism_model_update(pd);
	if (sorted == pd->sorted)
		return;
	pd->sorted = sorted;
	if (!sorted)
		return;	/* stale tree entries leave as they are dispatched */
	prism_lane_close(pd);	/* its requests are sorted below */
	for (f = 0; f < PRISM_FLOW_SLOTS; f++)
		for (d = 0; d < PRISM_NR_FIFOS; d++)
			list_for_each_entry(rq, &pd->flows[f].fifo[d], queuelist)
				if (!(prism_rq_state(rq) & PRISM_RQ_SORTED))
					prism_sort_add(&pd->flows[f], rq);
}

/*
 * Re-read the queue's rotational flag, which a driver or the user may
 * change at any time, and with it the dispatch order. When sorting
 * is switched on, queued requests enter the trees so that none is missed.
 * The cost model follows the rotational flag too. On every dispatch that
 * chooses (see prism_insert_requests()): the check inline, the change out
 * of line.
 */
static inline void prism_update_order(struct prism_data *pd,
				      struct request_queue *q)
{
	bool rotational = !blk_queue_nonrot(q);

	lockdep_assert_held(&pd->lock);

	if (unlikely(rotational != pd->rotational))
		prism_order_changed(pd, rotational);
}

/*
 * The dispatch choice: the tier, the flow of it and its request.
 */

static struct request *prism_pick(struct prism_data *pd,
				  struct prism_flow *fl,
				  const struct prism_choice *c)
{
	enum prism_dir dir = prism_fifo_dir(c->dir);
	struct request *rq = NULL;

	if (c->take == PRISM_TAKE_NEXT && pd->sorted) {
		/* C-LOOK: upwards from the sweep, then wrap to the lowest. */
		rq = prism_sorted_from(&fl->sort[dir], fl->sweep_pos[dir]);
		if (!rq && !RB_EMPTY_ROOT(&fl->sort[dir]))
			rq = rb_entry_rq(rb_first(&fl->sort[dir]));
	}
	if (!rq)
		rq = list_first_entry_or_null(&fl->fifo[c->dir], struct request,
					      queuelist);
	return rq;
}

/* A flow's lists as the policy sees them. */
static void prism_flow_view(struct prism_flow *fl, struct prism_tier_view *v)
{
	int d;

	for (d = 0; d < PRISM_NR_FIFOS; d++) {
		struct request *head;

		v->dir[d].queued = fl->queued[d];
		head = list_first_entry_or_null(&fl->fifo[d], struct request,
						queuelist);
		v->dir[d].oldest = head ? head->fifo_time : 0;
	}
	v->random = !prism_stream_seq(&fl->stream);
}

/*
 * The tier's fair queue chooses the flow that starts a turn (WF2Q+), among
 * its backlogged flows and groups and @expected, the batch's flow if it
 * has nothing queued but is expected back: it competes as if backlogged,
 * and so does its group. A group chosen chooses among its flows in turn.
 */
static struct prism_flow *prism_fq_select(struct prism_data *pd, int t,
					  struct prism_flow *expected)
{
	struct prism_tier_queue *tq = &pd->tier[t];
	struct prism_group *g, *eg = expected ? expected->group : NULL;
	struct prism_fq_pick p;
	struct prism_flow *fl;
	int id;

	prism_fq_pick_init(&p);
	list_for_each_entry(fl, &tq->active, active)
		if (!fl->group)
			prism_fq_pick_consider(&p, &tq->fq, &fl->fq,
					       prism_flow_slot(pd, fl));
	list_for_each_entry(g, &tq->groups, active)
		prism_fq_pick_consider(&p, &tq->fq, &g->ent,
				       PRISM_FLOW_SLOTS + g->slot);
	if (expected && !eg)
		prism_fq_pick_consider(&p, &tq->fq, &expected->fq,
				       prism_flow_slot(pd, expected));
	else if (eg && !eg->ent.backlogged)
		prism_fq_pick_consider(&p, &tq->fq, &eg->ent,
				       PRISM_FLOW_SLOTS + eg->slot);
	id = prism_fq_pick_done(&p, &tq->fq);
	if (id < PRISM_FLOW_SLOTS)
		return id >= 0 ? &pd->flows[id] : NULL;

	g = &pd->groups[id - PRISM_FLOW_SLOTS];
	prism_fq_pick_init(&p);
	list_for_each_entry(fl, &tq->active, active)
		if (fl->group == g)
			prism_fq_pick_consider(&p, &g->fq, &fl->fq,
					       prism_flow_slot(pd, fl));
	if (eg == g)
		prism_fq_pick_consider(&p, &g->fq, &expected->fq,
				       prism_flow_slot(pd, expected));
	id = prism_fq_pick_done(&p, &g->fq);
	return id >= 0 ? &pd->flows[id] : NULL;
}

/* The device held idle @ns for @fl: charged as prism_flow_charge() does. */
static void prism_flow_charge_idle(struct prism_data *pd,
				   struct prism_flow *fl, u64 ns)
{
	prism_fq_charge_idle(prism_flow_fq(pd, fl), &fl->fq, ns);
	if (fl->group)
		prism_fq_charge_idle(&pd->tier[fl->tier].fq, &fl->group->ent,
				     ns);
}

/* The highest tier with requests on its flows, PRISM_NR_TIERS if none. */
static inline int prism_first_queued(struct prism_data *pd)
{
	int t;

	for (t = 0; t < PRISM_NR_TIERS && !tq_queued(&pd->tier[t]); t++)
		;
	return t;
}

/*
 * What "cannot happen": tier @t's counts say requests are queued where
 * its flows' lists hold none, or a flow with requests is not in its fair
 * queue. Returning no request would leave the queue polled every few
 * milliseconds for ever, and a freeze waiting. The counts are rebuilt
 * from the lists (the requests themselves are where they were: every
 * one still leaves once), flows join or leave the fair queue as their
 * lists say, and the caller chooses again.
 */
static noinline void prism_repair_tier(struct prism_data *pd, int t)
{
	struct prism_tier_queue *tq = &pd->tier[t];
	u32 queued[PRISM_NR_FIFOS] = { };
	struct prism_flow *fl;
	struct request *rq;
	int i, d;

	WARN_ONCE(1, "prism: tier %d counts disagree with its lists, rebuilt\n",
		  t);
	for (i = 0; i < PRISM_FLOW_SLOTS; i++) {
		fl = &pd->flows[i];
		if (fl->tier != t)
			continue;
		for (d = 0; d < PRISM_NR_FIFOS; d++) {
			u32 n = 0;

			list_for_each_entry(rq, &fl->fifo[d], queuelist)
				n++;
			WRITE_ONCE(fl->queued[d], n);
			queued[d] += n;
		}
		if (!prism_flow_queued(fl)) {
			prism_flow_deactivate(pd, fl);
			continue;
		}
		for (d = 0; d < PRISM_NR_FIFOS && !fl->queued[d]; d++)
			;
		rq = list_first_entry(&fl->fifo[d], struct request, queuelist);
		prism_flow_activate(pd, fl, rq);
	}
	for (d = 0; d < PRISM_NR_FIFOS; d++)
		tq->queued[d] = queued[d];
	prism_batch_reset(&pd->batch);
}

/*
 * The queue drains (prism_draining()): the first list with requests of
 * the first backlogged flow of the highest tier that has any, past every
 * hold and cap, so that a freeze waits for the device alone. Returns the
 * flow, with @c filled in, or NULL if no flow has requests queued.
 */
static noinline struct prism_flow *prism_drain_choice(struct prism_data *pd,
						      struct prism_choice *c)
{
	int t = prism_first_queued(pd), d;
	struct prism_flow *fl;

	if (t == PRISM_NR_TIERS)
		return NULL;
	fl = list_first_entry_or_null(&pd->tier[t].active, struct prism_flow,
				      active);
	for (d = 0; fl && d < PRISM_NR_FIFOS && !fl->queued[d]; d++)
		;
	if (!fl || d == PRISM_NR_FIFOS) {
		/* Not to be: the normal choice finds it after the repair. */
		prism_repair_tier(pd, t);
		return NULL;
	}
	prism_batch_reset(&pd->batch);
	c->tier = t;
	c->flow = prism_flow_slot(pd, fl);
	c->dir = d;
	c->take = PRISM_TAKE_FIFO;
	prism_choice_plain(c);
	return fl;
}

/*
 * Whether a tier above @tier had a request complete lately, while the
 * depth controller limits the tiers below (see prism_choose()). Lockless.
 */
static bool prism_higher_limits(struct prism_data *pd, int tier, u32 depth)
{
	unsigned long now = jiffies;
	int t;

	if (!prism_depth_limits(pd->depth.limit, pd->depth.duty, depth))
		return false;
	for (t = 0; t < tier; t++)
		if (prism_tier_recent(&pd->tier[t], now))
			return true;
	return false;
}

/*
 * Whether @tier is the only tier that could be served or guard the device:
 * no other tier has requests queued (all of pd->nr_queued is @tier's,
 * the at-head list and the direct lane being empty here), none above it
 * is active (prism_higher_quiet()), nor limits it as a recent one does.
 * The test for prism_dispatch_request()'s shortcut (see
 * prism_choose_batch()).
 */
static bool prism_tier_alone(struct prism_data *pd,
			     const struct prism_tunables *tun,
			     struct request_queue *q, int tier, u32 depth)
{
	return pd->nr_queued == tq_queued(&pd->tier[tier]) &&
	       prism_higher_quiet(pd, tun, q, tier) &&
	       !prism_higher_limits(pd, tier, depth);
}

/*
 * Dispatch by choice: the order and the state that moves with time brought
 * up to date, then the tier, the flow and the request chosen and charged.
 * Out of line, so that the lanes' path (prism_dispatch_request()) keeps
 * its frame small. Called with the lock held; NULL if nothing may go now,
 * else the request, with chosen_now set for prism_dispatch_out().
 */
noinline struct request *prism_dispatch_choose(struct prism_data *pd,
						struct blk_mq_hw_ctx *hctx)
{
	struct request_queue *q = hctx->queue;
	const struct prism_tunables *tun;
	struct prism_choice c;
	struct prism_flow *fl, *waited = NULL;
	struct request *rq;
	u64 now = 0, flow_window, cost, charge;
	u32 queued_tiers = 0, depth;
	unsigned long tick;
	bool differ, drain = false;
	int t, repaired = 0;

	/*
	 * What follows, which only moves with time, the tunables or the
	 * media, is brought up to date once a jiffy while the lane is served
	 * (prism_dispatch_request()): what closes the lane at once closes it
	 * where it happens (prism_note_weight(), the tunables' store), what
	 * closes it with time is found here.
	 */
	tick = jiffies;
	/*
	 * Before anything is looked at: a completion from now unparks. An
	 * acquire, paired with __prism_finish(): a completion counted here is
	 * in the tiers' books the view reads.
	 */
	pd->view_out = (u32)atomic64_read_acquire(&pd->owned_out);
	prism_update_order(pd, q);
	tun = prism_tun(pd);
	differ = prism_weights_differ_now(pd);
	flow_window = prism_flow_window_now(pd, tun, differ);
	/* Stored only when it changes: completions read its cache line. */
	if (flow_window != pd->flow_window)
		WRITE_ONCE(pd->flow_window, flow_window);
	if (tun->cost_auto &&
	    time_after_eq(jiffies, pd->learn_folded + PRISM_LEARN_FOLD))
		prism_learn_fold(pd);
	depth = prism_device_depth(q);
	if (unlikely(depth != pd->device_depth))
		WRITE_ONCE(pd->device_depth, depth);
	if (atomic64_read(&pd->lat.all) || atomic64_read(&pd->lat.solo) ||
	    atomic64_read(&pd->lat.bulk)) {
		now = ktime_get_ns();
		prism_fold_latency(pd, now, depth);
	}
	if (pd->depth.limit != depth) {
		/* Lift a limit once the tiers it protected went quiet. */
		if (!now)
			now = ktime_get_ns();
		prism_depth_idle(&pd->depth, now, depth,
				 prism_inflight(&pd->tier[PRISM_HIGH]) ||
				 prism_inflight(&pd->tier[PRISM_NORMAL]),
				 prism_tiers_contend(pd));
	}
	/*
	 * Closed by something that came with time (a rate cap, a depth
	 * limit, a flow window): what the lane holds is chosen with the rest,
	 * as where the tunables or the order close it.
	 */
	if (prism_lane_off(pd->sorted, flow_window, differ, pd->depth.limit,
			   pd->depth.duty, depth,
			   pd->rate_capped))
		prism_lane_close(pd);
	else
		pd->lane_off = false;
	pd->lane_checked = tick;

	/* Whatever the lane still holds goes first, as it came. */
	rq = list_first_entry_or_null(&pd->direct, struct request, queuelist);
	if (rq) {
		pd->chosen_now = now;
		return rq;
	}

	if (unlikely(prism_draining(q))) {
		fl = prism_drain_choice(pd, &c);
		if (fl) {
			drain = true;
			queued_tiers = BIT(c.tier);
			goto chosen;
		}
	}

again:
	/*
	 * One tier alone has requests queued and none above it is active:
	 * the choice prism_choose() would make, without building its view.
	 */
	t = prism_first_queued(pd);
	if (t < PRISM_NR_TIERS && !pd->idle_since && !tun->rate_kbps[t] &&
	    prism_tier_alone(pd, tun, q, t, depth)) {
		u32 left = 0;

		fl = NULL;
		if (pd->batch.tier == t && pd->batch.flow >= 0) {
			fl = &pd->flows[pd->batch.flow];
			if (fl->tier == t)
				left = fl->queued[pd->batch.dir];
		}
		if (prism_choose_alone(&pd->batch, tun, t, left,
				       pd->flow_window, &c)) {
			queued_tiers = BIT(t);
			if (c.flow >= 0)
				goto chosen;
			goto turn;
		}
	}

	if (!prism_choose_viewed(pd, hctx, tun, depth, &now, &c, &queued_tiers,
				 &waited))
		return NULL;

turn:
	if (c.flow < 0) {
		/* A new turn in the tier: its fair queue names the flow. */
		struct prism_tier_view fv;

		fl = prism_fq_select(pd, c.tier,
				     waited && waited->tier == c.tier ? waited :
									NULL);
		if (unlikely(!fl)) {
			if (repaired++)
				goto broken;
			prism_repair_tier(pd, c.tier);
			goto again;
		}
		c.flow = prism_flow_slot(pd, fl);
		if (fl == waited) {
			/* Its new turn begins by waiting for it. */
			prism_batch_wait_turn(&pd->batch, c.tier, c.flow);
			if (!now)
				now = ktime_get_ns();
			prism_hold(pd, hctx, PRISM_HOLD_FLOW, -1,
				   prism_flow_owned(fl) ? NULL : fl,
				   prism_flow_wait_end(fl), now, 0);
			return NULL;
		}
		prism_flow_view(fl, &fv);
		prism_choose_in_flow(&fv, &pd->batch, tun, jiffies, &c);
	} else {
		fl = &pd->flows[c.flow];
	}

chosen:
	rq = prism_pick(pd, fl, &c);
	if (unlikely(!rq)) {
		/* The view said queued; the lists disagree. */
		if (repaired++)
			goto broken;
		prism_repair_tier(pd, c.tier);
		goto again;
	}
	/*
	 * Unequal weights among flows backlogged together for long (which do
	 * not re-activate: see prism_note_weight()), seen where they are
	 * served.
	 */
	if ((pd->tier[c.tier].fq.nr >= 2 &&
	     prism_fq_asymmetric(&pd->tier[c.tier].fq)) ||
	    (fl->group && fl->group->fq.nr >= 2 &&
	     prism_fq_asymmetric(&fl->group->fq)))
		pd->weights_seen = jiffies;
	if (c.aged)
		pd->tier[c.tier].aged++;
	if (c.shared)
		pd->tier[c.tier].shared++;
	if (c.expired && !c.aged && !c.shared)
		pd->tier[c.tier].expired++;
	prism_note_dispatch(&pd->batch, tun, pd->sorted,
			    prism_rq_state(rq) & PRISM_RQ_SEQ,
			    pd->tier[c.tier].fq.nr > 1);

	if (pd->idle_since) {
		/*
		 * A window hold ended: the idle time was the held-for tier's,
		 * and, if it was held for a flow, that flow's.
		 */
		u64 idle;

		if (!now)
			now = ktime_get_ns();
		idle = now > pd->idle_since ? now - pd->idle_since : 0;
		prism_account_idle(&pd->batch, tun, queued_tiers, pd->idle_tier,
				   idle);
		if (pd->idle_flow >= 0) {
			struct prism_flow *ifl = &pd->flows[pd->idle_flow];

			if (ifl->key && ifl->tier == pd->idle_tier)
				prism_flow_charge_idle(pd, ifl, idle);
		}
		pd->idle_since = 0;
	}
	/*
	 * Charge its cost while the flow is still backlogged: to the flow's
	 * virtual time, the tier's, and the shares between tiers.
	 */
	cost = prism_flow_served(pd, tun, fl, rq);
	charge = cost;
	/* A raised chain: the sequential cost only looked up then. */
	if (fl->raise.left && prism_flow_owned(fl) <= 1 &&
	    prism_raise_on(&fl->raise, jiffies))
		charge = prism_raise_charge(cost,
					    prism_cost(&pd->model,
						       prism_rq_dir(rq),
						       prism_rq_data_bytes(rq),
						       true),
					    true);
	prism_flow_charge(pd, fl, charge);
	if (fl->raise.left &&
	    prism_raise_served(&fl->raise, blk_rq_sectors(rq), jiffies))
		prism_flow_raise_ended(pd, fl);
	prism_account(&pd->batch, tun, queued_tiers, &c, cost);
	/*
	 * Not while draining: a tier must not owe, once a freeze is over,
	 * for what the freeze took.
	 */
	if (tun->rate_kbps[c.tier] && !drain)
		prism_bucket_charge(&pd->tier[c.tier].bucket, cost);
	if (pd->flow_window) {
		if (!now)
			now = ktime_get_ns();
		fl->dispatch_ns = now;
	}
	pd->chosen_now = now;
	return rq;

broken:
	/* Rebuilt from the lists and still nothing: at the next completion. */
	prism_batch_reset(&pd->batch);
	prism_mark_restart(hctx);
	return NULL;
}
