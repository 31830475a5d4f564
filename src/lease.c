/*-------------------------------------------------------------------------
 *
 * lease.c
 *	  The lease protocol and the SQL functions that expose it.
 *
 * THE INVARIANTS (tests point here; the README repeats them in prose)
 *
 * I1  At most one holder per (name, term).  Every write of a lease row is
 *     made by a transaction holding the name's writer lock: a transaction-
 *     level advisory lock in our own key space (LE_LOCKTAG_WRITER), kept
 *     until commit or abort once something was written.  After taking it the
 *     row is read again with a fresh snapshot, so the decision is made on the
 *     latest committed state; a takeover decides once more on the version
 *     its row lock covers.
 *
 * I2  Terms strictly increase per name and are never reused in a database.
 *     Every new term is the next value of one counter per database
 *     (leader_election.terms), so deleting or truncating rows of leases or
 *     history cannot bring an old term back; on another server or timeline
 *     than the counter was last used on (a promoted standby, a restored or
 *     upgraded cluster) the counter first jumps to a new 2^32 era above
 *     every term the old server could have issued (terms.c).  Renewals
 *     keep the term; release keeps the row and the term.  Only DROP
 *     EXTENSION starts terms again.
 *
 * I3  A lease is valid iff it has a holder, the server's clock at the moment
 *     of the call is before expires_at, and, if session-bound, the holder's
 *     session incarnation is alive (identity.c: once void, always void).
 *     Only an invalid lease changes holder.
 *
 * I4  Commit is the linearisation point.  Everything is written in the
 *     caller's transaction; rollback (or rollback to a savepoint) voids it.
 *     PREPARE TRANSACTION of a transaction that wrote or fenced a lease is
 *     refused (wakeup.c), so no lease decision can outlive its session.  A
 *     transaction that wrote a lease commits durably whatever the session's
 *     synchronous_commit, and cannot commit a grant that has already expired
 *     (commit_rules.c).
 *
 * I5  Answers are never stale.  An answer that writes nothing (am_leader,
 *     leader_term, current_leader, the first look of try_acquire_leader and
 *     release_leader) is the latest committed state at an instant inside the
 *     call, whatever the isolation level and however long the calling
 *     statement has run: from the lease cache (lease_cache.c, C1) when it is
 *     usable (preloaded, READ COMMITTED, nothing written in this transaction
 *     yet), else from the table with a fresh snapshot.  Every decision to
 *     write is made on the state committed at that instant, under the
 *     writer lock (lease_store.c).  Writes that would act on a row changed
 *     after a REPEATABLE READ or SERIALIZABLE snapshot fail with 40001
 *     rather than return a stale true.
 *
 * I6  Fencing: assert_leader locks the row FOR KEY SHARE after checking the
 *     caller holds a valid lease.  A takeover must lock the row FOR UPDATE,
 *     which conflicts, so no other holder is elected until the fenced
 *     transaction ends.  Renewals and releases (FOR NO KEY UPDATE) do not
 *     conflict with a fence: the holder's own fenced work never blocks its
 *     renewals.
 *
 * I7  A losing try never waits: an answer of "no" (a valid lease held by
 *     someone else) takes no lock and writes nothing.  Waits happen only
 *     where the caller has a claim: release_leader, set_leader_info,
 *     move_leader and the valid holder's renewal wait for the name's writer
 *     lock (held by a sibling renewing under the same holder, or by a
 *     candidate for an instant), so does a waiting successor the lease is
 *     reserved for (I9) while other waiters are ranked with it (I10), and a
 *     role's first uses of new names take turns while max_names_per_role is
 *     set.  A takeover that loses after locking the row (it found the row
 *     changed by hand under the lock) gives the row lock back: it runs in a
 *     subtransaction rolled back when it loses.
 *
 * I8  A name belongs to the role that first used it (a first acquisition,
 *     register_task's claim, or assign_name); other roles (unless
 *     members of it, or superusers) get 42501 on every function, before
 *     it takes any lock; and no name a role chooses can share another
 *     name's writer lock except by chance (a keyed hash, le_writer_locktag).
 *
 * I9  A hand-over or a move ends the term like a release (holder NULL,
 *     same term, history end reason released or moved) and, in the same
 *     transaction under the writer lock, reserves the lease (handover.c):
 *     while the lease is still in that term, without holder, and before
 *     reserved_until (one ttl of the ended lease from the commit that
 *     ended it, handover.c), only the successor may take it, or, after a
 *     move without successor, anyone but the moved holder.  Every takeover
 *     of a holderless lease checks the reservation under the writer lock,
 *     on the state committed at that instant, so a barred try answers false
 *     (having held the writer lock for an instant, without waiting: the one
 *     exception to I7's "no lock").  A move is a change of holder like any other: from its
 *     commit on, I3 and I5 make the moved holder's am_leader false and
 *     assert_leader raise LE001, and I9 makes its next try false.
 *
 * I10 Among the sessions blocked in wait_for_leadership for a name, one
 *     that another outranks (higher priority, or equal priority and
 *     registered earlier: waiters.c) never takes a free lease: it steps
 *     aside before taking any lock, unless the lease is reserved for it
 *     (I9 comes first).  Only waiters take part: try_acquire_leader and the
 *     task runner do not wait and are not ranked.  Without preloading there
 *     is no shared memory, so no ranking either.
 *
 * I11 Info (set_leader_info) belongs to one term: it is stored with the
 *     term it was set in and shown only while the lease has that term and
 *     a holder, so every change of holder (a new term, a release, a move)
 *     clears it.  Only the valid holder sets it, under the writer lock.
 *
 * Every change of leader (a grant, a release, a hand-over, a move) and every
 * set_leader_info is announced on channel leader_election once its
 * transaction commits, per name in term order (le_notify, notify_queue.c:
 * N1, N2); the changing transaction itself does not NOTIFY when the library
 * is preloaded.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "funcapi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "leader_election.h"

PG_FUNCTION_INFO_V1(try_acquire_leader);
PG_FUNCTION_INFO_V1(move_leader);
PG_FUNCTION_INFO_V1(am_leader);
PG_FUNCTION_INFO_V1(release_leader);
PG_FUNCTION_INFO_V1(wait_for_leadership);
PG_FUNCTION_INFO_V1(leader_term);
PG_FUNCTION_INFO_V1(assert_leader);
PG_FUNCTION_INFO_V1(current_leader);
PG_FUNCTION_INFO_V1(le_lease_is_valid);

/* ---- building blocks ---- */

