// SPDX-License-Identifier: GPL-2.0
/*
 * io.prism.weight's syntax (see prism_cgweight.h). Builds in the kernel
 * module and in the userspace tests.
 */
#ifdef __KERNEL__
#include <linux/errno.h>
#else
#include <errno.h>
#endif

#include "prism_cgweight.h"

/* isspace() of the kernel and of the C locale, the same in both builds. */
static bool prism_cg_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' ||
	       c == '\f' || c == '\r';
}

static const char *prism_cg_skip_space(const char *s)
{
	while (prism_cg_space(*s))
		s++;
	return s;
}

/*
 * A decimal number at @s, no larger than @max, into @val; returns what
 * follows it, or NULL if there is no number or it is too large. A
 * leading zero is refused: bfq reads a bare "0144" as octal (100) and
 * "default 0144" as decimal (144), and prism would rather refuse than
 * guess which one was meant.
 */
static const char *prism_cg_number(const char *s, unsigned int max,
				   unsigned int *val)
{
	unsigned int v = 0;
	const char *p = s;

	if (*p == '0' && p[1] >= '0' && p[1] <= '9')
		return NULL;
	for (; *p >= '0' && *p <= '9'; p++) {
		v = v * 10 + (*p - '0');
		if (v > max)
			return NULL;
	}
	if (p == s)
		return NULL;
	*val = v;
	return p;
}

/* "default" as a whole word at @s: what follows it, or NULL. */
static const char *prism_cg_default(const char *s)
{
	static const char word[] = "default";
	unsigned int i;

	for (i = 0; i < sizeof(word) - 1; i++)
		if (s[i] != word[i])
			return NULL;
	s += i;
	return *s == '\0' || prism_cg_space(*s) ? s : NULL;
}

/* Nothing but white space from @s on. */
static bool prism_cg_end(const char *s)
{
	return s && *prism_cg_skip_space(s) == '\0';
}

/*
 * Parses @buf, a NUL-terminated write to io.prism.weight, into @req.
 * Returns 0, or -EINVAL and leaves @req as it was for anything but
 *   W | default W | MAJ:MIN W | MAJ:MIN default
 * with white space around and between the words, W decimal in
 * [PRISM_CG_WEIGHT_MIN, PRISM_CG_WEIGHT_MAX]. Stricter than bfq, which
 * takes trailing garbage after a number ("100x") and hex ("0x64"):
 * nothing a written weight could mean two ways is taken.
 */
int prism_cg_weight_parse(const char *buf, struct prism_cg_weight_req *req)
{
	struct prism_cg_weight_req r = { };
	const char *p = prism_cg_skip_space(buf);
	const char *q;
	unsigned int major;
	bool reset = false;

	q = prism_cg_number(p, PRISM_CG_MAJOR_MAX, &major);
	if (q && *q == ':') {
		/* MAJ:MIN, white space, then W or "default". */
		r.dev = true;
		r.major = major;
		p = prism_cg_number(q + 1, PRISM_CG_MINOR_MAX, &r.minor);
		if (!p || !prism_cg_space(*p))
			return -EINVAL;
		p = prism_cg_skip_space(p);
		q = prism_cg_default(p);
		reset = !!q;
		p = reset ? q : prism_cg_number(p, PRISM_CG_WEIGHT_MAX,
						&r.weight);
	} else {
		/* W, or "default", white space and W. */
		q = prism_cg_default(p);
		if (q) {
			if (!prism_cg_space(*q))
				return -EINVAL;
			p = prism_cg_skip_space(q);
		}
		p = prism_cg_number(p, PRISM_CG_WEIGHT_MAX, &r.weight);
	}
	if (!prism_cg_end(p) || (!reset && r.weight < PRISM_CG_WEIGHT_MIN))
		return -EINVAL;
	*req = r;
	return 0;
}
