/*-------------------------------------------------------------------------
 *
 * commit_rules.c
 *	  What a transaction that changed a lease must satisfy when it commits.
 *
 * A lease decision takes effect at COMMIT (I4 in lease.c), so the rules that
 * make "it returned true" mean something are enforced here, at PRE_COMMIT:
 *
 * R1  Durable, whatever the session says.  A transaction that granted,
 *     renewed or released a lease commits with synchronous_commit at least
 *     'on' (its commit record flushed to the local WAL and, when
 *     synchronous_standby_names is set, confirmed flushed by the synchronous
 *     standbys), or at the session's default level if that is stronger
 *     (remote_apply).  SET, SET LOCAL, or a role's or database's setting
 *     cannot lower it: otherwise a crash could bring back an older row and
 *     hand out a term twice, or forget a renewal a holder was told about.
 *     The raised level is SET LOCAL, so it ends with the transaction.
 *
 * R2  Not already over.  If a grant or renewal made in the transaction has
 *     expired by the time the transaction starts to commit (it ran longer
 *     than its ttl), COMMIT fails with LE001 and nothing of the transaction
 *     survives: "true" never reaches a caller for a lease that is already
 *     gone at commit.  Only the transaction's last write of each name
 *     counts: a short grant renewed or released later in it is fine.  (The ttl runs from the call; a commit that then waits
 *     for synchronous standbys can still return after expires_at.)
 *
 * R3  Reservations run from the commit.  A hand-over's or move's reservation
 *     (handover.c) is written as the call's instant + ttl; at PRE_COMMIT it
 *     is moved to the PRE_COMMIT instant + ttl, so a transaction that
 *     commits long after the call still leaves the successor (or everyone
 *     but the moved holder) one whole ttl.  A reservation that a later one of the same
 *     name in the transaction replaced is not matched any more (the update
 *     is keyed on the ended term and instant).
 *
 * Writes rolled back with a savepoint no longer count.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "nodes/pg_list.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "leader_election.h"

/* One lease written by this transaction (in TopTransactionContext). */
typedef struct LeCommitWrite
{
	int			nest_level;		/* (sub)transaction that wrote it */
	TimestampTz expires_at;		/* 0 for a release */
	/* A release that reserved the lease (R3); else reserved_ttl is -1. */
	int64		reserved_ttl;
	int64		reserved_term;
	TimestampTz reserved_ended_at;
	char		name[FLEXIBLE_ARRAY_MEMBER];
} LeCommitWrite;

static List *le_commit_writes = NIL;

static LeCommitWrite *
le_commit_note(const char *name, TimestampTz expires_at)
{
	MemoryContext old = MemoryContextSwitchTo(TopTransactionContext);
	LeCommitWrite *w = palloc(offsetof(LeCommitWrite, name) + strlen(name) + 1);

	w->nest_level = GetCurrentTransactionNestLevel();
	w->expires_at = expires_at;
	w->reserved_ttl = -1;
	strcpy(w->name, name);
	le_commit_writes = lappend(le_commit_writes, w);
	MemoryContextSwitchTo(old);
	return w;
}

/* This transaction wrote the lease `name`, valid until expires_at (0: released). */
void
le_commit_note_write(const char *name, TimestampTz expires_at)
{
	(void) le_commit_note(name, expires_at);
}

/*
 * This transaction released `name`, ending term `term` at ended_at, and
 * reserved it for ttl (R3).
 */
void
le_commit_note_reservation(const char *name, int64 term, TimestampTz ended_at,
						   int64 ttl)
{
	LeCommitWrite *w = le_commit_note(name, 0);

	w->reserved_ttl = ttl;
	w->reserved_term = term;
	w->reserved_ended_at = ended_at;
}

/* R3 */
static void
le_commit_restamp_reservations(void)
{
	ListCell   *lc;

	foreach(lc, le_commit_writes)
	{
		LeCommitWrite *w = lfirst(lc);

		if (w->reserved_ttl >= 0)
			le_store_restamp_handover(w->name, w->reserved_term,
									  w->reserved_ended_at,
									  GetCurrentTimestamp() + w->reserved_ttl);
	}
}

/* synchronous_commit levels in order of strength, as the server names them. */
static int
le_sync_level(const char *value)
{
	static const char *const names[] = {
		"off", "local", "remote_write", "on", "remote_apply"
	};

	if (value == NULL)
		return 0;
	for (int i = 0; i < lengthof(names); i++)
		if (pg_strcasecmp(value, names[i]) == 0)
			return i;
	if (pg_strcasecmp(value, "remote_flush") == 0 ||
		pg_strcasecmp(value, "true") == 0 || pg_strcasecmp(value, "yes") == 0 ||
		pg_strcasecmp(value, "1") == 0)
		return 3;
	return 0;
}

/* R1 */
static void
le_commit_durably(void)
{
	static const char *const names[] = {
		"off", "local", "remote_write", "on", "remote_apply"
	};
	int			current = le_sync_level(GetConfigOption("synchronous_commit", false, false));
	int			wanted = Max(3, le_sync_level(GetConfigOptionResetString("synchronous_commit")));

	if (current < wanted)
		(void) set_config_option("synchronous_commit", names[wanted],
								 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_LOCAL,
								 true, 0, false);
}

/* Did a later write of the transaction (still standing) replace w's? */
static bool
le_commit_superseded(int index, const LeCommitWrite *w)
{
	for (int j = index + 1; j < list_length(le_commit_writes); j++)
		if (strcmp(((LeCommitWrite *) list_nth(le_commit_writes, j))->name,
				   w->name) == 0)
			return true;
	return false;
}

/* R2: only each name's last write counts (a renewal or release after it). */
static void
le_commit_check_expiry(void)
{
	TimestampTz now = GetCurrentTimestamp();
	ListCell   *lc;

	foreach(lc, le_commit_writes)
	{
		LeCommitWrite *w = lfirst(lc);

		if (w->expires_at != 0 && w->expires_at <= now &&
			!le_commit_superseded(foreach_current_index(lc), w))
			ereport(ERROR,
					(errcode(ERRCODE_LE_NOT_LEADER),
					 errmsg("lease \"%s\" expired before its transaction committed", w->name),
					 errdetail("The lease was granted or renewed until %s; the transaction began to commit %.3f s later.",
							   pstrdup(timestamptz_to_str(w->expires_at)),
							   (double) (now - w->expires_at) / USECS_PER_SEC),
					 errhint("Commit sooner after try_acquire_leader, or use a longer ttl.")));
	}
}

static void
le_commit_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
			if (le_commit_writes != NIL)
			{
				le_commit_check_expiry();
				le_commit_durably();
				le_commit_restamp_reservations();
			}
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PREPARE:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_PARALLEL_ABORT:
			le_commit_writes = NIL; /* freed with TopTransactionContext */
			break;
		default:
			break;
	}
}

static void
le_commit_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
						   SubTransactionId parentSubid, void *arg)
{
	int			level = GetCurrentTransactionNestLevel();
	ListCell   *lc;

	foreach(lc, le_commit_writes)
	{
		LeCommitWrite *w = lfirst(lc);

		if (w->nest_level < level)
			continue;
		if (event == SUBXACT_EVENT_ABORT_SUB)
			le_commit_writes = foreach_delete_current(le_commit_writes, lc);
		else if (event == SUBXACT_EVENT_COMMIT_SUB)
			w->nest_level = level - 1;
	}
}

void
le_commit_register_callbacks(void)
{
	RegisterXactCallback(le_commit_xact_callback, NULL);
	RegisterSubXactCallback(le_commit_subxact_callback, NULL);
}