/*
 * The writer lock of a name: (database, SipHash-2-4 of the name under the
 * database's secret lock key, lease_store.c, folded to 16 bytes;
 * keyed_hash.c).  A role that can choose names but cannot read the key
 * cannot choose one whose lock collides with another role's name (an
 * unkeyed hash such as lookup3 can be inverted in milliseconds), so it
 * cannot block that name's writers.
 */
static void
le_writer_locktag(LOCKTAG *tag, const char *name)
{
	static bool self_tested = false;
	uint8		key[LE_LOCK_KEY_BYTES];
	uint8		folded[LE_LOCK_KEY_BYTES / 2];
	uint64		h;

	if (!self_tested)
	{
		if (!le_keyed_hash_self_test())
			elog(ERROR, "the keyed hash of writer locks fails its test vector");
		self_tested = true;
	}
	le_store_lock_key(key);
	for (int i = 0; i < LE_LOCK_KEY_BYTES / 2; i++)
		folded[i] = key[i] ^ key[i + LE_LOCK_KEY_BYTES / 2];
	h = le_keyed_hash64(folded, (const uint8 *) name, strlen(name));
	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, (uint32) (h >> 32), (uint32) h,
						 LE_LOCKTAG_WRITER);
}

/*
 * Take the writer lock.  Without waiting unless wait is true; a collision
 * between two names only makes them take turns, it never lets two writers
 * of one name in at once.
 */
static bool
le_lock_writer(const char *name, bool wait)
{
	LOCKTAG		tag;

	le_writer_locktag(&tag, name);
	if (LockAcquire(&tag, ExclusiveLock, false, !wait) == LOCKACQUIRE_NOT_AVAIL)
		return false;
	le_xact_took_writer(name);
	return true;
}

/*
 * The writer lock of a name, waiting for it, for writes made other than by
 * the functions of this file (name_admin.c): held to the end of the
 * transaction, so a concurrent try answers false instead of racing them.
 */
void
le_lock_name_writer(const char *name)
{
	(void) le_lock_writer(name, true);
}

/* Does this transaction hold the name's writer lock? */
bool
le_holds_name_writer(const char *name)
{
	LOCKTAG		tag;

	le_writer_locktag(&tag, name);
	return le_lock_held_by_me(&tag, ExclusiveLock);
}

/*
 * Give the writer lock back when this call wrote nothing.  If an earlier
 * call in this transaction wrote, the lock count keeps it held.
 */
static void
le_unlock_writer(const char *name)
{
	LOCKTAG		tag;

	le_writer_locktag(&tag, name);
	LockRelease(&tag, ExclusiveLock, false);
	le_writer_given_back(name);
}

/*
 * A role's first uses of new names take turns, so that
 * leader_election.max_names_per_role counts names that are committed: held
 * (with waiting) until the end of the transaction, after the name's writer
 * lock, so there is one lock order.
 */
static void
le_lock_role_names(Oid role)
{
	LOCKTAG		tag;

	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, (uint32) role, 0,
						 LE_LOCKTAG_ROLE_NAMES);
	(void) LockAcquire(&tag, ExclusiveLock, false, false);
}

/*
 * A new name for the current role: refused (53400) once the role has
 * max_names_per_role names.  Called with the name's writer lock held.
 */
static void
le_check_names_quota(void)
{
	if (le_max_names_per_role <= 0)
		return;
	le_lock_role_names(GetUserId());
	if (le_store_count_names(GetUserId()) >= le_max_names_per_role)
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("role \"%s\" already uses %d lease names",
						GetUserNameFromId(GetUserId(), false),
						le_max_names_per_role),
				 errhint("Reuse a name, or raise leader_election.max_names_per_role.")));
}

/* I3 */
bool
le_lease_valid(const LeaseRow *row, TimestampTz now)
{
	if (!row->found || row->holder == NULL || row->expires_at <= now)
		return false;
	if (row->session_pid != 0)
		return le_session_alive(row->holder, row->session_pid, row->session_start);
	return true;
}

static bool
le_is_mine(const LeaseRow *row, const LeIdentity *who)
{
	return row->found && row->holder != NULL &&
		strcmp(row->holder, who->holder) == 0;
}

/* Does `who` validly hold the lease `row` shows (I3)? */
bool
le_holds_valid_lease(const LeaseRow *row, const LeIdentity *who,
					 TimestampTz now)
{
	return le_is_mine(row, who) && le_lease_valid(row, now);
}

/* I8 */
void
le_check_owner(const char *name, const LeaseRow *row)
{
	Oid			me = GetUserId();

	if (!row->found || row->owner == me || has_privs_of_role(me, row->owner))
		return;
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("permission denied for lease \"%s\"", name),
			 errdetail("The lease name belongs to another role.")));
}

/*
 * Make name the current role's without taking its lease (register_task
 * claims its task's name this way, so that no other role can take the name
 * between registration and the first run): 42501 if another role owns it
 * (I8), 53400 if it is new and the role has max_names_per_role names.  A
 * name the role (or a role it has the privileges of) owns stays as it is.
 */
