/*-------------------------------------------------------------------------
 *
 * name_admin.c
 *	  The C half of the administrator's functions for lease names.
 *
 * leader_election.assign_name and release_name (1.0--1.1 upgrade script,
 * "Issue 12") take names back from roles that squat them, hand them to
 * other roles and reserve them in advance.  They are SQL
 * functions that write the lease and history tables directly; the lease
 * cache's triggers see those writes like any other direct change.  What SQL
 * cannot do is done here, once per name, before anything is written:
 *
 *	  - check the name as every other function does (input.c);
 *	  - refuse a read-only transaction or a hot standby (25006);
 *	  - note the name as changed by this transaction (wakeup.c), so that
 *	    waiters in wait_for_leadership() wake at commit instead of at the
 *	    old lease's expiry, and PREPARE TRANSACTION is refused as after any
 *	    other write of a lease;
 *	  - take the name's writer lock, held to the end of the transaction,
 *	    as every other change of the name does (lease.c, I1);
 *	  - refuse a session with temporary tables or types while the tables
 *	    carry code an administrator added (owner_rights.c, O3): the SQL
 *	    half writes them as its owner, a superuser;
 *	  - and, once a term was ended, keep its "released" event to be sent
 *	    like every other event (notify_queue.c: after the transaction
 *	    commits, after every earlier event of the name and before every
 *	    later one, N1).
 *
 * This file must never decide who may do what: the right to call the
 * administrator's functions is EXECUTE on them, granted by a superuser.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "tcop/utility.h"
#include "utils/builtins.h"

#include "leader_election.h"

PG_FUNCTION_INFO_V1(le_admin_change_begin);
PG_FUNCTION_INFO_V1(le_admin_note_released);
PG_FUNCTION_INFO_V1(le_admin_lock_owner);

/* leader_election.admin_change_begin(name text) returns text: the name */
Datum
le_admin_change_begin(PG_FUNCTION_ARGS)
{
	char	   *name = le_checked_name(fcinfo, 0);

	PreventCommandDuringRecovery("a change of a lease name");
	PreventCommandIfReadOnly("a change of a lease name");
	le_store_lock_for_admin_change();
	le_lock_name_writer(name);
	le_store_refuse_temp_objects();
	le_xact_touched(name);
	le_commit_note_write(name, 0);
	PG_RETURN_TEXT_P(cstring_to_text(name));
}

/*
 * leader_election.admin_note_released(name text, holder text, term bigint):
 * the "released" event of the term an administrator's function just ended.
 * Only under the name's writer lock (admin_change_begin), which keeps the
 * event in its place among the name's events.
 */
Datum
le_admin_note_released(PG_FUNCTION_ARGS)
{
	char	   *name = le_checked_name(fcinfo, 0);
	char	   *holder = text_to_cstring(PG_GETARG_TEXT_PP(1));
	int64		term = PG_GETARG_INT64(2);

	if (!le_holds_name_writer(name))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the released event of lease \"%s\" needs the name's writer lock", name),
				 errhint("Call leader_election.admin_change_begin first.")));
	le_notify(name, "released", holder, term, "released", NULL, NULL);
	PG_RETURN_VOID();
}

/*
 * leader_election.admin_lock_owner(owner regrole): assign_name is about to
 * give a name to this role; lock it as a first use does (role_guard.c), so
 * that a DROP ROLE in progress cannot miss the name.
 */
Datum
le_admin_lock_owner(PG_FUNCTION_ARGS)
{
	le_lock_new_owner(PG_GETARG_OID(0), false);
	PG_RETURN_VOID();
}
