/*-------------------------------------------------------------------------
 *
 * terms.c
 *	  Where terms come from (invariant I2 in lease.c).
 *
 * Every new term is the next value of leader_election.terms, one counter
 * per database, kept above every term issued in the database.  So a name's
 * terms are never reused, whatever rows of leases or history were deleted
 * or truncated.  Two further rules keep that true when the counter and the
 * rows travel separately:
 *
 *	  Eras.  The counter's value crosses servers with the data (WAL, dump,
 *	  pg_upgrade), but a standby's copy may lag its primary's: commits that
 *	  never arrived.  So when a grant finds itself on another server or
 *	  timeline than the one recorded in leader_election.term_era, the counter
 *	  first jumps to a later 2^32 era than the recorded one.  The old server
 *	  stays within that era (it would need 2^32 grants to leave it: it jumps
 *	  only when it finds itself elsewhere, or when a row arriving without
 *	  the counter carries it further, below), so the new one is above every
 *	  term it could have issued.  That needs the record to show every era a
 *	  committed term is in: each transaction that draws a term of an era it
 *	  does not see recorded (the first grants on a new server, a grant the
 *	  counter carried further) inserts the era's row itself, committed or
 *	  rolled back with the term; a backend forgets an era whose row it
 *	  wrote in a (sub)transaction that aborted.  How much later: on the
 *	  recorded cluster (same system identifier), one era per timeline since
 *	  the recorded one (at least one); on another cluster (a restore, an
 *	  upgrade), as many eras as this timeline's number, since that cluster
 *	  began at timeline 1.  Servers promoted in between whose era rows
 *	  never reached this one (a cascaded standby promoted after the standby
 *	  it followed, a restored backup, a standby cloned from a restored
 *	  cluster before its first grant) were on timelines between the two,
 *	  each at most one era per timeline above the base, so this one is
 *	  above them all.
 *	  Each backend remembers the era it checked for its (server, timeline)
 *	  and looks again when either changes.
 *
 *	  Rows without the counter.  Rows can arrive without it (logical
 *	  replication of the tables, a restore of some tables only), so a term
 *	  is also above the name's row and its history; the counter then moves
 *	  up to it.  (Such a move can cross into a later era, recorded by the
 *	  grants that draw from it; a standby that had not received them when
 *	  promoted jumps only one era above what it has: documented.)
 *
 * The counter only moves forward, one mover at a time (lease_store.c), and
 * no grant waits for another's transaction to make a move.
 * What can still move it back is documented (README): setval, RESTART, a
 * data-only restore of an older dump into the same database, two copies of
 * one data directory running as primaries.
 *
 * Before ALTER EXTENSION UPDATE, with the 1.0 objects, terms are what 1.0
 * made them: old + 1, at least (timeline - 1) * 2^32 + 1.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xlog.h"
#include "commands/dbcommands.h"
#include "funcapi.h"
#include "miscadmin.h"

#include "compat.h"
#include "leader_election.h"

/*
 * The era this backend has checked, if any: known means term_era's latest
 * rows name (le_era_sysid, le_era_tli) as committed or written by this
 * transaction, for the counter le_era_counter (a re-created extension is a
 * new counter, whatever a restore put in it); le_era_base is the first term
 * of that era.  A row this backend wrote counts only while the
 * (sub)transaction that wrote it can still commit: le_era_written_level is
 * the deepest level that wrote one (0: none pending), and an abort at or
 * above it forgets the era.
 */
static bool le_era_known = false;
static Oid	le_era_counter;			/* leader_election.terms it is about */
static uint64 le_era_sysid;
static TimeLineID le_era_tli;
static int64 le_era_base;
static int	le_era_written_level = 0;

static bool
le_era_is_known(uint64 sysid, TimeLineID tli)
{
	return le_era_known && le_era_sysid == sysid && le_era_tli == tli &&
		le_era_counter == le_store_terms_relid();
}

static void
le_era_record(uint64 sysid, TimeLineID tli, int64 first_term)
{
	le_store_record_term_era(sysid, tli, first_term);
	le_era_base = first_term;
	le_era_written_level = Max(le_era_written_level, GetCurrentTransactionNestLevel());
}

/*
 * Make sure the counter is in an era of this server and timeline, past the
 * recorded one: by one era per timeline since the recorded one on the same
 * cluster (at least one), or by this timeline's number if the record is
 * another cluster's, or the counter was set back below it (a restored or
 * upgraded cluster, whose history starts at timeline 1).
 * Grants that race here (all of a failover's first grants) read the same
 * committed record and compute the same target, so the counter jumps once;
 * each records the era with its own row, so none waits for another
 * (lease_store.c).
 */