void
le_claim_name(const char *name)
{
	LeaseRow	row;

	(void) le_lock_writer(name, true);
	/* Held to the end, like every writer lock: no PREPARE (wakeup.c, I4). */
	le_xact_touched(name);
	le_store_read(name, &row);
	le_check_owner(name, &row);
	if (!row.found)
	{
		le_check_names_quota();
		le_store_reserve(name);
	}
}

/* Write functions refuse read-only transactions and hot standbys (25006). */
static void
le_prevent_if_read_only(const char *function)
{
	PreventCommandDuringRecovery(function);
	PreventCommandIfReadOnly(function);
}

static int64
le_checked_ttl(FunctionCallInfo fcinfo, int argno)
{
	return le_checked_interval(fcinfo, argno, "ttl", LE_MIN_TTL_USECS,
							   LE_MAX_TTL_USECS,
							   "100 milliseconds and 7 days");
}

/* How the term in *row ended, if a new holder takes it over now. */
static LeEndReason
le_end_reason(const LeaseRow *row, TimestampTz now, TimestampTz *ended_at)
{
	if (row->session_pid != 0 && row->expires_at > now)
	{
		*ended_at = now;
		return LE_END_SESSION_ENDED;
	}
	*ended_at = row->expires_at;
	return LE_END_EXPIRED;
}

static const char *const le_end_reason_names[] = {
	[LE_END_RELEASED] = "released",
	[LE_END_EXPIRED] = "expired",
	[LE_END_SESSION_ENDED] = "session_ended",
	[LE_END_MOVED] = "moved",
};

/* Bookkeeping after this transaction took or renewed a lease. */
static void
le_after_grant(const char *name, const LeIdentity *who, TimestampTz expires)
{
	le_xact_touched(name);
	le_commit_note_write(name, expires);
	if (who->session_bound)
	{
		le_hold_session_liveness_lock();
		le_wake_on_session_exit(name);
	}
}

static bool le_take_over_keeping_no_lock_on_loss(const char *name,
												 int64 ttl_usecs,
												 const LeIdentity *who,
												 const LeaseRow *row,
												 const LeHandover *handover,
												 bool loss_rolled_back);

/*
 * The whole of try_acquire_leader, also the step wait_for_leadership
 * repeats.  Returns true if the caller holds the lease when its transaction
 * commits.  On false, *retry_at says when trying again could succeed: the
 * current lease's expiry, or 0 if the lease is busy with another writer or
 * a fenced transaction (whose end wakes waiters, wakeup.c).
 * loss_rolled_back: the caller rolls back the subtransaction it runs this
 * in when the answer is false (a wait_for_leadership attempt).
 */
static bool
le_try_acquire_from(const char *name, int64 ttl_usecs, const LeIdentity *who,
					TimestampTz *retry_at, bool loss_rolled_back)
{
	LeaseRow	row;
	TimestampTz now = GetCurrentTimestamp();
	int64		term;
	bool		renewing;
	bool		claim;
	LeHandover	handover;
	LeReservation reservation;

	*retry_at = 0;

	/* The cheap look, without any lock: "no" ends here (I7). */
	le_store_read_for_answer(name, &row);
	le_check_owner(name, &row);
	renewing = le_is_mine(&row, who) && le_lease_valid(&row, now);
	if (!le_is_mine(&row, who) && le_lease_valid(&row, now))
	{
		*retry_at = row.expires_at;
		return false;
	}

	/*
	 * A waiter another waiter outranks steps aside before taking any lock
	 * (I10), unless the lease is reserved for it (I9 comes first).
	 */
	claim = renewing;
	if (!le_is_mine(&row, who) && le_waiter_outranked(name, NULL))
	{
		reservation = le_handover_check(name, &row, who, now, &handover);
		if (reservation == LE_RESERVATION_FOR_ME)
			claim = true;		/* the successor has a claim, as a holder has */
		else if (reservation == LE_RESERVATION_BARS_ME ||
				 le_waiter_outranked(name, le_handover_barred_holder(&handover, now)))
			return false;
	}

	/*
	 * Something to write: take the writer lock (I1).  The valid holder waits
	 * for it (I7): whoever else has it is a candidate looking for an instant
	 * or a sibling renewing under the same holder, and answering "no" to a
	 * valid holder would make it step down for nothing.  A candidate that
	 * finds it busy is woken when it is given back (wakeup.c), whether by a
	 * try that wrote nothing or at the end of a transaction.
	 */
	if (!claim)
		le_writer_try_begin(name);
	if (!le_lock_writer(name, claim))
		return false;
	le_writer_try_end();
	now = GetCurrentTimestamp();

	/*
	 * A renewal needs no second look: its UPDATE is guarded by holder and
	 * term, so it fails if anything changed since the first look, and then
	 * the decision below is made again on the latest state.
	 */
	if (le_is_mine(&row, who) && le_store_renew(name, &row, now, now + ttl_usecs))
	{
		le_stats_count(LE_STAT_RENEWALS);
		le_after_grant(name, who, now + ttl_usecs);
		return true;
	}

	/*
	 * The second look, under the writer lock.  From the lease cache when it
	 * answers: an entry it accepts is the latest committed row (C1,
	 * lease_cache.c), as a fresh snapshot of the table would show it; the
	 * first look's miss has usually just filled it.
	 */
	le_store_read_for_answer(name, &row);
	le_check_owner(name, &row);

	if (!row.found)
	{
		le_check_names_quota();
		term = le_next_term(name, 0);
		/* The row and the term's history row (le_history_begin's). */
		le_store_insert(name, who, term, now, now + ttl_usecs);
		le_notify(name, "elected", who->holder, term, "none", NULL, NULL);
		le_stats_count(LE_STAT_GRANTS);
		le_after_grant(name, who, now + ttl_usecs);
		return true;
	}

	if (le_is_mine(&row, who))
	{
		if (!le_store_renew(name, &row, now, now + ttl_usecs))
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("lease \"%s\" changed under its writer lock", name),
					 errdetail("The row was changed other than through leader_election's functions."),
					 errhint("Retry the transaction.")));
		le_stats_count(LE_STAT_RENEWALS);
		le_after_grant(name, who, now + ttl_usecs);
		return true;
	}

	if (le_lease_valid(&row, now))
	{
		le_unlock_writer(name);
		*retry_at = row.expires_at;
		return false;
	}

	/* Free, but perhaps reserved by a hand-over or a move (I9)... */
	reservation = le_handover_check(name, &row, who, now, &handover);
	if (reservation == LE_RESERVATION_BARS_ME)
	{
		le_unlock_writer(name);
		*retry_at = handover.reserved_until;
		return false;
	}
	/* ... or wanted by a waiter that outranks this one (I10). */
	if (reservation == LE_RESERVATION_NONE &&
		le_waiter_outranked(name, le_handover_barred_holder(&handover, now)))
	{
		le_unlock_writer(name);
		return false;
	}

	/* Free: take it over unless a fenced transaction still holds it (I6). */
	if (!le_take_over_keeping_no_lock_on_loss(name, ttl_usecs, who, &row,
											  &handover, loss_rolled_back))
	{
		le_unlock_writer(name);
		return false;
	}
	return true;
}

