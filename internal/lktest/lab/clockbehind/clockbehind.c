/*
 * Preloaded into dhcpd by the lab (Dhcpd.RestartRewritingAfter): time()
 * runs LK_LAB_TIME_BEHIND seconds behind the real clock.
 *
 * ISC dhcpd reads its clock with gettimeofday() (cur_time), except in
 * server/db.c: db_startup() sets write_time, the time of the last rewrite,
 * with time(), and new_lease_file() names its temporary file with it.
 * commit_leases() rewrites the file on the first commit more than
 * LEASE_REWRITE_PERIOD (3600 s) after write_time. With time() behind by
 * 3600 - N seconds, that hourly rewrite comes due N seconds after the
 * start, in a running dhcpd; lease times, which come from cur_time, are
 * untouched.
 *
 * The variables are removed at load, so dhcpd's children (the hooks) do
 * not inherit them.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <time.h>

static long behind;

__attribute__((constructor)) static void lk_lab_init(void)
{
	const char *s = getenv("LK_LAB_TIME_BEHIND");
	if (s != NULL)
		behind = atol(s);
	unsetenv("LK_LAB_TIME_BEHIND");
	unsetenv("LD_PRELOAD");
}

time_t time(time_t *t)
{
	struct timespec ts;
	time_t v;

	clock_gettime(CLOCK_REALTIME, &ts);
	v = ts.tv_sec - behind;
	if (t != NULL)
		*t = v;
	return v;
}
