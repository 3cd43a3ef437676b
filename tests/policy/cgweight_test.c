// SPDX-License-Identifier: GPL-2.0
/*
 * Userspace tests of io.prism.weight's syntax (module/prism_cgweight.c):
 * what bfq's io.bfq.weight accepts is accepted with the same meaning,
 * and whatever is refused leaves the request untouched.
 */
#include <errno.h>

#include "check.h"
#include "prism_cgweight.h"

/* Parses @s; a refused input must leave @r as it was. */
static int parse(const char *s, struct prism_cg_weight_req *r)
{
	struct prism_cg_weight_req before;
	int ret;

	memset(r, 0x5a, sizeof(*r));
	before = *r;
	ret = prism_cg_weight_parse(s, r);
	if (ret)
		CHECK(!memcmp(&before, r, sizeof(*r)));
	return ret;
}

static void refused(const char *s)
{
	struct prism_cg_weight_req r;

	if (parse(s, &r) != -EINVAL) {
		fprintf(stderr, "accepted: \"%s\"\n", s);
		failures++;
	}
}

TEST(cgweight_default_forms)
{
	struct prism_cg_weight_req r;

	CHECK_EQ(parse("100", &r), 0);
	CHECK(!r.dev);
	CHECK_EQ(r.weight, 100);
	/* echo adds a newline; kernfs passes it on. */
	CHECK_EQ(parse("300\n", &r), 0);
	CHECK_EQ(r.weight, 300);
	CHECK_EQ(parse("default 250\n", &r), 0);
	CHECK(!r.dev);
	CHECK_EQ(r.weight, 250);
	CHECK_EQ(parse("  default\t 7 ", &r), 0);
	CHECK_EQ(r.weight, 7);
	CHECK_EQ(parse("1", &r), 0);
	CHECK_EQ(r.weight, PRISM_CG_WEIGHT_MIN);
	CHECK_EQ(parse("10000", &r), 0);
	CHECK_EQ(r.weight, PRISM_CG_WEIGHT_MAX);
}

TEST(cgweight_device_forms)
{
	struct prism_cg_weight_req r;

	CHECK_EQ(parse("8:16 500\n", &r), 0);
	CHECK(r.dev);
	CHECK_EQ(r.major, 8);
	CHECK_EQ(r.minor, 16);
	CHECK_EQ(r.weight, 500);
	CHECK_EQ(parse("259:0\t10000", &r), 0);
	CHECK_EQ(r.major, 259);
	CHECK_EQ(r.minor, 0);
	CHECK_EQ(r.weight, 10000);
	/* "default" takes the disk's own weight back: weight 0. */
	CHECK_EQ(parse("8:0 default\n", &r), 0);
	CHECK(r.dev);
	CHECK_EQ(r.major, 8);
	CHECK_EQ(r.weight, 0);
	/* The largest dev_t there is. */
	CHECK_EQ(parse("4095:1048575 1", &r), 0);
	CHECK_EQ(r.major, PRISM_CG_MAJOR_MAX);
	CHECK_EQ(r.minor, PRISM_CG_MINOR_MAX);
}

TEST(cgweight_out_of_range)
{
	refused("0");
	refused("0\n");
	refused("10001");
	refused("default 0");
	refused("default 10001");
	refused("8:0 0");
	refused("8:0 10001");
	refused("99999999999999999999999");
	refused("8:0 99999999999999999999999");
	refused("-1");
	refused("+5");
	refused("8:0 -1");
	refused("4096:0 100");
	refused("8:1048576 100");
}

TEST(cgweight_malformed)
{
	refused("");
	refused("\n");
	refused("   ");
	refused("default");
	refused("default\n");
	refused("default100");
	refused("defaults 100");
	refused("Default 100");
	refused("default 100 200");
	refused("high");
	refused("100x");
	refused("100 x");
	refused("0x64");
	refused("0144");
	refused("1e3");
	refused("10.5");
	refused("8:0");
	refused("8:0\n");
	refused("8:0 ");
	refused("8:0100");
	refused("8: 0 100");
	refused("8 :0 100");
	refused(":0 100");
	refused("8: 100");
	refused("8:0 default 100");
	refused("8:0 defaultx");
	refused("8:0 100 200");
	refused("08:0 100");
	refused("sda 100");
	refused("8:0:1 100");
}