/*
 * The takeover of a lease le_try_acquire_from found free (`row`), under the
 * name's writer lock: lock the row FOR UPDATE without waiting, decide again
 * on the version the lock covers (`locked`: a change made without the
 * writer lock, a superuser's UPDATE, may have landed between the read and
 * the lock), draw the term and write.  False if the row is busy or changed;
 * the row lock may then be held (le_take_over_keeping_no_lock_on_loss).
 */
static bool
le_take_over(const char *name, int64 ttl_usecs, const LeIdentity *who,
			 const LeaseRow *row, const LeHandover *handover)
{
	LeaseRow	locked;
	TimestampTz now;
	TimestampTz ended_at;
	LeEndReason reason;
	int64		term;

	if (le_store_lock_row(name, true, &locked) != LE_ROW_LOCKED)
		return false;
	now = GetCurrentTimestamp();
	if (!locked.found || locked.term != row->term || locked.owner != row->owner ||
		le_is_mine(&locked, who) || le_lease_valid(&locked, now))
		return false;

	term = le_next_term(name, locked.term);
	if (locked.holder != NULL)
		reason = le_end_reason(&locked, now, &ended_at);
	else
	{
		reason = handover->moved ? LE_END_MOVED : LE_END_RELEASED;
		ended_at = now;
	}
	/* The old term's history end (if it had a holder), row, new history row. */
	le_store_take_over_with_history(name, who, locked.owner, locked.term, term,
									now, now + ttl_usecs,
									locked.holder != NULL, ended_at, reason);
	/* Term 0 was never held (a name reserved by assign_name or register_task). */
	le_notify(name, "elected", who->holder, term,
			  locked.term == 0 ? "none" : le_end_reason_names[reason], NULL, NULL);
	le_stats_count(LE_STAT_GRANTS);
	if (locked.holder != NULL && reason == LE_END_EXPIRED)
		le_stats_count(LE_STAT_TAKEOVERS_EXPIRED);
	else if (locked.holder != NULL && reason == LE_END_SESSION_ENDED)
		le_stats_count(LE_STAT_TAKEOVERS_SESSION_ENDED);
	le_after_grant(name, who, now + ttl_usecs);
	return true;
}

/* le_try_acquire_from, counting a loss. */
static bool
le_try_acquire_counted(const char *name, int64 ttl_usecs, const LeIdentity *who,
					   TimestampTz *retry_at, bool loss_rolled_back)
{
	bool		won = le_try_acquire_from(name, ttl_usecs, who, retry_at,
										  loss_rolled_back);

	if (!won)
		le_stats_count(LE_STAT_LOSING_TRIES);
	return won;
}

/* The step the task runner and try_acquire_leader take. */
bool
le_try_acquire(const char *name, int64 ttl_usecs, const LeIdentity *who,
			   TimestampTz *retry_at)
{
	return le_try_acquire_counted(name, ttl_usecs, who, retry_at, false);
}

/*
 * Renew a lease `who` validly holds, only if its writer lock is free now:
 * false, having written nothing, if it is not held or the lock is taken.
 * For the task launcher, which renews every running task in turn and must
 * not wait for one role's open transaction (task_runner.h, "Locks"); while
 * the runner's lease is valid only a transaction of the owning role (or an
 * administrator's) can hold that lock, and the launcher tries again later.
 */
bool
le_renew_without_waiting(const char *name, int64 ttl_usecs, const LeIdentity *who)
{
	LeaseRow	row;
	TimestampTz now = GetCurrentTimestamp();

	le_store_read_for_answer(name, &row);
	le_check_owner(name, &row);
	if (!le_is_mine(&row, who) || !le_lease_valid(&row, now))
		return false;
	if (!le_lock_writer(name, false))
		return false;
	now = GetCurrentTimestamp();
	if (!le_store_renew(name, &row, now, now + ttl_usecs))
	{
		le_unlock_writer(name);
		return false;
	}
	le_stats_count(LE_STAT_RENEWALS);
	le_after_grant(name, who, now + ttl_usecs);
	return true;
}

/* One try_acquire_leader() call. */
bool
le_try_acquire_in_statement(const char *name, int64 ttl_usecs,
							const LeIdentity *who)
{
	TimestampTz retry_at;

	return le_try_acquire(name, ttl_usecs, who, &retry_at);
}

/* ---- SQL-callable functions ---- */

