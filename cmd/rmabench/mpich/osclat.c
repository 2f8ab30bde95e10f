/*
 * osclat: the latency of MPI one-sided operations, for rmabench's rows
 * against MPICH (names ending in /mpich). Built with mpicc.mpich by
 * hack/bench.sh into .cache/bin/osclat; run by rmabench -compare -mpich:
 *
 *   mpiexec.mpich -launcher fork -n 2 osclat [-n ITERS] [-w WARMUP]
 *
 * Rank 0 is the origin, rank 1 the target: it waits in MPI_Barrier, whose
 * progress engine serves what MPICH does in software there. Both allocate
 * a window (MPI_Win_allocate); rank 0 opens one MPI_Win_lock_all epoch for
 * the whole run, as rmabench's LockAll, and times, one operation at a time,
 * each case below: WARMUP untimed operations, then ITERS timed ones,
 * reading the clock once per operation as perftest and rmabench do
 * (operation i takes from stamp i to stamp i+1). Every operation is
 * completed by MPI_Win_flush before the next.
 *
 * Output, on rank 0's stdout: a line naming the library, then a table as
 * perftest prints it, one line per case; the cases are named as rmabench's
 * rows, t_typical is the median (the upper one of an even count):
 *
 *   #case #iterations t_min[usec] t_typical[usec] t_avg[usec] 99%_percentile[usec] 99.9%_percentile[usec] t_max[usec]
 *   fetch_and_op_sum_int64 1000 ...
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Layout of the target's window: a word per atomic case, then data. */
enum {
	DISP_COUNTER = 0, /* int64, MPI_Fetch_and_op SUM */
	DISP_CAS = 8,	  /* int64, MPI_Compare_and_swap */
	DISP_DATA = 64,	  /* Get, Put, the accumulates */
	WIN_SIZE = 4096,
};

enum { FETCH_AND_OP, COMPARE_AND_SWAP, GET, PUT, ACCUMULATE, GET_ACCUMULATE, NCASES };

/* The cases, named as rmabench's rows that they are compared with. */
static const char *case_name[NCASES] = {
	"fetch_and_op_sum_int64",
	"compare_and_swap_int64",
	"get_8B",
	"put_8B_flush",
	"accumulate_sum_float64_1_flush",
	"get_accumulate_sum_float64_1",
};

static MPI_Win win;
static int64_t one = 1, fetched, expect;
static double dsum = 1, dfetched;
static char buf[8];

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* op does one operation of case c at rank 1 and completes it. */
static void op(int c)
{
	const int t = 1;
	switch (c) {
	case FETCH_AND_OP:
		MPI_Fetch_and_op(&one, &fetched, MPI_INT64_T, t, DISP_COUNTER, MPI_SUM, win);
		break;
	case COMPARE_AND_SWAP: {
		/* As rmabench's case: expect the value last seen, swap in the
		 * next one, so that every swap succeeds. */
		int64_t next = expect + 1;
		MPI_Compare_and_swap(&next, &expect, &fetched, MPI_INT64_T, t, DISP_CAS, win);
		MPI_Win_flush(t, win);
		expect = fetched == expect ? next : fetched;
		return;
	}
	case GET:
		MPI_Get(buf, 8, MPI_BYTE, t, DISP_DATA, 8, MPI_BYTE, win);
		break;
	case PUT:
		MPI_Put(buf, 8, MPI_BYTE, t, DISP_DATA, 8, MPI_BYTE, win);
		break;
	case ACCUMULATE:
		MPI_Accumulate(&dsum, 1, MPI_DOUBLE, t, DISP_DATA, 1, MPI_DOUBLE, MPI_SUM, win);
		break;
	case GET_ACCUMULATE:
		MPI_Get_accumulate(&dsum, 1, MPI_DOUBLE, &dfetched, 1, MPI_DOUBLE, t, DISP_DATA, 1, MPI_DOUBLE, MPI_SUM, win);
		break;
	}
	MPI_Win_flush(t, win);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

/* run times case c and prints its line. */
static void run(int c, int iters, int warmup, uint64_t *stamps, uint64_t *lat)
{
	for (int i = 0; i < warmup; i++)
		op(c);
	stamps[0] = now_ns();
	for (int i = 1; i <= iters; i++) {
		op(c);
		stamps[i] = now_ns();
	}
	double sum = 0;
	for (int i = 0; i < iters; i++) {
		lat[i] = stamps[i + 1] - stamps[i];
		sum += (double)lat[i];
	}
	qsort(lat, iters, sizeof lat[0], cmp_u64);
	int p99 = (int)(iters * 0.99), p999 = (int)(iters * 0.999);
	if (p99 > iters - 1)
		p99 = iters - 1;
	if (p999 > iters - 1)
		p999 = iters - 1;
	printf("%s %d %.3f %.3f %.3f %.3f %.3f %.3f\n", case_name[c], iters, lat[0] / 1e3, lat[iters / 2] / 1e3,
	       sum / iters / 1e3, lat[p99] / 1e3, lat[p999] / 1e3, lat[iters - 1] / 1e3);
	fflush(stdout);
}

static void usage(void)
{
	fprintf(stderr, "usage: mpiexec -n 2 osclat [-n ITERS] [-w WARMUP]\n");
	MPI_Abort(MPI_COMM_WORLD, 2);
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	int iters = 1000, warmup = -1, rank, size;
	for (int i = 1; i < argc; i++) {
		if (i + 1 < argc && strcmp(argv[i], "-n") == 0)
			iters = atoi(argv[++i]);
		else if (i + 1 < argc && strcmp(argv[i], "-w") == 0)
			warmup = atoi(argv[++i]);
		else
			usage();
	}
	if (iters < 1)
		usage();
	if (warmup < 0) /* rmabench's default: a tenth, at most 100 */
		warmup = iters / 10 < 100 ? iters / 10 : 100;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (size != 2) {
		if (rank == 0)
			fprintf(stderr, "osclat: %d ranks, want 2\n", size);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	void *base;
	MPI_Win_allocate(WIN_SIZE, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
	memset(base, 0, WIN_SIZE);
	MPI_Barrier(MPI_COMM_WORLD); /* the target's memory is zero before any op */
	if (rank == 0) {
		char version[MPI_MAX_LIBRARY_VERSION_STRING];
		int n;
		MPI_Get_library_version(version, &n);
		version[strcspn(version, "\n")] = 0;
		for (char *p = version; *p; p++)
			if (*p == '\t')
				*p = ' ';
		printf("# %s\n", version);
		printf("#case #iterations t_min[usec] t_typical[usec] t_avg[usec] 99%%_percentile[usec] 99.9%%_percentile[usec] t_max[usec]\n");
		uint64_t *stamps = malloc((iters + 1) * sizeof *stamps), *lat = malloc(iters * sizeof *lat);
		if (!stamps || !lat)
			MPI_Abort(MPI_COMM_WORLD, 1);
		MPI_Win_lock_all(0, win);
		for (int c = 0; c < NCASES; c++)
			run(c, iters, warmup, stamps, lat);
		MPI_Win_unlock_all(win);
		free(stamps);
		free(lat);
	}
	MPI_Barrier(MPI_COMM_WORLD);
	MPI_Win_free(&win);
	MPI_Finalize();
	return 0;
}