static void
le_enter_era(uint64 sysid, TimeLineID tli)
{
	int64		first_term;
	bool		foreign;
	TimeLineID	rec_tli;
	bool		same;

	/* Until the era is settled below (an error on the way forgets it). */
	le_era_known = false;
	same = le_store_term_era_read(sysid, tli, &first_term, &foreign, &rec_tli);
	le_era_sysid = sysid;
	le_era_tli = tli;
	le_era_counter = le_store_terms_relid();
	if (same)
	{
		le_era_known = true;
		le_era_base = first_term;
		return;
	}
	else
	{
		int64		step;
		int64		era;

		if (foreign)
			step = (int64) tli; /* another cluster's record: ours began at 1 */
		else
			step = tli > rec_tli ? (int64) (tli - rec_tli) : 1;
		era = (first_term >> 32) + step;

		if (era >= (INT64CONST(1) << 31))
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("the term counter has no era left")));
		le_store_advance_terms(era << 32);
		le_era_record(sysid, tli, era << 32);
		le_era_known = true;
		ereport(LOG,
				(errmsg("leader_election: terms in database \"%s\" move to a new era on timeline %u",
						get_database_name(MyDatabaseId), tli),
				 errdetail("The term counter was last used on another server or timeline; new terms start above every term it could have issued.")));
	}
}

/*
 * Check the era now, only reading (a waiter does it before it sleeps, so
 * that its takeover need not): if term_era already names this server and
 * timeline, the era is known; otherwise the first grant moves it, as ever.
 */
void
le_terms_prepare(void)
{
	uint64		sysid = GetSystemIdentifier();
	TimeLineID	tli = le_current_timeline();
	int64		first_term;

	if (le_store_schema_1_0() || le_era_is_known(sysid, tli))
		return;
	if (le_store_term_era_read(sysid, tli, &first_term, NULL, NULL))
	{
		le_era_known = true;
		le_era_sysid = sysid;
		le_era_tli = tli;
		le_era_counter = le_store_terms_relid();
		le_era_base = first_term;
	}
}

/* The next term for `name`, whose row has term old_term (0: no row). */
int64
le_next_term(const char *name, int64 old_term)
{
	uint64		sysid = GetSystemIdentifier();
	TimeLineID	tli = le_current_timeline();
	int64		floor;
	int64		term;

	if (old_term == PG_INT64_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("lease \"%s\" has used every term", name)));
	floor = old_term + 1;

	if (le_store_schema_1_0())
		return Max(floor, (((int64) tli - 1) << 32) + 1);

	if (!le_era_is_known(sysid, tli))
		le_enter_era(sysid, tli);
	term = le_store_terms_next();

	{
		int64		history = le_store_history_max_term(name);

		if (history == PG_INT64_MAX)
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("lease \"%s\" has used every term", name)));
		floor = Max(floor, history + 1);
	}
	if (term < floor)
	{
		le_store_advance_terms(floor);
		term = le_store_terms_next();
		if (term < floor)		/* the counter is plain (lease_store.c) */
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("the term counter leader_election.terms did not move past term " INT64_FORMAT " of lease \"%s\"",
							floor - 1, name)));
	}

	/*
	 * A term in a later era than the recorded one (the counter followed a
	 * row that arrived without it): record that era with this grant, so
	 * that no term is committed in an era term_era does not show.
	 */
	if ((term >> 32) > (le_era_base >> 32))
		le_era_record(sysid, tli, (term >> 32) << 32);
	return term;
}

/* An aborted (sub)transaction takes the era rows it wrote with it. */
static void
le_terms_xact_callback(XactEvent event, void *arg)
{
	/* (A prepared transaction may still be rolled back: forget it too.) */
	if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT ||
		event == XACT_EVENT_PREPARE)
	{
		if (le_era_written_level > 0)
			le_era_known = false;
		le_era_written_level = 0;
	}
	else if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT)
		le_era_written_level = 0;
}

static void
le_terms_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
						  SubTransactionId parentSubid, void *arg)
{
	int			level = GetCurrentTransactionNestLevel();

	if (le_era_written_level == 0 || le_era_written_level < level)
		return;
	if (event == SUBXACT_EVENT_ABORT_SUB)
	{
		le_era_known = false;
		le_era_written_level = level - 1;	/* an outer level may have written */
	}
	else if (event == SUBXACT_EVENT_COMMIT_SUB)
		le_era_written_level = level - 1;
}

void
le_terms_register_callbacks(void)
{
	RegisterXactCallback(le_terms_xact_callback, NULL);
	RegisterSubXactCallback(le_terms_subxact_callback, NULL);
}

/*
 * leader_election.server_identity(): this server's system identifier and
 * the timeline it is on (the values term_era records).
 */
PG_FUNCTION_INFO_V1(le_server_identity);
Datum
le_server_identity(PG_FUNCTION_ARGS)
{
	TupleDesc	desc;
	Datum		values[2];
	bool		nulls[2] = {false, false};

	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "server_identity must return a composite type");
	values[0] = Int64GetDatum((int64) GetSystemIdentifier());
	values[1] = Int32GetDatum((int32) le_server_timeline());
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc),
													  values, nulls)));
}