/* try_acquire_leader(name text, ttl interval, holder text) returns boolean */
Datum
try_acquire_leader(PG_FUNCTION_ARGS)
{
	char	   *name = le_checked_name(fcinfo, 0);
	int64		ttl = le_checked_ttl(fcinfo, 1);
	char	   *holder = le_checked_optional_holder(fcinfo, 2);
	LeIdentity	who;

	le_prevent_if_read_only("try_acquire_leader()");
	who = le_resolve_identity(holder);
	PG_RETURN_BOOL(le_try_acquire_in_statement(name, ttl, &who));
}

/*
 * The caller's valid lease on name, or NULL.  Read-only: works on a standby
 * from replicated state.
 */
static LeaseRow *
le_own_valid_lease(FunctionCallInfo fcinfo, int holder_argno)
{
	char	   *name = le_checked_name(fcinfo, 0);
	char	   *holder = le_checked_optional_holder(fcinfo, holder_argno);
	LeIdentity	who = le_resolve_identity(holder);
	LeaseRow   *row = palloc(sizeof(LeaseRow));

	le_store_read_for_answer(name, row);
	le_check_owner(name, row);
	if (le_is_mine(row, &who) && le_lease_valid(row, GetCurrentTimestamp()))
		return row;
	return NULL;
}

/* am_leader(name text, holder text) returns boolean */
Datum
am_leader(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(le_own_valid_lease(fcinfo, 1) != NULL);
}

/* leader_term(name text, holder text) returns bigint */
Datum
leader_term(PG_FUNCTION_ARGS)
{
	LeaseRow   *row = le_own_valid_lease(fcinfo, 1);

	if (row == NULL)
		PG_RETURN_NULL();
	PG_RETURN_INT64(row->term);
}

/*
 * End the term `row` shows (its holder's lease, valid or not), the caller
 * holding the writer lock: a release, a hand-over (a release with a
 * successor) or a move (I9).
 */
static void
le_end_term(const char *name, const LeaseRow *row, LeEndReason reason,
			const char *successor)
{
	TimestampTz now = GetCurrentTimestamp();
	bool		moved = reason == LE_END_MOVED;

	le_history_end(name, row->term, now, reason);
	le_store_release(name, row, now);
	if (successor != NULL || moved)
		le_handover_reserve(name, row, successor, moved, now);
	le_notify(name, moved ? "moved" : successor != NULL ? "handed_over" : "released",
			  row->holder, row->term, le_end_reason_names[reason], NULL,
			  successor);
	le_stats_count(moved ? LE_STAT_MOVES : LE_STAT_RELEASES);
	le_xact_touched(name);
	le_commit_note_write(name, 0);
}

/*
 * release_leader(name text, holder text, successor text) returns boolean
 * (1.0: without successor)
 */
Datum
release_leader(PG_FUNCTION_ARGS)
{
	char	   *name = le_checked_name(fcinfo, 0);
	char	   *holder = le_checked_optional_holder(fcinfo, 1);
	char	   *successor = le_checked_optional_successor(fcinfo, 2);
	LeIdentity	who;
	LeaseRow	row;

	le_prevent_if_read_only("release_leader()");
	who = le_resolve_identity(holder);
	if (successor != NULL && strcmp(successor, who.holder) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the successor of a hand-over must not be the releasing holder \"%s\"", who.holder),
				 errhint("Name another holder, or none.")));

	le_store_read_for_answer(name, &row);
	le_check_owner(name, &row);
	if (!le_is_mine(&row, &who))
		PG_RETURN_BOOL(false);

	(void) le_lock_writer(name, true);
	le_store_read(name, &row);
	if (!le_is_mine(&row, &who))
	{
		le_unlock_writer(name);
		PG_RETURN_BOOL(false);
	}
	le_end_term(name, &row, LE_END_RELEASED, successor);
	PG_RETURN_BOOL(true);
}

/*
 * leader_election.move_leader(name text, successor text) returns boolean
 *
 * I9.  The name's owner (a member of the owning role, or a superuser: I8)
 * ends whoever holds the lease, without its cooperation; false if nobody
 * holds it: no row, released, expired or its session ended.  Such a lease
 * is left as it is (its next holder records how it ended) and gets no
 * reservation.
 */
Datum
move_leader(PG_FUNCTION_ARGS)
{
	char	   *name = le_checked_name(fcinfo, 0);
	char	   *successor = le_checked_optional_successor(fcinfo, 1);
	LeaseRow	row;

	le_prevent_if_read_only("move_leader()");
	le_store_read(name, &row);
	le_check_owner(name, &row);
	if (!le_lease_valid(&row, GetCurrentTimestamp()))
		PG_RETURN_BOOL(false);

	(void) le_lock_writer(name, true);
	le_store_read(name, &row);
	le_check_owner(name, &row);
	if (!le_lease_valid(&row, GetCurrentTimestamp()))
	{
		le_unlock_writer(name);
		PG_RETURN_BOOL(false);
	}
	if (successor != NULL && strcmp(successor, row.holder) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the successor of a move must not be the current holder of \"%s\"", name),
				 errhint("Name another holder, or none.")));
	le_end_term(name, &row, LE_END_MOVED, successor);
	PG_RETURN_BOOL(true);
}

/*
 * The writer lock for set_leader_info (leader_info.c): waited for, as a
 * holder's release waits; given back with le_unlock_name_writer if nothing
 * was written.
 */
void
le_unlock_name_writer(const char *name)
{
	le_unlock_writer(name);
}

/*
 * Release name if who holds it in exactly this term, valid or not; true if
 * released.  For the task runner, whose workers share one holder identity:
 * a worker that stops must never end a later term of that identity (issue
 * 17).  Same steps as release_leader().
 */
bool
le_release_term(const char *name, const LeIdentity *who, int64 term)
{
	LeaseRow	row;
	TimestampTz now;

	le_store_read(name, &row);
	if (!le_is_mine(&row, who) || row.term != term)
		return false;
	(void) le_lock_writer(name, true);
	le_store_read(name, &row);
	if (!le_is_mine(&row, who) || row.term != term)
	{
		le_unlock_writer(name);
		return false;
	}
	now = GetCurrentTimestamp();
	le_history_end(name, row.term, now, LE_END_RELEASED);
	le_store_release(name, &row, now);
	le_notify(name, "released", who->holder, row.term, "released", NULL, NULL);
	le_stats_count(LE_STAT_RELEASES);
	le_xact_touched(name);
	return true;
}

/* Count a rejected assert_leader; it is about to raise LE001. */
static void
le_fence_rejected(void)
{
	le_stats_count(LE_STAT_FENCE_REJECTIONS);
}

/*
 * assert_leader(name text, term bigint, holder text) returns bigint
 *
 * I6.  Raises ERRCODE_LE_NOT_LEADER (LE001) unless the caller holds a valid
 * lease, with the given term if one is given.
 */
Datum
assert_leader(PG_FUNCTION_ARGS)
{
	char	   *name = le_checked_name(fcinfo, 0);
	bool		term_given = !PG_ARGISNULL(1);
	int64		term = term_given ? PG_GETARG_INT64(1) : 0;
	char	   *holder = le_checked_optional_holder(fcinfo, 2);
	LeIdentity	who;
	LeaseRow	row;
	LeRowLock	lock;

	le_prevent_if_read_only("assert_leader()");
	who = le_resolve_identity(holder);

	/* Another role's name: refused before anything is locked (I8). */
	le_store_read(name, &row);
	le_check_owner(name, &row);

	lock = le_store_lock_row(name, false, NULL);
	/* Decide on the latest version: the lock covers it (I5, I6). */
	le_store_read(name, &row);
	le_check_owner(name, &row);
	if (lock != LE_ROW_LOCKED)
	{
		le_fence_rejected();
		ereport(ERROR,
				(errcode(ERRCODE_LE_NOT_LEADER),
				 errmsg("not the leader of \"%s\"", name),
				 lock == LE_ROW_BUSY ?
				 errdetail("Another holder is taking the lease over.") :
				 errdetail("Nobody has held this lease yet.")));
	}
	if (!le_is_mine(&row, &who))
	{
		le_fence_rejected();
		ereport(ERROR,
				(errcode(ERRCODE_LE_NOT_LEADER),
				 errmsg("not the leader of \"%s\"", name),
				 errdetail("The lease is held by another holder, or by nobody.")));
	}
	if (!le_lease_valid(&row, GetCurrentTimestamp()))
	{
		le_fence_rejected();
		ereport(ERROR,
				(errcode(ERRCODE_LE_NOT_LEADER),
				 errmsg("not the leader of \"%s\"", name),
				 errdetail("The caller's lease has expired.")));
	}
	if (term_given && term != row.term)
	{
		le_fence_rejected();
		ereport(ERROR,
				(errcode(ERRCODE_LE_NOT_LEADER),
				 errmsg("not the leader of \"%s\" in term " INT64_FORMAT,
						name, term),
				 errdetail("The current term is " INT64_FORMAT ".", row.term)));
	}
	le_xact_touched(name);
	PG_RETURN_INT64(row.term);
}

/*
 * Do now, before a waiter first sleeps, the once-per-backend work its
 * takeover would otherwise do in the instant it wins: the writer lock's key
 * and the keyed hash's self-test, the term era, the takeover's plans and a
 * first run of its reads and of the term counter's (lease_store.c).  When a
 * session holding many leases ends, all their waiters wake at once on a few
 * cores, and that work was most of what each then did (bench/grants.sh,
 * storm).  Changes nothing.
 */
static void
le_prepare_takeover(const char *name)
{
	LOCKTAG		tag;

	/*
	 * Only the lock's tag: taking the lock itself would make a concurrent
	 * try find it busy, and an outranked waiter takes no lock (I10).
	 */
	le_writer_locktag(&tag, name);
	le_terms_prepare();
	le_store_prepare_takeover(name);
}

/*
 * In the PG_CATCH of an internal subtransaction begun in memory context
 * cxt under resource owner owner: roll it back, restore both, and raise
 * the error again (never returns).
 */
static void
le_rethrow_after_subxact(MemoryContext cxt, ResourceOwner owner)
{
	ErrorData  *edata;

	MemoryContextSwitchTo(cxt);
	edata = CopyErrorData();
	FlushErrorState();
	RollbackAndReleaseCurrentSubTransaction();
	MemoryContextSwitchTo(cxt);
	CurrentResourceOwner = owner;
	ReThrowError(edata);
}

/*
 * Run step(arg) in an internal subtransaction, kept if it answers true and
 * rolled back if it answers false, or raises (the error is raised again).
 * Rolling back gives up the locks the step took, row locks among them:
 * PostgreSQL gives those back only when the (sub)transaction ends.
 */
static bool
le_in_subxact_kept_if_true(bool (*step) (void *arg), void *arg)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	bool		kept = false;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		kept = step(arg);
	}
	PG_CATCH();
	{
		le_rethrow_after_subxact(cxt, owner);
	}
	PG_END_TRY();

	if (kept)
		ReleaseCurrentSubTransaction();
	else
		RollbackAndReleaseCurrentSubTransaction();
	MemoryContextSwitchTo(cxt);
	CurrentResourceOwner = owner;
	return kept;
}

typedef struct LeTakeOverArgs
{
	const char *name;
	int64		ttl_usecs;
	const LeIdentity *who;
	const LeaseRow *row;
	const LeHandover *handover;
} LeTakeOverArgs;

static bool
le_take_over_step(void *arg)
{
	LeTakeOverArgs *a = arg;

	return le_take_over(a->name, a->ttl_usecs, a->who, a->row, a->handover);
}

/*
 * le_take_over, keeping no row lock if it loses (I7): a try that found the
 * row changed by hand under its lock would otherwise keep the lock to the
 * end of its transaction, the valid holder's fence refused (LE001) and its
 * renewals and release waiting all that time.  So the takeover runs in a
 * subtransaction of its own, unless the caller's is rolled back on a loss
 * anyway (loss_rolled_back: a wait_for_leadership attempt).  Lock and
 * writes are made by the same subtransaction, so the row's new version
 * needs no MultiXact for the lock, except when the same transaction takes
 * the same lease over again: the second subtransaction then locks a
 * version the first one still has a lock on.  (The cost: a subtransaction
 * XID per takeover, about 7 µs each when one transaction makes thousands;
 * beyond 64 in one transaction other sessions' visibility checks read
 * pg_subtrans while it is open.)
 */
static bool
le_take_over_keeping_no_lock_on_loss(const char *name, int64 ttl_usecs,
									 const LeIdentity *who, const LeaseRow *row,
									 const LeHandover *handover,
									 bool loss_rolled_back)
{
	LeTakeOverArgs a = {name, ttl_usecs, who, row, handover};

	if (loss_rolled_back)
		return le_take_over(name, ttl_usecs, who, row, handover);
	return le_in_subxact_kept_if_true(le_take_over_step, &a);
}

typedef struct LeWaitAttemptArgs
{
	const char *name;
	int64		ttl_usecs;
	const LeIdentity *who;
	TimestampTz *retry_at;
	bool		first;
} LeWaitAttemptArgs;

static bool
le_wait_attempt_step(void *arg)
{
	LeWaitAttemptArgs *a = arg;
	bool		acquired = le_try_acquire_counted(a->name, a->ttl_usecs, a->who,
												  a->retry_at, true);

	if (!acquired && a->first)
		le_prepare_takeover(a->name);
	return acquired;
}

/*
 * One attempt of wait_for_leadership, in a subtransaction that is kept if
 * it won and rolled back if it lost.  A lost attempt changed nothing, and
 * rolling it back gives up the locks it took (the lease table's, the
 * writer lock, a row lock), so a waiter holds no lock while it sleeps: DDL
 * on the table, ALTER EXTENSION UPDATE among it, never queues behind a
 * waiter and, queued, stalls every other session's calls until the
 * waiter's timeout.  Locks the transaction held before the wait stay held.
 * The first attempt that loses also prepares the takeover
 * (le_prepare_takeover), in its subtransaction for the same reason:
 * reading and planning take locks.
 */
static bool
le_wait_attempt_in_subxact(const char *name, int64 ttl_usecs, const LeIdentity *who,
						   TimestampTz *retry_at, bool first)
{
	LeWaitAttemptArgs a = {name, ttl_usecs, who, retry_at, first};

	return le_in_subxact_kept_if_true(le_wait_attempt_step, &a);
}

/* Looks only: always rolled back. */
static bool
le_check_owner_step(void *arg)
{
	const char *name = arg;
	LeaseRow	row;

	le_store_read_for_answer(name, &row);
	le_check_owner(name, &row);
	return false;
}

/*
 * A waiter that may not take the name (I8) is refused before it ranks:
 * ranked, it would hold back the owner's own waiters while it lasted.  The
 * look is made in a subtransaction rolled back afterwards, like every
 * attempt, so that the waiter keeps no lock on the lease table while it
 * sleeps.
 */
static void
le_check_owner_in_subxact(const char *name)
{
	(void) le_in_subxact_kept_if_true(le_check_owner_step,
									  unconstify(char *, name));
}

/*
 * wait_for_leadership(name text, ttl interval, timeout interval,
 *					   holder text, priority integer) returns boolean
 *					   (1.0: without priority)
 *
 * Registered as a waiter with its priority while it waits (I10).
 * Tries, then sleeps until the lease could have become free: until its
 * expiry, or until a writer or fence on the name ends, or the holder's
 * session exits (wakeup.c).  Never polls when the library is preloaded.
 */
Datum
wait_for_leadership(PG_FUNCTION_ARGS)
{
	char	   *name = le_checked_name(fcinfo, 0);
	int64		ttl = le_checked_ttl(fcinfo, 1);
	bool		forever = PG_ARGISNULL(2);
	int64		timeout = forever ? 0 :
		le_checked_interval(fcinfo, 2, "timeout", 0, INT64CONST(100) * 365 * USECS_PER_DAY,
							"0 and 36500 days");
	char	   *holder = le_checked_optional_holder(fcinfo, 3);
	int32		priority = 0;
	LeIdentity	who;
	TimestampTz deadline;
	MemoryContext attempt_cxt;
	MemoryContext old_cxt;
	bool		acquired = false;
	volatile bool slept = false;

	if (PG_NARGS() > 4)
	{
		if (PG_ARGISNULL(4))
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("priority must not be null")));
		priority = PG_GETARG_INT32(4);
	}
	le_prevent_if_read_only("wait_for_leadership()");
	who = le_resolve_identity(holder);
	deadline = forever ? DT_NOEND : GetCurrentTimestamp() + timeout;
	attempt_cxt = AllocSetContextCreate(CurrentMemoryContext,
										"leader_election wait attempt",
										ALLOCSET_SMALL_SIZES);

	le_check_owner_in_subxact(name);

	PG_TRY();
	{
		/* Ranked (I10) before it counts in waiting_candidates. */
		le_waiter_register(name, who.holder, priority);
		le_wait_begin(name);
		for (;;)
		{
			TimestampTz retry_at;
			TimestampTz now;

			CHECK_FOR_INTERRUPTS();
			le_wait_attempt();
			old_cxt = MemoryContextSwitchTo(attempt_cxt);
			acquired = le_wait_attempt_in_subxact(name, ttl, &who, &retry_at, !slept);
			MemoryContextSwitchTo(old_cxt);
			MemoryContextReset(attempt_cxt);
			if (acquired)
				break;
			now = GetCurrentTimestamp();
			if (now >= deadline)
				break;
			if (!slept)
				le_stats_count(LE_STAT_WAITS);
			slept = true;
			le_wait_sleep(retry_at != 0 && retry_at < deadline ? retry_at : deadline);
		}
	}
	PG_FINALLY();
	{
		le_waiter_unregister(acquired);
		le_wait_end();
	}
	PG_END_TRY();

	MemoryContextDelete(attempt_cxt);
	PG_RETURN_BOOL(acquired);
}

/*
 * current_leader(name text) returns table (holder, term, acquired_at,
 * renewed_at, expires_at, session_bound, pid, role, application_name,
 * client_addr, info): one row if somebody validly holds the lease, else
 * none.  (1.0: without info.)
 */
typedef struct LeLeaderAnswer
{
	LeaseRow   *row;
	char	   *info;			/* the info of the row's term, or NULL */
} LeLeaderAnswer;

Datum
current_leader(PG_FUNCTION_ARGS)
{
	FuncCallContext *funcctx;

	if (SRF_IS_FIRSTCALL())
	{
		MemoryContext old;
		char	   *name;
		LeaseRow   *row;
		TupleDesc	desc;
		LeLeaderAnswer *answer;

		funcctx = SRF_FIRSTCALL_INIT();
		old = MemoryContextSwitchTo(funcctx->multi_call_memory_ctx);
		name = le_checked_name(fcinfo, 0);
		row = palloc(sizeof(LeaseRow));
		le_store_read_row_for_answer(name, row);
		le_check_owner(name, row);
		if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
			elog(ERROR, "current_leader must return a composite type");
		funcctx->tuple_desc = BlessTupleDesc(desc);
		funcctx->max_calls = le_lease_valid(row, GetCurrentTimestamp()) ? 1 : 0;
		answer = palloc0(sizeof(LeLeaderAnswer));
		answer->row = row;
		if (funcctx->max_calls > 0 && desc->natts > 10)
			answer->info = le_leader_info(name, row);
		funcctx->user_fctx = answer;
		MemoryContextSwitchTo(old);
	}

	funcctx = SRF_PERCALL_SETUP();
	if (funcctx->call_cntr < funcctx->max_calls)
	{
		LeLeaderAnswer *answer = funcctx->user_fctx;
		LeaseRow   *row = answer->row;
		Datum		values[11];
		bool		nulls[11] = {0};
		char	   *role = GetUserNameFromId(row->holder_role, true);

		values[0] = CStringGetTextDatum(row->holder);
		values[1] = Int64GetDatum(row->term);
		values[2] = TimestampTzGetDatum(row->acquired_at);
		values[3] = TimestampTzGetDatum(row->renewed_at);
		values[4] = TimestampTzGetDatum(row->expires_at);
		values[5] = BoolGetDatum(row->session_pid != 0);
		values[6] = Int32GetDatum(row->holder_pid);
		if (role != NULL)
			values[7] = DirectFunctionCall1(namein, CStringGetDatum(role));
		else
			nulls[7] = true;
		if (row->application_name != NULL)
			values[8] = CStringGetTextDatum(row->application_name);
		else
			nulls[8] = true;
		values[9] = row->client_addr;
		nulls[9] = row->client_addr_null;
		if (funcctx->tuple_desc->natts > 10)
		{
			if (answer->info != NULL)
				values[10] = DirectFunctionCall1(jsonb_in,
												 CStringGetDatum(answer->info));
			else
				nulls[10] = true;
		}
		SRF_RETURN_NEXT(funcctx,
						HeapTupleGetDatum(heap_form_tuple(funcctx->tuple_desc,
														  values, nulls)));
	}
	SRF_RETURN_DONE(funcctx);
}

/*
 * leader_election.lease_is_valid(holder, expires_at, session_pid,
 * session_start): I3 for the leaders view.
 */
Datum
le_lease_is_valid(PG_FUNCTION_ARGS)
{
	LeaseRow	row = {0};

	row.found = true;
	row.holder = PG_ARGISNULL(0) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(0));
	if (PG_ARGISNULL(1))
		PG_RETURN_BOOL(false);
	row.expires_at = PG_GETARG_TIMESTAMPTZ(1);
	row.session_pid = PG_ARGISNULL(2) ? 0 : PG_GETARG_INT32(2);
	row.session_start = PG_ARGISNULL(3) ? 0 : PG_GETARG_TIMESTAMPTZ(3);
	PG_RETURN_BOOL(le_lease_valid(&row, GetCurrentTimestamp()));
}

/*
 * leader_election.waiting_candidates(name text) returns integer: sessions
 * blocked in wait_for_leadership() for the name; NULL without preloading,
 * for a name the caller may not use, and for a name not in use (whose
 * first row may be another role's, not yet committed).
 */
PG_FUNCTION_INFO_V1(le_waiting_candidates_sql);
Datum
le_waiting_candidates_sql(PG_FUNCTION_ARGS)
{
	int32		n;
	char	   *name;
	LeaseRow	row;

	if (PG_ARGISNULL(0))
		PG_RETURN_NULL();
	name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	le_store_read(name, &row);
	if (!row.found || !has_privs_of_role(GetUserId(), row.owner))
		PG_RETURN_NULL();		/* perhaps another role's name: nothing to say (I8) */
	n = le_waiters_for_name(name);
	if (n < 0)
		PG_RETURN_NULL();
	PG_RETURN_INT32(n);
}
